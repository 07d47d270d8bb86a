"""The typed, validated view of one stack's configuration: the one validation gate.

`load()` turns raw config strings (as the Pulumi CLI hands them to the program) into a frozen
StackConfig and reports every problem at once, each naming the key, the bad value and what is
allowed, before any resource is registered. It checks every rule a component would enforce on a
config-derived value, with the component's own implementation (catalog.naming, catalog.capacity),
so a config that passes here never fails inside a component.
"""

from __future__ import annotations

import difflib
import ipaddress
import json
import math
import re
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from catalog import gcp_ranges, gcsfuse, gke, naming, storage_locations, zones
from catalog.accelerators import (
    ACCELERATORS,
    Accelerator,
    gke_reserved_cpu,
    gke_reserved_memory_gib,
)
from catalog.capacity import CAPACITIES, Capacity
from catalog.datasets import GSM8K, DatasetFacts
from catalog.gcsfuse import STANDARD_SIDECAR_REQUEST
from catalog.gke import Floor
from catalog.migrations import MIGRATIONS
from catalog.models import is_gated
from recipe import tuning
from recipe.grpo import GSM8K_TRAIN_ROWS, GrpoSettings, preflight, task_override_problems
from recipe.grpo import warnings as grpo_warnings
from stacks import component_rules, dataset
from stacks.keys import KEYS, KEYS_BY_NAME, PROJECT

__all__ = ["KEYS", "KEYS_BY_NAME", "PROJECT", "ConfigError", "StackConfig", "load", "from_pulumi"]
PLACEHOLDER_PROJECT = "replace-with-your-project-id"  # what the stack files ship with


class ConfigError(ValueError):
    """Bad stack configuration; the message lists every problem, one per line."""

    def __init__(self, problems: list[str]):
        # Every problem stays readable whatever the input: a 1 MB value must not make a 3 MB message.
        self.problems = [p if len(p) <= 2 * MAX_LINE else f"{p[:MAX_LINE]} [...] {p[-MAX_LINE:]}" for p in problems]
        # ...and a file of 20,000 stray keys must not print 20,000 lines: the first MAX_LINES, then a count.
        shown_lines = self.problems[:MAX_LINES] + ([f"... and {len(self.problems) - MAX_LINES} more problems"]
                                                   if len(self.problems) > MAX_LINES else [])
        super().__init__("invalid stack configuration:\n  - " + "\n  - ".join(shown_lines))


MAX_LINE = 300  # characters kept from each end of an over-long problem line
MAX_LINES = 100  # problem lines printed; ConfigError.problems keeps them all
MODES = ("autopilot", "standard")
CHANNELS = ("RAPID", "REGULAR", "STABLE")
MAX_PREFIX = 20  # keeps "<prefix>-rdma-sub-N", the cluster (<= 40) and bucket names legal
_ATOI = re.compile(r"^[+-]?[0-9]+$")  # what Go's strconv.Atoi takes (the CLI's `integer` check)
# Upper bound of every count, and why. GKE: "Nodes per node pool zone: 1,000"
# (https://cloud.google.com/kubernetes-engine/quotas); each pool here lives in one zone or is
# bounded per zone. Qwen2.5's full context is 131,072 tokens (Qwen2.5 model cards).
_GKE_POOL = (1000, "GKE allows 1,000 nodes per node pool per zone")
_CONTEXT = (131072, "Qwen2.5's full context is 131,072 tokens")
_GPUS_PER_NODE = max(a.gpus_per_node for a in ACCELERATORS.values())
_BOUNDS: dict[str, tuple[int, str]] = {
    "gpuNodes": _GKE_POOL,
    "cpuNodesMin": _GKE_POOL,
    "cpuNodesMax": _GKE_POOL,
    "mtu": (8896, "the largest MTU a GCP VPC allows, https://cloud.google.com/vpc/docs/mtu"),
    # How long `pulumi up` may block: a week / a month; more is a unit slip (seconds typed as minutes).
    "jobReadyTimeoutMinutes": (7 * 24 * 60, "one week"),
    # Cloud Storage soft delete retention: at most 90 days (soft_delete_policy docs).
    "bucketSoftDeleteDays": (90, "Cloud Storage keeps soft-deleted objects at most 90 days"),
    "jobMaxRecoveries": (100, "recoveries of one run; more is a typo"),
    "rayHeadCpu": (256, "vCPUs of the one CPU node the head runs on; more is a typo"),
    "rayHeadMemoryGib": (2048, "memory of the one CPU node the head runs on; more is a typo"),
    "grpoTotalTrainingSteps": (1_000_000, "optimizer steps of one run; more is a typo"),
    "jobCompletionTimeoutMinutes": (30 * 24 * 60, "30 days"),
    "grpoTrainBatchSize": (GSM8K_TRAIN_ROWS, "the GSM8K training rows"),
    "grpoPpoMiniBatchSize": (GSM8K_TRAIN_ROWS, "the GSM8K training rows"),
    "grpoRolloutN": (1024, "responses per prompt; more is a typo"),
    "grpoMaxPromptLength": _CONTEXT,
    "grpoMaxResponseLength": _CONTEXT,
    # Per-GPU micro batches are split from at most a full batch's samples.
    "grpoPpoMicroBatchSizePerGpu": (GSM8K_TRAIN_ROWS * 1024, "a full batch's samples"),
    "grpoLogProbMicroBatchSizePerGpu": (GSM8K_TRAIN_ROWS * 1024, "a full batch's samples"),
    "grpoRefLogProbMicroBatchSizePerGpu": (GSM8K_TRAIN_ROWS * 1024, "a full batch's samples"),
    "grpoTensorParallelSize": (_GPUS_PER_NODE, "vLLM shards a model within one node's GPUs"),
    "dataTrainRows": (10**10, "rows; more is a typo"),
    "grpoTotalEpochs": (1000, "passes over the training data; more is a typo"),
    "grpoSaveFreq": (1_000_000, "steps; more is a typo"),
    "grpoTestFreq": (1_000_000, "steps; more is a typo"),
    "grpoMaxCheckpointsToKeep": (1000, "checkpoints; more is a typo"),
    "grpoPpoMaxTokenLenPerGpu": (4 * 1024 * 1024, "tokens per GPU in one pass; more is a typo"),
    "grpoFsdpSize": (4096, "GPUs in one FSDP shard group; more is a typo"),
    "grpoLogProbMaxTokenLenPerGpu": (4 * 1024 * 1024, "tokens per GPU in one pass; more is a typo"),
    "budgetMonthly": (10**9, "a monthly budget; more is a typo"),
}
MAXIMUM = {k: v[0] for k, v in _BOUNDS.items()}
MAX_WHY = {k: v[1] for k, v in _BOUNDS.items()}


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
    gke_version: str  # the user's pin: "" = the channel's newest, "1.33" = its newest 1.33 patch, or a full version
    release_channel: str
    floors: tuple[Floor, ...]  # the accelerator's, the capacity type's and the GCS FUSE options'
    authorized_networks: tuple[str, ...]  # IP endpoint CIDRs; empty = the IP endpoint is off
    cpu_machine_type: str
    cpu_nodes_min: int
    cpu_nodes_max: int
    deletion_protection: bool
    zonal: bool = False  # Standard: the cluster lives in gcp:zone (zonalCluster)
    head_cpu: int = 12  # the Ray head's request (rayHeadCpu / rayHeadMemoryGib)
    head_memory_gib: int = 32
    migrations: frozenset[str] = frozenset()  # catalog.migrations names applied to live resources

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
    max_recoveries: int = 3
    release_gpus: bool = True
    merge_model: bool = True


@dataclass(frozen=True)
class BudgetConfig:
    billing_account: str
    monthly_amount: int


@dataclass(frozen=True)
class StackConfig:
    stack: str
    project: str
    region: str
    zone: str
    accelerator: Accelerator
    gpu_nodes: int
    capacity: Capacity
    prefix: str
    namespace: str
    network: NetworkConfig
    cluster: ClusterConfig
    bucket_location: str
    bucket_delete_on_destroy: bool
    model: str
    has_hf_token: bool
    has_wandb_key: bool
    verl_version: str
    image: str
    ray_version: str
    grpo: GrpoSettings  # every auto setting derived (recipe.tuning)
    job: JobSettings
    budget: BudgetConfig | None = None  # billingAccount + budgetMonthly, both or neither
    warnings: tuple[str, ...] = ()  # runs, but slower than it should (printed by the plan and `pulumi up`)
    bucket_soft_delete_days: int = 0
    image_mirror: bool = True
    bucket_name: str = ""  # an existing bucket to adopt (import); empty: the stack's own
    # The run's data: GSM8K (task None) or the stack's own files (dataTrainFile, ...), read offline.
    data: DatasetFacts = GSM8K
    task: dataset.TaskSpec | None = None
    task_notes: tuple[str, ...] = ()  # what the offline reading found (the plan prints it)

    @property
    def total_gpus(self) -> int:
        return self.gpu_nodes * self.accelerator.gpus_per_node

    @property
    def cluster_location(self) -> str:
        """Where the GKE control plane lives: the zone for a zonal cluster, else the region."""
        return self.zone if self.cluster.zonal else self.region

    def name(self, role: str) -> str:
        """GCP resource name for a role, e.g. name('rdma-net') -> 'verl-rdma-net'."""
        return f"{self.prefix}-{role}"


class _Reader:
    """Typed access to raw config strings that records problems instead of raising."""

    def __init__(self, raw: Mapping[str, str]):
        self.raw = raw
        self.problems: list[str] = []
        self.missing: set[str] = set()
        self.bounds: dict[str, tuple[int, str]] = {}  # per-stack maxima (the stack's own data rows)

    def bad(self, key: str, value: object, allowed: str) -> None:
        self.problems.append(f"{KEYS_BY_NAME[key].full} = {shown(value)}: {allowed}")

    def _value(self, key: str) -> Any:
        spec = KEYS_BY_NAME[key]
        if spec.full in self.raw:
            return self.raw[spec.full]
        return spec.default

    def str(self, key: str) -> str:
        """The value as text; a required key (no default) that is unset or empty is reported once."""
        value = self._value(key)
        text = "" if value is None else str(value).strip()
        if key.startswith("gcp:") and text and text != str(value):
            # The Google provider reads gcp:* keys itself, as typed: "my-project\n" is not my-project there.
            self.bad(key, value, "has leading or trailing whitespace, which the Google provider keeps: remove it")
        if not text and KEYS_BY_NAME[key].default is None:
            self.problems.append(f"{KEYS_BY_NAME[key].full} is not set: {KEYS_BY_NAME[key].description}")
            self.missing.add(key)
        return text

    def check(self, key: str, value: object, problem: str | None) -> None:
        """Record `problem` (a catalog rule's answer) against key, unless the key was reported missing."""
        if problem and key not in self.missing:
            self.bad(key, value, problem)

    def int(self, key: str, minimum: int | None = None) -> int:
        """An integer as the Pulumi CLI accepts one for an `integer` key (Go strconv.Atoi: optional
        sign, decimal digits, int64), at most MAXIMUM[key]: every count has an upper bound."""
        value = self._value(key)
        text = str(value)
        maximum, why = self.bounds.get(key, (MAXIMUM[key], MAX_WHY[key]))
        if not _ATOI.fullmatch(text) or not -(2**63) <= int(text) < 2**63:
            self.bad(key, value, f"must be an integer from {minimum if minimum is not None else 0} "
                     f"to {maximum}")
            return minimum or 0
        number = int(text)
        if minimum is not None and number < minimum:
            self.bad(key, number, f"must be an integer >= {minimum}")
        elif number > maximum:
            self.bad(key, number, f"must be at most {maximum} ({why})")
            return minimum or 0
        return number

    def float(self, key: str, low: float, high: float, low_open: bool = False) -> float:
        value = self._value(key)
        try:
            number = float(str(value).strip())
        except (TypeError, ValueError):
            self.bad(key, value, "must be a number")
            return low
        if not math.isfinite(number):  # float() takes nan and inf; no comparison below would catch nan
            self.bad(key, value, f"must be a finite number in [{low}, {high}]")
            return low
        if number < low or number > high or (low_open and number == low):
            bracket = "(" if low_open else "["
            self.bad(key, number, f"must be a number in {bracket}{low}, {high}]")
        return number

    def bool(self, key: str) -> bool:
        value = self._value(key)
        if isinstance(value, bool):
            return value
        # The CLI accepts exactly these for a `boolean` key (pkg/workspace/config.go); yes/on/True
        # typed in quotes reach it as strings and fail `pulumi preview`, so they fail here too.
        if value not in ("true", "false"):
            self.bad(key, value, "must be true or false (YAML yes/no/on/off are strings to Pulumi)")
            return False
        return value == "true"

    def is_default(self, key: str) -> bool:
        """The value equals the declared default, as the CLI would inject it for an absent key."""
        value, default = self._value(key), KEYS_BY_NAME[key].default
        if isinstance(default, list) and isinstance(value, str):
            try:
                value = json.loads(value)
            except json.JSONDecodeError:
                return False
        if isinstance(default, bool) and isinstance(value, str):
            return value == str(default).lower()
        if isinstance(default, int) and not isinstance(default, bool) and isinstance(value, str):
            return value == str(default)
        return value == default

    def list(self, key: str) -> tuple[str, ...]:
        value = self._value(key)
        if isinstance(value, str):
            try:
                value = json.loads(value)
            except json.JSONDecodeError:
                self.bad(key, value, f"must be a list of strings: a YAML list in the stack file, or "
                         f"`pulumi config set --path '{key}[0]' <value>` per item")
                return ()
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            self.bad(key, value, f"must be a list of strings (a YAML list; `pulumi config set --path '{key}[0]' ...`)")
            return ()
        return tuple(value)

    def choice(self, key: str, allowed: tuple[str, ...]) -> str:
        value = self.str(key)
        if value not in allowed:
            self.bad(key, value, "must be one of " + ", ".join(allowed))
        return value


def load(raw: Mapping[str, str], stack: str, allow_placeholder_project: bool = False) -> StackConfig:
    """Validate raw config (full keys -> strings, as Pulumi stores them) into a StackConfig."""
    r = _Reader(raw)
    r.problems += unknown_keys(raw)

    project = r.str("gcp:project")
    r.check("gcp:project", project, naming.project_id(project))
    if project == PLACEHOLDER_PROJECT and not allow_placeholder_project:
        r.bad("gcp:project", project, "is the placeholder; run `pulumi config set gcp:project <your-project>`")
    region = r.str("gcp:region")
    r.check("gcp:region", region, naming.region(region))
    zone = r.str("gcp:zone")
    if region and "gcp:region" not in r.missing:
        r.check("gcp:zone", zone, naming.zone_in_region(zone, region))

    acc_key = r.choice("accelerator", tuple(ACCELERATORS))
    acc = ACCELERATORS.get(acc_key, ACCELERATORS["b200"])
    vouched = r.str("zoneOffersAccelerator")
    if vouched and vouched != zone:
        r.bad("zoneOffersAccelerator", vouched, f"must be empty or gcp:zone ({zone}): it vouches for that one zone")
    if acc_key in ACCELERATORS and zone and "gcp:zone" not in r.missing and not naming.zone(zone):
        r.check("gcp:zone", zone, zones.offered_problem(acc.machine_type, zone, vouched))
    mode = r.choice("clusterMode", MODES)
    gpu_nodes = r.int("gpuNodes", minimum=1)
    # The capacity's own rules and what the machine offers are GkeClusterArgs' (stacks.component_rules).
    capacity = Capacity(r.choice("capacity", CAPACITIES), r.str("reservation"))
    if capacity.reservation:
        r.check("reservation", capacity.reservation, naming.dns_1035_label(capacity.reservation))

    prefix = r.str("namePrefix")
    if problem := naming.dns_1035_label(prefix, MAX_PREFIX):
        r.bad("namePrefix", prefix, problem)
    else:
        _derived_names(r, prefix, acc)
    namespace = r.str("namespace")
    r.check("namespace", namespace, naming.namespace(namespace))

    network = _network(r, acc, gpu_nodes)
    cluster = _cluster(r, acc, mode, capacity)

    model = r.str("model")
    r.check("model", model, naming.model_id(model))
    has_token = bool(raw.get(KEYS_BY_NAME["hfToken"].full))
    if is_gated(model) and not has_token:
        r.bad("hfToken", "<unset>", f"model {model} is gated on the hub: run "
              "`pulumi config set --secret hfToken <token>` with a token that has access")

    verl_version = r.str("verlVersion")
    r.check("verlVersion", verl_version, naming.release_tag(verl_version))
    image = r.str("image")
    r.check("image", image, naming.image_ref(image))
    ray_version = r.str("rayVersion")
    r.check("rayVersion", ray_version, naming.ray_version(ray_version))

    budget = _budget(r)
    bucket_location = r.str("bucketLocation")
    if bucket_location:
        r.check("bucketLocation", bucket_location, storage_locations.bucket_location(bucket_location))
    elif region and "gcp:region" not in r.missing and not naming.region(region):
        # The bucket defaults to the cluster's region: it must be a location Cloud Storage offers.
        r.check("gcp:region", region, storage_locations.bucket_location(region))
    bucket_location = bucket_location or region
    bucket_name = r.str("bucketName")
    if bucket_name:
        r.check("bucketName", bucket_name, naming.bucket_prefix(bucket_name, 63))
    delete_bucket = r.bool("bucketDeleteOnDestroy")
    soft_delete = r.int("bucketSoftDeleteDays")
    r.check("bucketSoftDeleteDays", soft_delete, naming.soft_delete_days(soft_delete))
    task, reading, task_ok = _task(r)
    parsed_so_far = len(r.problems)
    grpo = _grpo(r)
    if task is not None:
        r.problems += task_override_problems(grpo.extra_overrides)
    warnings: list[str] = []
    data, notes = GSM8K, []
    if task is not None and reading is not None and task_ok and len(r.problems) == parsed_so_far:
        data, found, task_warnings, notes = dataset.facts(
            task, reading, max_prompt_length=grpo.max_prompt_length, max_response_length=grpo.max_response_length)
        r.problems += found
        warnings += reading.warnings + task_warnings
        notes = reading.notes + notes
        task_ok = not found
    # Arithmetic only on values that parsed, and on a model id that is one (else it reports the wrong thing).
    if len(r.problems) == parsed_so_far and gpu_nodes >= 1 and task_ok and not naming.model_id(model):
        grpo, derive_problems = tuning.resolve(grpo, model=model, acc=acc, nnodes=gpu_nodes, data=data)
        r.problems += derive_problems
        if not derive_problems:
            shape = {"nnodes": gpu_nodes, "gpus_per_node": acc.gpus_per_node, "model": model}
            found = preflight(grpo, accelerator=acc, data=data, **shape)
            r.problems += found
            warnings += [] if found else grpo_warnings(grpo, accelerator=acc, data=data, **shape)
    warnings += _ignored_keys(r)
    _secret_problems(r, raw, grpo.extra_overrides)
    has_wandb_key = bool(raw.get(KEYS_BY_NAME["wandbApiKey"].full))
    if "wandb" in grpo.logger and not has_wandb_key:
        # Without a key wandb.init fails in the TaskRunner, after every GPU has loaded the model.
        r.bad("wandbApiKey", "<unset>", "grpoLogger has wandb: run `pulumi config set --secret "
              "wandbApiKey <key>` (https://wandb.ai/authorize), or drop wandb from grpoLogger")
    job = JobSettings(
        submit=r.bool("submitJob"),
        ready_timeout_s=r.int("jobReadyTimeoutMinutes", minimum=1) * 60,
        wait_for_completion=r.bool("jobWaitForCompletion"),
        completion_timeout_s=r.int("jobCompletionTimeoutMinutes", minimum=1) * 60,
        resubmit_on_failure=r.bool("jobResubmitOnFailure"),
        max_recoveries=r.int("jobMaxRecoveries", minimum=0),
        release_gpus=r.bool("jobReleaseGpus"),
        merge_model=r.bool("jobMergeModel"),
    )
    image_mirror = r.bool("imageMirror")
    if r.problems:
        raise ConfigError(r.problems)
    cfg = StackConfig(
        stack=stack, project=project, region=region, zone=zone, accelerator=acc, gpu_nodes=gpu_nodes,
        capacity=capacity, prefix=prefix, namespace=namespace, network=network,
        cluster=cluster, bucket_location=bucket_location,
        bucket_delete_on_destroy=delete_bucket, model=model, has_hf_token=has_token,
        has_wandb_key=has_wandb_key,
        verl_version=verl_version, image=image, ray_version=ray_version, grpo=grpo, job=job, budget=budget,
        warnings=tuple(warnings), bucket_soft_delete_days=soft_delete, image_mirror=image_mirror,
        bucket_name=bucket_name, data=data, task=task, task_notes=tuple(notes),
    )
    # Every component's own rules on the args this config gives it (stacks.component_rules).
    if problems := component_rules.problems(cfg):
        raise ConfigError(problems)
    return cfg


# Namespaces whose keys something in `pulumi up` reads: ours, the Google provider's (it reads gcp:* keys
# beyond the three we declare, e.g. gcp:impersonateServiceAccount) and the engine's (pulumi:*). Every
# Kubernetes provider here is explicit (built from the cluster's outputs), so kubernetes:* keys, like any
# other namespace, would be silently ignored: `verl:gpuNodes: 4` once planned 2 nodes without a word.
READ_NAMESPACES = (PROJECT, "gcp", "pulumi")
MAX_SHOWN = 80


def _secret_problems(r: _Reader, raw: dict[str, Any], overrides: tuple[str, ...]) -> None:
    """A secret key holding a list or map (the CLI takes any shape for an undeclared key, and the program
    would hand its JSON text on as the token), and a secret's own value typed into an override (the
    overrides are the job's plain-text entrypoint). Never shows the value."""
    for spec in (k for k in KEYS if k.secret):
        value = raw.get(spec.full)
        if not isinstance(value, str) or value[:1] not in "[{" or not value:
            continue
        try:
            shape = json.loads(value)
        except ValueError:
            continue
        if isinstance(shape, (list, dict)):
            r.bad(spec.name, "<a list or map, not shown>", "must be one string: `pulumi config set --secret "
                  f"{spec.name} <value>`")
    for spec in (k for k in KEYS if k.secret):
        value = raw.get(spec.full)
        if isinstance(value, str) and len(value.strip()) >= SECRET_IN_TEXT_MIN and any(
                value.strip() in item for item in overrides):
            r.bad("grpoExtraOverrides", "<not shown>", f"an item carries the value of the secret {spec.full}: the "
                  "overrides are the job's entrypoint, in plain text on the Ray dashboard; remove it")


# A secret this long is looked for inside other text (a shorter one would match by chance).
SECRET_IN_TEXT_MIN = 8


def shown(value: object) -> str:
    """A value as an error message shows it: escaped (repr), and cut short when long."""
    text = repr(value)
    if len(text) <= MAX_SHOWN:
        return text
    size = f"{len(value)} characters" if isinstance(value, str) else f"{len(text)} characters as text"
    return f"{text[:MAX_SHOWN // 2]}... ({size})"


def _invisible(key: str) -> bool:
    """Whether a key carries characters a reader cannot see: spaces, zero-width or other format characters."""
    return any(c.isspace() or unicodedata.category(c) in ("Cf", "Cc", "Zs", "Zl", "Zp") for c in key)


def _visible(key: str) -> str:
    return "".join(c for c in unicodedata.normalize("NFKC", key)
                   if not (c.isspace() or unicodedata.category(c) in ("Cf", "Cc", "Zs", "Zl", "Zp")))


def _ignored_keys(r: _Reader) -> list[str]:
    """Keys older stack files may set that no longer change anything: a warning, not an error, so
    those stacks keep loading (refusing them would block `pulumi up` on a live stack)."""
    offload = r.choice("grpoRefParamOffload", ("auto", "true", "false")).lower()
    if offload == "auto":
        return []
    return [f"{KEYS_BY_NAME['grpoRefParamOffload'].full} = {offload}: ignored. verl 0.6.1 always keeps the reference "
            "model on the host (fsdp_workers.py: CPUOffloadPolicy for every role but the actor) and never "
            "reads ref.fsdp_config.param_offload; remove the key"]


def unknown_keys(raw: Mapping[str, str]) -> list[str]:
    """Keys in our namespace (or one a typo away from it) that the program does not read, and keys in a
    namespace nothing in `pulumi up` reads."""
    problems = []
    ours = [k.name for k in KEYS if ":" not in k.name]
    known = {k.full for k in KEYS}
    for key in sorted(raw):
        namespace, _, name = key.partition(":")
        if key not in known and _invisible(key):
            # Show the exact characters: a "did you mean" with an identical-looking name helps no one.
            look_alike = _visible(key)
            hint = (f"it looks like {look_alike} but carries invisible or space characters; retype it"
                    if look_alike in known else "keys have no spaces or invisible characters")
            problems.append(f"{shown(key)} (as typed, escaped) is not a known key: {hint}")
        elif namespace == PROJECT and name not in KEYS_BY_NAME:
            close = difflib.get_close_matches(name, ours, n=1, cutoff=0.6) if len(name) <= MAX_SHOWN else []
            hint = f"did you mean {PROJECT}:{close[0]}?" if close else "see Pulumi.yaml for the declared keys"
            problems.append(f"{key if len(key) <= MAX_SHOWN else shown(key)} is not a known key: {hint}")
        elif namespace != PROJECT and len(namespace) <= MAX_SHOWN and \
                difflib.SequenceMatcher(None, namespace.lower(), PROJECT).ratio() >= 0.75:
            problems.append(f"{key}: namespace {namespace!r} is not this project's; did you mean {PROJECT}:{name}?")
        elif namespace not in READ_NAMESPACES:
            hint = f"; did you mean {PROJECT}:{name}?" if name in KEYS_BY_NAME else ""
            problems.append(f"{shown(key)}: nothing in this program reads namespace {namespace!r} (it reads "
                            f"{', '.join(n + ':' for n in READ_NAMESPACES)} keys), so the value would be "
                            f"silently ignored{hint}")
    return problems


def _task(r: _Reader) -> tuple[dataset.TaskSpec | None, dataset.Inspection | None, bool]:
    """The stack's own data and reward (stacks.dataset): paths checked, files read and the reward
    smoke-tested here, so a broken file fails the plan and `pulumi preview` before anything exists.
    Returns (task, its reading, whether it is usable); (None, None, True) for GSM8K."""
    train, val, reward = r.str("dataTrainFile"), r.str("dataValFile"), r.str("rewardFile")
    function, packages = r.str("rewardFunction"), r.list("rewardPackages")
    if not train:
        for key, value in (("dataValFile", val), ("rewardFile", reward)):
            if value:
                r.bad(key, value, "needs dataTrainFile: GSM8K is scored by verl's built-in gsm8k scorer (to score "
                      "GSM8K your way, write it as parquet with verl's examples/data_preprocess/gsm8k.py and name it)")
    if not reward:
        if not r.is_default("rewardFunction"):
            r.bad("rewardFunction", function, "only applies with rewardFile")
        if packages:
            r.bad("rewardPackages", list(packages), "only applies with rewardFile")
    if not train:
        if not r.is_default("dataTrainRows"):
            r.bad("dataTrainRows", r.int("dataTrainRows", minimum=0), "only applies with a gs:// dataTrainFile")
        return None, None, True
    before = len(r.problems)
    if not val:
        r.bad("dataValFile", val, "must be set with dataTrainFile: verl validates on it (data.val_files)")
    if problem := dataset.identifier_problem(function):
        r.bad("rewardFunction", function, problem)
    for name in packages:
        if problem := dataset.identifier_problem(name):
            r.bad("rewardPackages", name, f"{problem} (a top-level module name, e.g. sympy)")
    found: list[str] = []
    files = {role: dataset.resolve_file(KEYS_BY_NAME[key].full, value, name, found)
             for role, key, value, name in (("train", "dataTrainFile", train, "train.parquet"),
                                             ("val", "dataValFile", val, "val.parquet"),
                                             ("reward", "rewardFile", reward, "reward.py")) if value}
    r.problems += found
    if len(r.problems) > before:
        return None, None, False
    declared = r.int("dataTrainRows", minimum=0)
    if files["train"].source and declared < 1:
        r.bad("dataTrainRows", declared, f"must be the number of rows of {train}: the plan cannot read a gs:// file "
              "(no credentials offline) and sizes the run with it; the staging Job checks it against the file "
              "(rows: pyarrow.parquet.ParquetFile(f).metadata.num_rows)")
    elif not files["train"].source and declared:
        r.bad("dataTrainRows", declared, "only applies when dataTrainFile is a gs:// path (a local file's rows are "
              "read from it)")
    if len(r.problems) > before:
        return None, None, False
    task = dataset.TaskSpec(train=files["train"], val=files["val"], reward=files.get("reward"),
                            reward_function=function, reward_packages=packages,
                            train_rows=declared if files["train"].source else 0)
    reading = dataset.inspect_task(task)
    r.problems += reading.problems
    if reading.problems:
        return task, reading, False
    rows = declared if task.train.source else reading.readings["train"].rows
    # The batch bounds follow the stack's rows instead of GSM8K's (the filter's cut is checked later).
    r.bounds.update({"grpoTrainBatchSize": (rows, f"the {rows} rows of dataTrainFile"),
                     "grpoPpoMiniBatchSize": (rows, f"the {rows} rows of dataTrainFile"),
                     **{k: (rows * 1024, "a full batch's samples") for k in (
                         "grpoPpoMicroBatchSizePerGpu", "grpoLogProbMicroBatchSizePerGpu",
                         "grpoRefLogProbMicroBatchSizePerGpu")}})
    return task, reading, True


def _budget(r: _Reader) -> BudgetConfig | None:
    """The optional budget alert: both keys or neither."""
    account = r.str("billingAccount")
    amount = r.int("budgetMonthly", minimum=0)
    if account:
        r.check("billingAccount", account, naming.billing_account_id(account))
        if amount < 1:
            r.bad("budgetMonthly", amount, "must be a positive amount (in the billing account's currency) "
                  "when billingAccount is set")
    elif amount > 0:
        r.bad("billingAccount", "<unset>", "must be set when budgetMonthly is set (the budget lives on the "
              "billing account): run `pulumi config set billingAccount 012345-567890-ABCDEF`")
    return BudgetConfig(account, amount) if account and amount > 0 else None


def _derived_names(r: _Reader, prefix: str, acc: Accelerator) -> None:
    """The names built from namePrefix must pass the rules of the components that use them."""
    bucket = f"{prefix}-data"
    if problem := naming.bucket_prefix(bucket, naming.MAX_BUCKET_PREFIX):
        r.bad("namePrefix", prefix, f"the bucket name {bucket}-<suffix> {problem.removeprefix('must ')}"
              if problem.startswith("must not") else problem)
    # The RayCluster name's rules are RayClusterArgs' (stacks.component_rules).
    if problem := naming.service_account_id(f"{prefix}-nodes"):
        r.bad("namePrefix", prefix, f"the node service account id {prefix}-nodes {problem}")


def _network(r: _Reader, acc: Accelerator, gpu_nodes: int) -> NetworkConfig:
    nets: dict[str, ipaddress.IPv4Network] = {}

    def cidr(key: str, value: str, max_prefix: int, label: str | None = None) -> None:
        try:
            net = ipaddress.ip_network(value, strict=True)
        except ValueError as err:
            r.bad(key, value, f"must be an IPv4 CIDR such as 192.168.0.0/24 ({err})")
            return
        if problem := gcp_ranges.subnet_problem(net):  # GCP's valid and prohibited ranges, not is_private
            r.bad(key, value, problem)
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
    if not acc.rdma:
        # No gVNIC or RoCE network is built: a range set for one would be silently unused.
        # The CLI injects each declared default a stack leaves out (pulumi/pulumi @ 1b5949891b3c
        # pkg/workspace/config.go), so a value equal to the default reads as "not set".
        for key in ("gvnicCidr", "rdmaCidrs"):
            if KEYS_BY_NAME[key].full in r.raw and not r.is_default(key):
                r.bad(key, r.raw[KEYS_BY_NAME[key].full], f"accelerator {acc.key} has no RDMA NICs, so no "
                      "additional network is built: unset it")
        gvnic, rdma = "", ()
    else:
        cidr("gvnicCidr", gvnic, 29)
    if acc.rdma and len(rdma) != acc.rdma_nics:
        r.bad("rdmaCidrs", list(rdma), f"must list {acc.rdma_nics} subnets, one per RDMA NIC of {acc.key}")
    for i, value in enumerate(rdma):
        cidr("rdmaCidrs", value, 29, label=f"rdmaCidrs[{i}]")
    labels = list(nets)
    for i, a in enumerate(labels):
        for b in labels[i + 1:]:
            if nets[a].overlaps(nets[b]):
                key = a.split("[")[0]
                r.bad(key, str(nets[a]), f"overlaps {b} = {nets[b]}: every range must be disjoint")
    mtu = r.int("mtu", minimum=1300)  # GCP VPC MTU range: 1300..8896
    return NetworkConfig(primary, pods, services, gvnic, rdma, mtu)


def _cluster(r: _Reader, acc: Accelerator, mode: str, capacity: Capacity) -> ClusterConfig:
    floors = acc.gke_floors + capacity.gke_floors + gcsfuse.gke_floors()
    pin = r.str("gkeVersion")
    if pin and (problem := naming.gke_version_pin(pin)):
        r.bad("gkeVersion", pin, problem)
    elif pin:
        # A full pin meets every floor or fails here; a minor pin fails here when its whole minor is
        # below a floor, and otherwise at deploy time if the channel's newest patch of it is (preflight).
        short = gke.unmet(pin, floors) if gke.version_key(pin) else gke.unmet_by_minor(pin, floors)
        if short:
            r.bad("gkeVersion", pin, f"is below {short[0].version}, the floor for {short[0].needed_for} "
                  f"({short[0].source}); unset it to take the release channel's newest version")
    channel = r.choice("releaseChannel", CHANNELS)
    if mode == "autopilot" and not acc.autopilot:
        r.bad("clusterMode", mode, f"accelerator {acc.key} has no Autopilot worker size in the catalog: use standard")
    zonal = r.bool("zonalCluster")
    if zonal and mode == "autopilot":
        r.bad("zonalCluster", True, "Autopilot clusters are regional: set it false or use clusterMode standard")
    head_cpu = r.int("rayHeadCpu", minimum=1)
    head_memory = r.int("rayHeadMemoryGib", minimum=1)
    machine = r.str("cpuMachineType")
    vcpus = naming.machine_vcpus(machine)
    if vcpus is None:
        r.bad("cpuMachineType", machine, "must be a machine type such as c2-standard-16")
    elif vcpus <= head_cpu:
        # The head's pod also carries a GCS FUSE sidecar, and GKE reserves part of every node.
        r.bad("cpuMachineType", machine, f"has {vcpus} vCPUs; the Ray head requests {head_cpu} (rayHeadCpu): "
              f"use a machine with more than {head_cpu} vCPUs or lower rayHeadCpu")
    else:
        for problem in head_fit_problems(machine, vcpus, head_cpu, head_memory):
            r.bad("cpuMachineType", machine, problem)
    lo = r.int("cpuNodesMin", minimum=1)
    hi = r.int("cpuNodesMax", minimum=1)
    if hi < lo:
        r.bad("cpuNodesMax", hi, f"must be >= cpuNodesMin ({lo})")
    return ClusterConfig(mode, pin, channel, floors, _authorized_networks(r), machine, lo, hi,
                         r.bool("deletionProtection"), zonal, head_cpu, head_memory, _migrations(r))


def _migrations(r: _Reader) -> frozenset[str]:
    names = r.list("migrations")
    for name in names:
        if name not in MIGRATIONS:
            r.bad("migrations", name, "is not a migration: allowed are " + ", ".join(
                f"{k} ({v})" for k, v in MIGRATIONS.items()))
    return frozenset(n for n in names if n in MIGRATIONS)


def head_fit_problems(machine: str, vcpus: int, head_cpu: int, head_memory_gib: int) -> list[str]:
    """Whether the Ray head pod (its request plus the GCS FUSE sidecar's) fits what GKE leaves allocatable
    on one CPU node (catalog.accelerators' GKE reservation tiers and the 100 Mi eviction threshold); a
    head that does not fit pends until jobReadyTimeoutMinutes ends. Memory only for series in
    catalog.zones.MEMORY_PER_VCPU_GIB."""
    sidecar = STANDARD_SIDECAR_REQUEST
    cpu = vcpus - gke_reserved_cpu(vcpus)
    found = []
    if head_cpu + sidecar.cpu > cpu:
        found.append(f"leaves {cpu:.2f} CPU allocatable; the Ray head requests {head_cpu} (rayHeadCpu) + "
                     f"{sidecar.cpu} for its GCS FUSE sidecar: use a larger machine or lower rayHeadCpu")
    total = zones.memory_gib(machine, vcpus)
    if total is not None:
        memory = total - gke_reserved_memory_gib(total) - 0.1
        if head_memory_gib + sidecar.memory_gib > memory:
            found.append(f"leaves {memory:.1f} GiB allocatable of {total:g} GiB; the Ray head requests "
                         f"{head_memory_gib} GiB (rayHeadMemoryGib) + {sidecar.memory_gib} GiB for its GCS FUSE "
                         "sidecar: use a machine with more memory or lower rayHeadMemoryGib")
    return found


def _authorized_networks(r: _Reader) -> tuple[str, ...]:
    """CIDRs for master_authorized_networks_config: IPv4 (the cluster is single-stack), no host bits."""
    cidrs = r.list("masterAuthorizedNetworks")
    for value in cidrs:
        try:
            net = ipaddress.ip_network(value, strict=True)
        except ValueError as err:
            r.bad("masterAuthorizedNetworks", value, f"must be an IPv4 CIDR such as 203.0.113.0/24 ({err})")
            continue
        if net.version != 4:
            r.bad("masterAuthorizedNetworks", value, "must be an IPv4 CIDR: the cluster's endpoint is IPv4")
        elif "/" not in value:
            # GKE API CidrBlock: "cidr_block must be specified in CIDR notation"; ip_network reads a bare
            # address as /32, the API does not.
            r.bad("masterAuthorizedNetworks", value, f"must be in CIDR notation: write {net}")
    if len(set(cidrs)) != len(cidrs):
        r.bad("masterAuthorizedNetworks", list(cidrs), "lists a CIDR twice")
    return cidrs


def _grpo(r: _Reader) -> GrpoSettings:
    return GrpoSettings(
        train_batch_size=r.int("grpoTrainBatchSize", minimum=1),
        rollout_n=r.int("grpoRolloutN", minimum=1),
        max_prompt_length=r.int("grpoMaxPromptLength", minimum=1),
        max_response_length=r.int("grpoMaxResponseLength", minimum=1),
        learning_rate=r.float("grpoLearningRate", 0.0, 1.0, low_open=True),
        ppo_mini_batch_size=r.int("grpoPpoMiniBatchSize", minimum=0),
        ppo_micro_batch_size_per_gpu=r.int("grpoPpoMicroBatchSizePerGpu", minimum=1),
        log_prob_micro_batch_size_per_gpu=r.int("grpoLogProbMicroBatchSizePerGpu", minimum=1),
        ref_log_prob_micro_batch_size_per_gpu=r.int("grpoRefLogProbMicroBatchSizePerGpu", minimum=1),
        tensor_parallel_size=r.int("grpoTensorParallelSize", minimum=0),
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
        use_remove_padding=r.bool("grpoUseRemovePadding"),
        use_dynamic_bsz=r.bool("grpoUseDynamicBsz"),
        ppo_max_token_len_per_gpu=r.int("grpoPpoMaxTokenLenPerGpu", minimum=0),
        log_prob_max_token_len_per_gpu=r.int("grpoLogProbMaxTokenLenPerGpu", minimum=0),
        fsdp_size=r.int("grpoFsdpSize", minimum=-1),
        max_checkpoints_to_keep=r.int("grpoMaxCheckpointsToKeep", minimum=1),
        total_training_steps=r.int("grpoTotalTrainingSteps", minimum=0),
    )


def from_pulumi(stack: str, allow_placeholder_project: bool = False) -> StackConfig:
    """Load from the running Pulumi program's config (the CLI or the mocks set it)."""
    import pulumi.runtime.config as rc

    # The CLI passes config in PULUMI_CONFIG; mocks and tests set it in-process.
    return load({**rc.get_config_env(), **rc.CONFIG.get()}, stack, allow_placeholder_project)
