"""The typed, validated view of one stack's configuration.

KEYS is the single table of every project config key: its type, default and description.
Pulumi.yaml's `config:` block is generated from it (`python -m stacks.schema --write`) and a
test keeps the two equal. `load()` turns raw config strings into a frozen StackConfig and
reports every problem at once, each naming the key, the bad value and what is allowed, before
any resource is registered.
"""

from __future__ import annotations

import ipaddress
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from stacks import versions
from stacks.accelerators import ACCELERATORS, Accelerator
from stacks.grpo import GrpoSettings, preflight

PROJECT = "verl-gke"
PLACEHOLDER_PROJECT = "replace-with-your-project-id"  # what the stack files ship with


class ConfigError(ValueError):
    """Bad stack configuration; the message lists every problem, one per line."""

    def __init__(self, problems: list[str]):
        self.problems = problems
        super().__init__("invalid stack configuration:\n  - " + "\n  - ".join(problems))


@dataclass(frozen=True)
class Key:
    name: str  # without namespace for project keys; "gcp:..." for provider keys
    type: str  # Pulumi project config schema type: string | integer | boolean | array
    default: Any
    description: str
    secret: bool = False

    @property
    def full(self) -> str:
        return self.name if ":" in self.name else f"{PROJECT}:{self.name}"


_RDMA_DEFAULT = [f"192.168.{n + 1}.0/24" for n in range(8)]

KEYS: tuple[Key, ...] = (
    Key("gcp:project", "string", None, "Google Cloud project id (required)."),
    Key("gcp:region", "string", None, "Region for the cluster, subnets and bucket (required)."),
    Key("gcp:zone", "string", None, "Zone in gcp:region that has the GPUs (required)."),
    Key("accelerator", "string", "b200", "GPU profile: b200 (A4, a4-highgpu-8g) or h200 (A3 Ultra)."),
    Key("clusterMode", "string", "standard", "GKE mode: autopilot or standard."),
    Key("gpuNodes", "integer", 2, "Number of 8-GPU nodes (Ray GPU workers)."),
    Key("capacity", "string", "spot", "GPU capacity: spot, on-demand, reservation or flex-start."),
    Key("reservation", "string", "", "Compute Engine reservation name (only with capacity=reservation)."),
    Key("namePrefix", "string", "verl", "Prefix of every GCP resource name (lowercase, <= 20 chars)."),
    Key("namespace", "string", "verl", "Kubernetes namespace for the Ray cluster and jobs."),
    Key("primaryCidr", "string", "10.10.0.0/20", "Primary (node) subnet of the cluster VPC."),
    Key("podsCidr", "string", "10.20.0.0/14", "Secondary range for pods."),
    Key("servicesCidr", "string", "10.30.0.0/20", "Secondary range for services."),
    Key("gvnicCidr", "string", "192.168.0.0/24", "Subnet of the additional gVNIC network."),
    Key("rdmaCidrs", "array", _RDMA_DEFAULT, "One subnet per GPU NIC on the RoCE network, in NIC order."),
    Key("mtu", "integer", 8896, "MTU of the gVNIC and RDMA networks."),
    Key("gkeVersion", "string", "", "Minimum GKE version; empty = the accelerator's minimum."),
    Key("releaseChannel", "string", "REGULAR", "GKE release channel: RAPID, REGULAR or STABLE."),
    Key("cpuMachineType", "string", "c2-standard-16", "Machine type of the CPU pool (Standard)."),
    Key("cpuNodesMin", "integer", 1, "CPU pool autoscaling minimum (Standard)."),
    Key("cpuNodesMax", "integer", 5, "CPU pool autoscaling maximum (Standard)."),
    Key("deletionProtection", "boolean", False, "GKE deletion protection (true blocks pulumi destroy)."),
    Key("bucketLocation", "string", "", "Bucket location; empty = gcp:region."),
    Key("bucketDeleteOnDestroy", "boolean", False,
        "Delete the bucket and ALL its contents (weights, checkpoints) on pulumi destroy."),
    Key("model", "string", "Qwen/Qwen2.5-32B-Instruct", "Hugging Face model id to train."),
    Key("hfToken", "string", None, "Hugging Face token (set with --secret; needed for gated models).",
        secret=True),
    Key("verlVersion", "string", versions.VERL_VERSION, "verl git tag staged into the bucket."),
    Key("image", "string", versions.VERL_IMAGE, "Container image for Ray pods and data staging."),
    Key("rayVersion", "string", versions.RAY_VERSION, "Ray version inside the image (KubeRay rayVersion)."),
    Key("submitJob", "boolean", True, "Submit the GRPO job once the Ray cluster can run it."),
    Key("jobReadyTimeoutMinutes", "integer", 90, "How long to wait for the Ray head and all GPUs."),
    Key("jobWaitForCompletion", "boolean", False, "Keep pulumi up running until the job ends."),
    Key("jobCompletionTimeoutMinutes", "integer", 1440, "Bound on waiting for completion."),
    Key("jobResubmitOnFailure", "boolean", True,
        "On refresh, resubmit a FAILED/STOPPED job (resumes from the last checkpoint)."),
    Key("grpoTrainBatchSize", "integer", 256, "data.train_batch_size (prompts per step)."),
    Key("grpoRolloutN", "integer", 8, "actor_rollout_ref.rollout.n (responses per prompt)."),
    Key("grpoMaxPromptLength", "integer", 512, "data.max_prompt_length (tokens)."),
    Key("grpoMaxResponseLength", "integer", 512, "data.max_response_length (tokens)."),
    Key("grpoLearningRate", "string", "1e-6", "actor_rollout_ref.actor.optim.lr."),
    Key("grpoPpoMiniBatchSize", "integer", 256, "actor_rollout_ref.actor.ppo_mini_batch_size."),
    Key("grpoPpoMicroBatchSizePerGpu", "integer", 16, "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu."),
    Key("grpoLogProbMicroBatchSizePerGpu", "integer", 8,
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu."),
    Key("grpoRefLogProbMicroBatchSizePerGpu", "integer", 4,
        "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu."),
    Key("grpoTensorParallelSize", "integer", 8, "actor_rollout_ref.rollout.tensor_model_parallel_size."),
    Key("grpoGpuMemoryUtilization", "string", "0.6", "actor_rollout_ref.rollout.gpu_memory_utilization."),
    Key("grpoRolloutEngine", "string", "vllm", "actor_rollout_ref.rollout.name: vllm or sglang."),
    Key("grpoActorStrategy", "string", "fsdp2", "actor_rollout_ref.actor.strategy: fsdp or fsdp2."),
    Key("grpoKlLossCoef", "string", "0.001", "actor_rollout_ref.actor.kl_loss_coef (KL as a loss term)."),
    Key("grpoKlLossType", "string", "low_var_kl", "actor_rollout_ref.actor.kl_loss_type."),
    Key("grpoEntropyCoeff", "string", "0", "actor_rollout_ref.actor.entropy_coeff."),
    Key("grpoTotalEpochs", "integer", 2, "trainer.total_epochs."),
    Key("grpoSaveFreq", "integer", 10, "trainer.save_freq (steps between checkpoints)."),
    Key("grpoTestFreq", "integer", 10, "trainer.test_freq (steps between validations)."),
    Key("grpoValBeforeTrain", "boolean", False, "trainer.val_before_train."),
    Key("grpoLogger", "array", ["console"], "trainer.logger backends, e.g. [console, wandb]."),
    Key("grpoExtraOverrides", "array", [], "Extra verl Hydra overrides (key=value), appended last."),
)
KEYS_BY_NAME = {k.name: k for k in KEYS}

CAPACITIES = ("spot", "on-demand", "reservation", "flex-start")
MODES = ("autopilot", "standard")
CHANNELS = ("RAPID", "REGULAR", "STABLE")
# Organisations whose models are gated on the hub: a token is required up front.
GATED_MODEL_ORGS = ("meta-llama", "google", "mistralai")

_RFC1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_PROJECT_ID = re.compile(r"^[a-z][a-z0-9-]{4,28}[a-z0-9]$")
_REGION = re.compile(r"^[a-z]+-[a-z]+[0-9]+$")
_GKE_VERSION = re.compile(r"^(\d+)\.(\d+)\.(\d+)-gke\.(\d+)$")
_MACHINE = re.compile(r"^[a-z][a-z0-9]*-[a-z]+-(\d+)(-[a-z0-9]+)?$")
_MODEL = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
_MAX_PREFIX = 20  # keeps "<prefix>-rdma-sub-N", the cluster (<= 40) and bucket names legal
# Ray head request (tutorial): the CPU pool's machine must hold it with room for DaemonSets.
HEAD_CPU = 12


@dataclass(frozen=True)
class NetworkConfig:
    primary_cidr: str
    pods_cidr: str
    services_cidr: str
    gvnic_cidr: str
    rdma_cidrs: tuple[str, ...]
    mtu: int


@dataclass(frozen=True)
class ClusterConfig:
    mode: str
    min_version: str
    release_channel: str
    cpu_machine_type: str
    cpu_nodes_min: int
    cpu_nodes_max: int
    deletion_protection: bool

    @property
    def autopilot(self) -> bool:
        return self.mode == "autopilot"


@dataclass(frozen=True)
class JobSettings:
    submit: bool
    ready_timeout_s: int
    wait_for_completion: bool
    completion_timeout_s: int
    resubmit_on_failure: bool


@dataclass(frozen=True)
class StackConfig:
    stack: str
    project: str
    region: str
    zone: str
    accelerator: Accelerator
    gpu_nodes: int
    capacity: str
    reservation: str
    prefix: str
    namespace: str
    network: NetworkConfig
    cluster: ClusterConfig
    bucket_location: str
    bucket_delete_on_destroy: bool
    model: str
    has_hf_token: bool
    verl_version: str
    image: str
    ray_version: str
    grpo: GrpoSettings
    job: JobSettings

    @property
    def total_gpus(self) -> int:
        return self.gpu_nodes * self.accelerator.gpus_per_node

    def name(self, role: str) -> str:
        """GCP resource name for a role, e.g. name('rdma-net') -> 'verl-rdma-net'."""
        return f"{self.prefix}-{role}"


class _Reader:
    """Typed access to raw config strings that records problems instead of raising."""

    def __init__(self, raw: Mapping[str, str]):
        self.raw = raw
        self.problems: list[str] = []

    def bad(self, key: str, value: object, allowed: str) -> None:
        self.problems.append(f"{KEYS_BY_NAME[key].full} = {value!r}: {allowed}")

    def _value(self, key: str) -> Any:
        spec = KEYS_BY_NAME[key]
        if spec.full in self.raw:
            return self.raw[spec.full]
        return spec.default

    def str(self, key: str) -> str:
        value = self._value(key)
        if value is None:
            self.problems.append(f"{KEYS_BY_NAME[key].full} is not set: {KEYS_BY_NAME[key].description}")
            return ""
        return str(value).strip()

    def int(self, key: str, minimum: int | None = None) -> int:
        value = self._value(key)
        try:
            number = int(str(value).strip())
        except (TypeError, ValueError):
            self.bad(key, value, "must be an integer")
            return minimum or 0
        if minimum is not None and number < minimum:
            self.bad(key, number, f"must be an integer >= {minimum}")
        return number

    def float(self, key: str, low: float, high: float, low_open: bool = False) -> float:
        value = self._value(key)
        try:
            number = float(str(value).strip())
        except (TypeError, ValueError):
            self.bad(key, value, "must be a number")
            return low
        if number < low or number > high or (low_open and number == low):
            bracket = "(" if low_open else "["
            self.bad(key, number, f"must be a number in {bracket}{low}, {high}]")
        return number

    def bool(self, key: str) -> bool:
        value = self._value(key)
        if isinstance(value, bool):
            return value
        text = str(value).strip().lower()
        if text not in ("true", "false"):
            self.bad(key, value, "must be true or false")
            return False
        return text == "true"

    def list(self, key: str) -> tuple[str, ...]:
        value = self._value(key)
        if isinstance(value, str):
            try:
                value = json.loads(value)
            except json.JSONDecodeError:
                self.bad(key, value, "must be a list of strings, e.g. [\"a\", \"b\"]")
                return ()
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            self.bad(key, value, "must be a list of strings")
            return ()
        return tuple(value)

    def choice(self, key: str, allowed: tuple[str, ...]) -> str:
        value = self.str(key)
        if value not in allowed:
            self.bad(key, value, "must be one of " + ", ".join(allowed))
        return value


def parse_gke_version(version: str) -> tuple[int, ...] | None:
    m = _GKE_VERSION.match(version)
    return tuple(int(g) for g in m.groups()) if m else None


def load(raw: Mapping[str, str], stack: str, allow_placeholder_project: bool = False) -> StackConfig:
    """Validate raw config (full keys -> strings, as Pulumi stores them) into a StackConfig."""
    r = _Reader(raw)
    unknown = sorted(k for k in raw if k.startswith(f"{PROJECT}:") and k.split(":", 1)[1] not in KEYS_BY_NAME)
    for key in unknown:
        r.problems.append(f"{key} is not a known key (see Pulumi.yaml for the declared keys)")

    project = r.str("gcp:project")
    if project and not _PROJECT_ID.match(project):
        r.bad("gcp:project", project, "must be a project id: 6-30 chars, lowercase letters, digits, hyphens")
    if project == PLACEHOLDER_PROJECT and not allow_placeholder_project:
        r.bad("gcp:project", project, "is the placeholder; run `pulumi config set gcp:project <your-project>`")
    region = r.str("gcp:region")
    if region and not _REGION.match(region):
        r.bad("gcp:region", region, "must be a region such as us-central1")
    zone = r.str("gcp:zone")
    if zone and region and not re.fullmatch(re.escape(region) + r"-[a-z]", zone):
        r.bad("gcp:zone", zone, f"must be a zone in gcp:region {region} (e.g. {region}-b)")

    acc_key = r.choice("accelerator", tuple(ACCELERATORS))
    acc = ACCELERATORS.get(acc_key, ACCELERATORS["b200"])
    mode = r.choice("clusterMode", MODES)
    gpu_nodes = r.int("gpuNodes", minimum=1)
    capacity = r.choice("capacity", CAPACITIES)
    reservation = r.str("reservation")
    if capacity == "reservation" and not reservation:
        r.bad("reservation", reservation, "must name a Compute Engine reservation when capacity=reservation")
    if reservation and capacity != "reservation":
        why = {"spot": "spot VMs cannot consume reservations",
               "flex-start": "flex-start capacity cannot consume reservations"}.get(capacity, "it is unused")
        r.bad("reservation", reservation, f"is set but capacity={capacity}: {why}; "
              "set capacity=reservation or unset reservation")
    if reservation and not _RFC1035.match(reservation):
        r.bad("reservation", reservation, "must be a reservation name (lowercase letters, digits, hyphens)")

    prefix = r.str("namePrefix")
    if not (_RFC1035.match(prefix) and len(prefix) <= _MAX_PREFIX):
        r.bad("namePrefix", prefix, f"must be 1-{_MAX_PREFIX} lowercase letters, digits or hyphens, "
              "starting with a letter and not ending with a hyphen")
    namespace = r.str("namespace")
    if not (_RFC1035.match(namespace) and len(namespace) <= 63):
        r.bad("namespace", namespace, "must be a DNS label: <= 63 lowercase letters, digits, hyphens")

    network = _network(r, acc, gpu_nodes)
    cluster = _cluster(r, acc, mode, capacity)

    model = r.str("model")
    if not _MODEL.match(model):
        r.bad("model", model, "must be a Hugging Face model id such as Qwen/Qwen2.5-32B-Instruct")
    has_token = bool(raw.get(KEYS_BY_NAME["hfToken"].full))
    if model.split("/")[0] in GATED_MODEL_ORGS and not has_token:
        r.bad("hfToken", "<unset>", f"model {model} is gated on the hub: run "
              "`pulumi config set --secret hfToken <token>` with a token that has access")

    verl_version = r.str("verlVersion")
    if not re.fullmatch(r"v\d+\.\d+\.\d+(\.post\d+)?", verl_version):
        r.bad("verlVersion", verl_version, "must be a verl release tag such as v0.6.1")
    image = r.str("image")
    if not re.fullmatch(r"[\w./:@-]+", image) or ":" not in image.split("/")[-1] and "@" not in image:
        r.bad("image", image, "must be an image reference with a tag or digest")
    ray_version = r.str("rayVersion")
    if not re.fullmatch(r"\d+\.\d+\.\d+", ray_version):
        r.bad("rayVersion", ray_version, "must be a Ray version such as 2.49.2")

    bucket_location = r.str("bucketLocation") or region
    delete_bucket = r.bool("bucketDeleteOnDestroy")
    parsed_so_far = len(r.problems)
    grpo = _grpo(r)
    if len(r.problems) == parsed_so_far and gpu_nodes >= 1:  # arithmetic only on values that parsed
        r.problems += preflight(grpo, nnodes=gpu_nodes, gpus_per_node=acc.gpus_per_node, model=model)
    job = JobSettings(
        submit=r.bool("submitJob"),
        ready_timeout_s=r.int("jobReadyTimeoutMinutes", minimum=1) * 60,
        wait_for_completion=r.bool("jobWaitForCompletion"),
        completion_timeout_s=r.int("jobCompletionTimeoutMinutes", minimum=1) * 60,
        resubmit_on_failure=r.bool("jobResubmitOnFailure"),
    )
    if r.problems:
        raise ConfigError(r.problems)
    return StackConfig(
        stack=stack, project=project, region=region, zone=zone, accelerator=acc, gpu_nodes=gpu_nodes,
        capacity=capacity, reservation=reservation, prefix=prefix, namespace=namespace, network=network,
        cluster=cluster, bucket_location=bucket_location,
        bucket_delete_on_destroy=delete_bucket, model=model, has_hf_token=has_token,
        verl_version=verl_version, image=image, ray_version=ray_version, grpo=grpo, job=job,
    )


def _network(r: _Reader, acc: Accelerator, gpu_nodes: int) -> NetworkConfig:
    nets: dict[str, ipaddress.IPv4Network] = {}

    def cidr(key: str, value: str, max_prefix: int, label: str | None = None) -> None:
        try:
            net = ipaddress.ip_network(value, strict=True)
        except ValueError as err:
            r.bad(key, value, f"must be an IPv4 CIDR such as 192.168.0.0/24 ({err})")
            return
        if net.version != 4 or not net.is_private:
            r.bad(key, value, "must be a private (RFC 1918) IPv4 range")
            return
        if net.prefixlen > max_prefix:
            r.bad(key, value, f"is too small: use a /{max_prefix} or larger")
            return
        # GCP keeps 4 addresses per subnet; each GPU node needs its own address on every NIC.
        if key in ("gvnicCidr", "rdmaCidrs") and net.num_addresses - 4 < gpu_nodes:
            r.bad(key, value, f"has {net.num_addresses - 4} usable addresses for {gpu_nodes} GPU nodes")
            return
        nets[label or key] = net

    primary, pods, services = r.str("primaryCidr"), r.str("podsCidr"), r.str("servicesCidr")
    gvnic = r.str("gvnicCidr")
    rdma = r.list("rdmaCidrs")
    cidr("primaryCidr", primary, 24)
    cidr("podsCidr", pods, 21)
    cidr("servicesCidr", services, 27)
    cidr("gvnicCidr", gvnic, 29)
    if len(rdma) != acc.rdma_nics:
        r.bad("rdmaCidrs", list(rdma), f"must list {acc.rdma_nics} subnets, one per RDMA NIC of {acc.key}")
    for i, value in enumerate(rdma):
        cidr("rdmaCidrs", value, 29, label=f"rdmaCidrs[{i}]")
    labels = list(nets)
    for i, a in enumerate(labels):
        for b in labels[i + 1:]:
            if nets[a].overlaps(nets[b]):
                key = a.split("[")[0]
                r.bad(key, str(nets[a]), f"overlaps {b} = {nets[b]}: every range must be disjoint")
    mtu = r.int("mtu")
    if not 1300 <= mtu <= 8896:
        r.bad("mtu", mtu, "must be between 1300 and 8896 (GCP VPC limits)")
    return NetworkConfig(primary, pods, services, gvnic, rdma, mtu)


def _cluster(r: _Reader, acc: Accelerator, mode: str, capacity: str) -> ClusterConfig:
    version = r.str("gkeVersion") or acc.min_gke_version
    parsed = parse_gke_version(version)
    if parsed is None:
        r.bad("gkeVersion", version, "must be a GKE version such as 1.32.2-gke.1422000")
    elif parsed < parse_gke_version(acc.min_gke_version):
        r.bad("gkeVersion", version, f"is below {acc.min_gke_version}, the minimum for {acc.key}")
    channel = r.choice("releaseChannel", CHANNELS)
    machine = r.str("cpuMachineType")
    m = _MACHINE.match(machine)
    if not m:
        r.bad("cpuMachineType", machine, "must be a machine type such as c2-standard-16")
    elif int(m.group(1)) <= HEAD_CPU:
        r.bad("cpuMachineType", machine, f"has {m.group(1)} vCPUs; the Ray head requests {HEAD_CPU}: "
              "use 16 or more vCPUs (e.g. c2-standard-16)")
    lo = r.int("cpuNodesMin", minimum=1)
    hi = r.int("cpuNodesMax", minimum=1)
    if hi < lo:
        r.bad("cpuNodesMax", hi, f"must be >= cpuNodesMin ({lo})")
    return ClusterConfig(mode, version, channel, machine, lo, hi, r.bool("deletionProtection"))


def _grpo(r: _Reader) -> GrpoSettings:
    return GrpoSettings(
        train_batch_size=r.int("grpoTrainBatchSize", minimum=1),
        rollout_n=r.int("grpoRolloutN", minimum=1),
        max_prompt_length=r.int("grpoMaxPromptLength", minimum=1),
        max_response_length=r.int("grpoMaxResponseLength", minimum=1),
        learning_rate=r.float("grpoLearningRate", 0.0, 1.0, low_open=True),
        ppo_mini_batch_size=r.int("grpoPpoMiniBatchSize", minimum=1),
        ppo_micro_batch_size_per_gpu=r.int("grpoPpoMicroBatchSizePerGpu", minimum=1),
        log_prob_micro_batch_size_per_gpu=r.int("grpoLogProbMicroBatchSizePerGpu", minimum=1),
        ref_log_prob_micro_batch_size_per_gpu=r.int("grpoRefLogProbMicroBatchSizePerGpu", minimum=1),
        tensor_parallel_size=r.int("grpoTensorParallelSize", minimum=1),
        gpu_memory_utilization=r.float("grpoGpuMemoryUtilization", 0.0, 1.0, low_open=True),
        rollout_engine=r.choice("grpoRolloutEngine", ("vllm", "sglang")),
        actor_strategy=r.choice("grpoActorStrategy", ("fsdp", "fsdp2")),
        kl_loss_coef=r.float("grpoKlLossCoef", 0.0, 10.0),
        kl_loss_type=r.choice("grpoKlLossType", ("kl", "k1", "abs", "mse", "k2", "low_var_kl", "k3", "full")),
        entropy_coeff=r.float("grpoEntropyCoeff", 0.0, 10.0),
        total_epochs=r.int("grpoTotalEpochs", minimum=1),
        save_freq=r.int("grpoSaveFreq", minimum=-1),
        test_freq=r.int("grpoTestFreq", minimum=-1),
        val_before_train=r.bool("grpoValBeforeTrain"),
        logger=r.list("grpoLogger"),
        extra_overrides=r.list("grpoExtraOverrides"),
    )


def from_pulumi(stack: str) -> StackConfig:
    """Load from the running Pulumi program's config (the CLI or the mocks set it)."""
    import pulumi.runtime.config as rc

    # The CLI passes config in PULUMI_CONFIG; mocks and tests set it in-process.
    return load({**rc.get_config_env(), **rc.CONFIG.get()}, stack)
