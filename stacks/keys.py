"""Every config key of the project, in one table: type, default, bounds, choices, its own rules, description.

Pulumi.yaml's `config:` block is generated from it (`python -m tools.schema --write`) and a test
keeps the two equal. The gate (stacks.config) reads every key through its row (stacks.key_values): the
rules every key of its kind obeys (KIND_RULES), the type as the Pulumi CLI reads it, the bounds, the
choices, then the row's own rules (`rules`, `each`: catalog checks and the validators below), before the
rules over several keys (stacks.cross_keys); messages name the key and what its row allows.
Descriptions that name catalog facts (accelerators, capacity types) are written from the catalog.
"""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any

from catalog import gcp_ranges, naming, secret_shapes, storage_locations, versions
from catalog.accelerators import ACCELERATORS
from catalog.capacity import CAPACITIES
from catalog.datasets import GSM8K
from catalog.naming import PROJECT, Check

# How a non-secret key's value is read for credentials (catalog.secret_shapes), which would reach plan.json, the
# state, the manifests and the terminal in plain text (Key.credentials):
REFUSED = "refused"  # every credential shape is refused
COMMIT_IDS = "commit ids"  # all but 40 hex characters (a W&B key's shape): here a git or Hub commit, or a name
OWN_RULES = "own rules"  # the key's own rules judge it (grpoExtraOverrides: each item under its Hydra key)


@dataclass(frozen=True)
class Key:
    name: str  # without namespace for project keys; "gcp:..." for provider keys
    type: str  # Pulumi project config schema type: string | integer | boolean | array
    default: Any
    description: str
    secret: bool = False
    # Bounds: an integer key's, or a number's written as a string (grpoLearningRate); `why` says where the
    # maximum comes from. Every integer key has a maximum: a count without one lets a unit slip through.
    minimum: int | float | None = None
    maximum: int | float | None = None
    why: str = ""
    open_minimum: bool = False  # (minimum, maximum]: the minimum itself is refused
    # A live view where the catalog is the list (a row added there is a choice here, at once).
    choices: Collection[str] = ()
    # The key's own rules, after its type, bounds and choices passed, in order (the first broken one is
    # reported): each answers None or what is allowed. An array's `each` judge every item, then `rules` the list.
    # A secret key's rules see its value as the CLI hands it over, and no message shows it.
    rules: tuple[Check, ...] = ()
    each: tuple[Check, ...] = ()
    # Why the key cannot be kept secret when set with --secret, where the usual reason (PLAIN_TEXT) is not it.
    plain_text: str = ""
    # How the rule every non-secret key obeys, no credential in plain text (KIND_RULES), reads its value.
    credentials: str = REFUSED

    @property
    def full(self) -> str:
        return self.name if ":" in self.name else f"{PROJECT}:{self.name}"

    @property
    def declared(self) -> bool:
        """Pulumi.yaml declares it (with its type and default; tools.schema writes the file). Provider keys
        (gcp:*) may not declare a type there; an optional secret (no default) is not declared at all: the CLI
        reports a declared key without a default as missing, and a default would be injected as plaintext and
        refused as "must be encrypted" (pulumi/pulumi @ 1b5949891b3c pkg/workspace/config.go). The program
        reads the secrets with get_secret."""
        return ":" not in self.name and not (self.secret and self.default is None)

    @property
    def number(self) -> bool:
        """A string key read as a number (Pulumi has no float type): bounded, with a minimum."""
        return self.type == "string" and self.minimum is not None


def _either(items: tuple[str, ...] | list[str]) -> str:
    return ", ".join(items[:-1]) + " or " + items[-1] if len(items) > 1 else items[0]


def _accelerators() -> str:
    return _either([f"{a.key} ({a.series}, {a.machine_type}: {a.gpus_per_node} GPUs{'' if a.rdma else ', no RDMA'})"
                    for a in ACCELERATORS.values()])


def _gpus_per_node() -> str:
    by_count: dict[int, list[str]] = {}
    for a in ACCELERATORS.values():
        by_count.setdefault(a.gpus_per_node, []).append(a.key)
    parts = [f"{n} GPUs each on {'/'.join(keys)}" if i == 0 else f"{n} on {'/'.join(keys)}"
             for i, (n, keys) in enumerate(by_count.items())]
    return ", ".join(parts)


# --- the rules rows refer to (catalog checks wrapped for a key, and rules of the keys themselves) -------------

# Why a key other than the secret ones cannot be kept secret when set with --secret (Key.plain_text: another why).
PLAIN_TEXT = "its value goes into resource names, inputs or outputs, or the job, in plain text"
MAX_PREFIX = 20  # keeps "<prefix>-rdma-sub-N", the cluster (<= 40) and bucket names legal


def _optional(check: Check) -> Check:
    """The check of a key whose empty value means "not set" (nothing to judge)."""
    return lambda value: None if value == "" else check(value)


def _subnet(max_prefix: int) -> Check:
    """An IPv4 subnet GCP accepts (its valid and prohibited ranges, not is_private), of /max_prefix or larger."""
    def check(value: object) -> str | None:
        try:
            net = ipaddress.ip_network(value, strict=True)
        except ValueError as err:
            return f"must be an IPv4 CIDR such as 192.168.0.0/24 ({err})"
        if problem := gcp_ranges.subnet_problem(net):
            return problem
        return f"is too small: use a /{max_prefix} or larger" if net.prefixlen > max_prefix else None
    return check


def _authorized_network(value: object) -> str | None:
    """A CIDR for master_authorized_networks_config: IPv4 (the cluster is single-stack), no host bits."""
    try:
        net = ipaddress.ip_network(value, strict=True)
    except ValueError as err:
        return f"must be an IPv4 CIDR such as 203.0.113.0/24 ({err})"
    if net.version != 4:
        return "must be an IPv4 CIDR: the cluster's endpoint is IPv4"
    if "/" not in str(value):
        # GKE API CidrBlock: "cidr_block must be specified in CIDR notation"; ip_network reads a bare
        # address as /32, the API does not.
        return f"must be in CIDR notation: write {net}"
    return None


def _distinct_cidrs(values: object) -> str | None:
    return "lists a CIDR twice" if len(set(values)) != len(values) else None  # type: ignore[arg-type]


def _name_prefix(prefix: object) -> str | None:
    """namePrefix's own rule, and the rules of the names built from it that no component judges alone (the
    RayCluster name's rules are RayClusterArgs', stacks.component_rules)."""
    if problem := naming.dns_1035_label_problem(prefix, MAX_PREFIX):
        return problem
    bucket = f"{prefix}-data"
    if problem := naming.bucket_prefix_problem(bucket):
        return f"makes the bucket name {bucket}-<suffix>, which {problem}" if problem.startswith("must not") \
            else problem
    if problem := naming.service_account_id_problem(f"{prefix}-nodes"):
        return f"the node service account id {prefix}-nodes {problem}"
    return None


def _machine_type(value: object) -> str | None:
    return "must be a machine type such as c2-standard-16" if naming.machine_vcpus(str(value)) is None else None


def _module_name(value: object) -> str | None:
    problem = naming.python_identifier_problem(value)
    return f"{problem} (a top-level module name, e.g. sympy)" if problem else None


def _one_string(name: str) -> Check:
    """A secret is one string: the CLI takes any shape for an undeclared key, and the program would hand a list's
    or a map's JSON text on as the token."""
    def check(value: object) -> str | None:
        if isinstance(value, str) and value[:1] in ("[", "{"):
            try:
                shape = json.loads(value)
            except ValueError:
                return None
            if isinstance(shape, (list, dict)):
                return f"must be one string, not a list or map: `pulumi config set --secret {name} <value>`"
        return None
    return check


def _gcp_as_typed(value: object) -> str | None:
    # The Google provider reads gcp:* keys itself, as typed: "my-project\n" is not my-project there.
    if isinstance(value, str) and value.strip() and value != value.strip():
        return "has leading or trailing whitespace, which the Google provider keeps: remove it"
    return None


MODES = ("autopilot", "standard")
CHANNELS = ("RAPID", "REGULAR", "STABLE")
RDMA_DEFAULT = [f"192.168.{n + 1}.0/24" for n in range(8)]
# verl v0.6.1's choices: the rollout engines and actor strategies the recipe supports, and every kl_loss_type
# verl's kl_penalty accepts (volcengine/verl @v0.6.1 verl/trainer/ppo/core_algos.py).
_ENGINES = ("vllm", "sglang")
_STRATEGIES = ("fsdp", "fsdp2")
_KL_TYPES = ("kl", "k1", "abs", "mse", "k2", "low_var_kl", "k3", "full")
# Upper bounds, and why. GKE: "Nodes per node pool zone: 1,000"
# (https://cloud.google.com/kubernetes-engine/quotas); each pool here lives in one zone or is bounded per
# zone. Qwen2.5's full context is 131,072 tokens (Qwen2.5 model cards).
_GKE_POOL = {"maximum": 1000, "why": "GKE allows 1,000 nodes per node pool per zone"}
_CONTEXT = {"maximum": 131072, "why": "Qwen2.5's full context is 131,072 tokens"}
# Rows of a dataset, and the samples of one batch of them (rows x grpoRolloutN's maximum). The batch keys
# are bounded by the run's own rows too (GSM8K's or dataTrainFile's): a rule of the gate, since it
# depends on another key.
_ROWS = {"maximum": 10**10, "why": "rows; more is a typo"}
_SAMPLES = {"maximum": 10**10 * 1024, "why": "a full batch's samples; more is a typo"}
_STEPS = {"maximum": 1_000_000, "why": "steps; more is a typo"}
_TOKENS = {"maximum": 4 * 1024 * 1024, "why": "tokens per GPU in one pass; more is a typo"}

KEYS: tuple[Key, ...] = (
    Key("gcp:project", "string", None, "Google Cloud project id (required).", rules=(naming.project_id_problem,)),
    Key("gcp:region", "string", None, "Region for the cluster, subnets and bucket (required).",
        rules=(naming.region_problem,)),
    Key("gcp:zone", "string", None, "Zone in gcp:region that has the GPUs (required)."),  # cross_keys.placement
    Key("zoneOffersAccelerator", "string", "",
        "Set to gcp:zone when that zone offers the accelerator but is newer than catalog/zones.py's table."),
    Key("accelerator", "string", "b200", f"GPU profile: {_accelerators()}.", choices=ACCELERATORS.keys()),
    Key("clusterMode", "string", "standard", f"GKE mode: {_either(MODES)}.", choices=MODES),
    Key("gpuNodes", "integer", 2, f"Number of GPU nodes (Ray GPU workers; {_gpus_per_node()}).", minimum=1,
        **_GKE_POOL),
    Key("capacity", "string", "spot", f"GPU capacity: {_either(CAPACITIES)}, as the accelerator offers it.",
        choices=CAPACITIES),
    Key("reservation", "string", "", "Compute Engine reservation name (only with capacity=reservation).",
        rules=(_optional(naming.dns_1035_label_problem),)),
    Key("namePrefix", "string", "verl", "Prefix of every GCP resource name (lowercase, <= 20 chars).",
        rules=(_name_prefix,)),
    Key("namespace", "string", "verl", "Kubernetes namespace for the Ray cluster and jobs.",
        rules=(naming.namespace_problem,)),
    Key("primaryCidr", "string", "10.10.0.0/20", "Primary (node) subnet of the cluster VPC.", rules=(_subnet(24),)),
    Key("podsCidr", "string", "10.20.0.0/14", "Secondary range for pods.", rules=(_subnet(21),)),
    Key("servicesCidr", "string", "10.30.0.0/20", "Secondary range for services.", rules=(_subnet(27),)),
    Key("gvnicCidr", "string", "192.168.0.0/24",
        "Subnet of the additional gVNIC network (accelerators with RDMA NICs only).", rules=(_subnet(29),)),
    Key("rdmaCidrs", "array", RDMA_DEFAULT,
        "One subnet per GPU NIC on the RoCE network, in NIC order (accelerators with RDMA NICs only).",
        each=(_subnet(29),)),
    # GCP VPC MTU range: 1300..8896 (https://cloud.google.com/vpc/docs/mtu).
    Key("mtu", "integer", 8896, "MTU of the gVNIC and RDMA networks.", minimum=1300, maximum=8896,
        why="the largest MTU a GCP VPC allows, https://cloud.google.com/vpc/docs/mtu"),
    Key("gkeVersion", "string", "",
        "GKE version to create the cluster at: empty = the release channel's newest, a minor such as 1.33 = "
        "its newest 1.33 patch, or a full version; resolved at deploy time and checked against the floors.",
        rules=(_optional(naming.gke_version_pin_problem),)),
    Key("releaseChannel", "string", "REGULAR", f"GKE release channel: {_either(CHANNELS)}.", choices=CHANNELS),
    Key("zonalCluster", "boolean", False,
        "Standard only: a zonal cluster in gcp:zone instead of a regional one (the GKE free tier covers one "
        "zonal cluster per billing account; the control plane is then in one zone)."),
    Key("masterAuthorizedNetworks", "array", [],
        "IPv4 CIDRs allowed to reach the control plane's IP endpoint; empty = the IP endpoint is off. pulumi "
        "and kubectl use the DNS-based endpoint, authorized by IAM, from any address.",
        each=(_authorized_network,), rules=(_distinct_cidrs,)),
    Key("cpuMachineType", "string", "c2-standard-16", "Machine type of the CPU pool (Standard).",
        rules=(_machine_type,)),
    Key("cpuNodesMin", "integer", 1, "CPU pool autoscaling minimum (Standard).", minimum=1, **_GKE_POOL),
    Key("cpuNodesMax", "integer", 5, "CPU pool autoscaling maximum (Standard).", minimum=1, **_GKE_POOL),
    Key("rayHeadCpu", "integer", 12,
        "CPUs the Ray head requests (it runs no tasks); cpuMachineType must have more vCPUs.", minimum=1,
        maximum=256, why="vCPUs of the one CPU node the head runs on; more is a typo"),
    Key("rayHeadMemoryGib", "integer", 32, "Memory (GiB) the Ray head requests.", minimum=1, maximum=2048,
        why="memory of the one CPU node the head runs on; more is a typo"),
    Key("deletionProtection", "boolean", False, "GKE deletion protection (true blocks pulumi destroy)."),
    Key("bucketLocation", "string", "", "Bucket location; empty = gcp:region.",
        rules=(_optional(storage_locations.bucket_location_problem),)),
    Key("bucketName", "string", "",
        "An existing bucket to adopt (imported), e.g. the one a destroyed stack kept: `pulumi destroy` prints "
        "its name. Empty: the stack's own bucket, <namePrefix>-data-<random> (the suffix is kept in state).",
        rules=(_optional(naming.bucket_name_problem),), credentials=COMMIT_IDS),  # a bucket named by a digest
    Key("bucketDeleteOnDestroy", "boolean", False,
        "Delete the bucket and ALL its contents (weights, checkpoints) on pulumi destroy; not with bucketName (a "
        "bucket the stack adopted is never deleted)."),
    Key("billingAccount", "string", "",
        "Cloud Billing account id (012345-567890-ABCDEF) for the optional budget alert; set with budgetMonthly.",
        rules=(_optional(naming.billing_account_id_problem),),
        plain_text="the budget's resource id (billingAccounts/<id>/budgets/...) is plain text in the state"),
    Key("budgetMonthly", "integer", 0,
        "Monthly budget for this project in the billing account's currency; alerts at 50/90/100% "
        "(needs billingAccount).", minimum=0, maximum=10**9, why="a monthly budget; more is a typo"),
    Key("bucketSoftDeleteDays", "integer", 0,
        "Days Cloud Storage keeps (and bills) deleted objects such as rotated checkpoints: 0 = off, or 7..90.",
        # Cloud Storage soft delete retention: at most 90 days (soft_delete_policy docs); 0 or 7..90 is
        # catalog.naming.soft_delete_days_problem's rule, which the gate applies after the bounds.
        maximum=90, why="Cloud Storage keeps soft-deleted objects at most 90 days",
        rules=(naming.soft_delete_days_problem,)),
    Key("model", "string", "Qwen/Qwen2.5-32B-Instruct", "Hugging Face model id to train.",
        rules=(naming.model_id_problem,)),
    Key("hfToken", "string", None, "Hugging Face token (set with --secret; needed for gated models).",
        secret=True, rules=(_one_string("hfToken"),)),
    Key("wandbApiKey", "string", None,
        "Weights & Biases API key (set with --secret; needed when grpoLogger has wandb).", secret=True,
        rules=(_one_string("wandbApiKey"),)),
    Key("verlVersion", "string", versions.VERL_VERSION, "verl git tag staged into the bucket.",
        rules=(naming.release_tag_problem,)),
    Key("image", "string", versions.VERL_IMAGE, "Container image for Ray pods and data staging.",
        rules=(naming.image_ref_problem,), credentials=COMMIT_IDS),  # CI tags an image with its commit
    Key("imageMirror", "boolean", True,
        "Pull Docker Hub images through an Artifact Registry remote repository in the region "
        "(cached; eligible for GKE image streaming)."),
    Key("rayVersion", "string", versions.RAY_VERSION, "Ray version inside the image (KubeRay rayVersion).",
        rules=(naming.ray_version_problem,)),
    Key("submitJob", "boolean", True, "Submit the GRPO job once the Ray cluster can run it."),
    # How long `pulumi up` may block: a week / a month; more is a unit slip (seconds typed as minutes).
    Key("jobReadyTimeoutMinutes", "integer", 90, "How long to wait for the Ray head and all GPUs.", minimum=1,
        maximum=7 * 24 * 60, why="one week"),
    Key("jobWaitForCompletion", "boolean", False, "Keep pulumi up running until the job ends."),
    Key("jobCompletionTimeoutMinutes", "integer", 1440, "Bound on waiting for completion.", minimum=1,
        maximum=30 * 24 * 60, why="30 days"),
    Key("jobResubmitOnFailure", "boolean", True,
        "On refresh, resubmit a FAILED/STOPPED job (resumes from the last checkpoint)."),
    Key("jobMaxRecoveries", "integer", 3,
        "Recoveries one run may use: in-run restarts after lost GPU nodes plus resubmissions (-r<k>).",
        minimum=0, maximum=100, why="recoveries of one run; more is a typo"),
    Key("jobReleaseGpus", "boolean", True,
        "Scale the GPU workers to 0 when the run ends (the next submission scales them back)."),
    Key("jobMergeModel", "boolean", True,
        "Merge the final checkpoint into a Hugging Face folder in the bucket (output mergedModel)."),
    # Bring your own task (stacks.dataset): empty dataTrainFile = GSM8K, staged by verl's own script.
    Key("dataTrainFile", "string", "",
        "Training parquet in verl's RL format (data_source, prompt, ability, reward_model.ground_truth, "
        "extra_info): a local path, uploaded to the bucket by pulumi up, or gs://<bucket>/<object>, copied into "
        "the bucket and checked by the staging Job; empty = GSM8K.",
        credentials=COMMIT_IDS),  # a path may hold a commit: a Hub cache's snapshots/<commit>/
    Key("dataValFile", "string", "",
        "Validation parquet in the same format (required with dataTrainFile): a local path or gs://<bucket>/<object>.",
        credentials=COMMIT_IDS),
    Key("dataTrainRows", "integer", 0,
        "Rows of a gs:// dataTrainFile, which the plan cannot read (sizes the run; the staging Job checks it).",
        minimum=0, **_ROWS),
    Key("rewardFile", "string", "",
        "Python file with the reward function (a local path, uploaded next to the data); empty = verl's "
        "built-in scorer for the rows' data_source.", credentials=COMMIT_IDS),
    Key("rewardFunction", "string", "compute_score",
        "Name of the reward function in rewardFile: fn(data_source, solution_str, ground_truth, extra_info) "
        "returning a number or a dict with \"score\".", rules=(naming.python_identifier_problem,)),
    Key("rewardPackages", "array", [],
        "Modules rewardFile imports that only the container image has (the offline checks do not warn about them).",
        each=(_module_name,)),
    Key("grpoTrainBatchSize", "integer", 256, "data.train_batch_size (prompts per step).", minimum=1, **_ROWS),
    Key("grpoRolloutN", "integer", 8, "actor_rollout_ref.rollout.n (responses per prompt).", minimum=1,
        maximum=1024, why="responses per prompt; more is a typo"),
    Key("grpoMaxPromptLength", "integer", 512, "data.max_prompt_length (tokens).", minimum=1, **_CONTEXT),
    Key("grpoMaxResponseLength", "integer", 1024,
        "data.max_response_length (tokens); verl v0.6.1 examples/grpo_trainer use 1024 for GSM8K.", minimum=1,
        **_CONTEXT),
    Key("grpoLearningRate", "string", "1e-6", "actor_rollout_ref.actor.optim.lr.", minimum=0.0, maximum=1.0,
        open_minimum=True),
    Key("grpoPpoMiniBatchSize", "integer", 0,
        "actor_rollout_ref.actor.ppo_mini_batch_size; 0 = a quarter of the train batch (4 updates per step).",
        minimum=0, **_ROWS),
    # Per-GPU micro batches are split from at most a full batch's samples.
    Key("grpoPpoMicroBatchSizePerGpu", "integer", 16, "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu.",
        minimum=1, **_SAMPLES),
    Key("grpoLogProbMicroBatchSizePerGpu", "integer", 8,
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu.", minimum=1, **_SAMPLES),
    Key("grpoRefLogProbMicroBatchSizePerGpu", "integer", 4,
        "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu.", minimum=1, **_SAMPLES),
    Key("grpoTensorParallelSize", "integer", 0,
        "actor_rollout_ref.rollout.tensor_model_parallel_size; 0 = the smallest that fits (heads, GPU memory).",
        minimum=0, maximum=max(a.gpus_per_node for a in ACCELERATORS.values()),
        why="vLLM shards a model within one node's GPUs"),
    Key("grpoGpuMemoryUtilization", "string", "0.6", "actor_rollout_ref.rollout.gpu_memory_utilization.",
        minimum=0.0, maximum=1.0, open_minimum=True),
    Key("grpoRolloutEngine", "string", "vllm", f"actor_rollout_ref.rollout.name: {_either(_ENGINES)}.",
        choices=_ENGINES),
    Key("grpoActorStrategy", "string", "fsdp2", f"actor_rollout_ref.actor.strategy: {_either(_STRATEGIES)}.",
        choices=_STRATEGIES),
    Key("grpoKlLossCoef", "string", "0.001", "actor_rollout_ref.actor.kl_loss_coef (KL as a loss term).",
        minimum=0.0, maximum=10.0),
    Key("grpoKlLossType", "string", "low_var_kl", "actor_rollout_ref.actor.kl_loss_type.", choices=_KL_TYPES),
    Key("grpoEntropyCoeff", "string", "0", "actor_rollout_ref.actor.entropy_coeff.", minimum=0.0, maximum=10.0),
    Key("grpoTotalEpochs", "integer", 2, "trainer.total_epochs.", minimum=1, maximum=1000,
        why="passes over the training data; more is a typo"),
    Key("grpoTotalTrainingSteps", "integer", 0,
        "trainer.total_training_steps: stop after this many steps (0 = run every epoch).", minimum=0,
        maximum=1_000_000, why="optimizer steps of one run; more is a typo"),
    # -1: never (verl's convention for the frequencies); 0: derived (stacks.checkpoints.cadence).
    Key("grpoSaveFreq", "integer", 0, "trainer.save_freq: steps between checkpoints (verl also saves the last); "
        "0 = from the capacity's preemption risk and the save time (the plan shows the work a preemption "
        "loses); -1 = never (not with jobMergeModel).", minimum=-1, **_STEPS),
    Key("grpoSaveContents", "string", "auto", "actor.checkpoint.save_contents: full (model, optimizer, extra), "
        "model (no AdamW moments: a third of the bytes, a resume restarts them), auto = model on spot, else full.",
        choices=("auto", "full", "model")),
    Key("grpoTestFreq", "integer", 10, "trainer.test_freq (steps between validations).", minimum=-1, **_STEPS),
    Key("grpoValBeforeTrain", "boolean", True, "trainer.val_before_train (a baseline score at step 0)."),
    # tensorboard: verl 0.6.1 requires it (its package metadata), so the image has it; see TENSORBOARD_DIR.
    Key("grpoLogger", "array", ["console", "tensorboard"],
        "trainer.logger backends, e.g. [console, tensorboard, wandb] (wandb needs wandbApiKey)."),
    Key("grpoExtraOverrides", "array", [], "Extra verl Hydra overrides (key=value), appended last.",
        plain_text="its items are the job's entrypoint, in plain text on the Ray dashboard and in the state (a "
                   "token the run needs goes in hfToken or wandbApiKey)", credentials=OWN_RULES),
    Key("grpoUseRemovePadding", "boolean", True, "actor_rollout_ref.model.use_remove_padding (sequence packing)."),
    Key("grpoUseDynamicBsz", "boolean", True,
        "actor.use_dynamic_bsz and the log-prob passes' *_use_dynamic_bsz (micro-batches by tokens)."),
    Key("grpoPpoMaxTokenLenPerGpu", "integer", 0,
        "actor.ppo_max_token_len_per_gpu; 0 = the largest multiple of prompt+response <= 32768 that fits.",
        minimum=0, **_TOKENS),
    Key("grpoLogProbMaxTokenLenPerGpu", "integer", 0,
        "rollout/ref log_prob_max_token_len_per_gpu; 0 = up to 2x the update budget, as memory allows.",
        minimum=0, **_TOKENS),
    Key("grpoFsdpSize", "integer", 0,
        "actor.fsdp_config.fsdp_size: -1 = shard over all GPUs, n = HSDP groups of n; 0 = the faster that fits.",
        minimum=-1, maximum=4096, why="GPUs in one FSDP shard group; more is a typo"),
    Key("grpoMaxCheckpointsToKeep", "integer", 2, "trainer.max_actor_ckpt_to_keep (older checkpoints deleted).",
        minimum=1, maximum=1000, why="checkpoints; more is a typo"),
)
KEYS_BY_NAME = {k.name: k for k in KEYS}

# Where a credential typed into a plain key belongs (catalog.secret_shapes' shapes -> the secret key that takes it).
_SECRET_FOR = {secret_shapes.HF_TOKEN: KEYS_BY_NAME["hfToken"].name,
               secret_shapes.WANDB_KEY: KEYS_BY_NAME["wandbApiKey"].name}


def _no_credential(commit_ids: bool) -> Check:
    """No credential in a plain key (a token typed as the image tag, a W&B key as the namespace): the value would
    reach plan.json, the state, the manifests and the terminal. The message never shows it (catalog.problems.shown)."""
    def check(value: object) -> str | None:
        text = value if isinstance(value, str) else json.dumps(value)
        what = secret_shapes.credential_shape(text, commit_ids=commit_ids)
        if what is None:
            return None
        secret = _SECRET_FOR.get(what)
        how = (f"a token the run needs is the secret {secret}: `pulumi config set --secret {secret} <value>`" if secret
               else f"remove it: the program keeps only {_either(list(_SECRET_FOR.values()))} secret")
        return f"must not hold a credential: this key's value is plain text in plan.json, the state and the " \
               f"manifests; {how}"
    return check


# Rules every key of a kind obeys, on its value as given (the CLI's string, or the row's default when unset) before
# its type is read: (which keys, rule); the first broken one is reported. A rule for every non-secret key is one
# more row here, `(lambda k: not k.secret, <its check>)`; a secret key's value is judged by its own row only
# (Key.rules), never shown.
KIND_RULES: tuple[tuple[Callable[[Key], bool], Check], ...] = (
    (lambda k: not k.secret and k.credentials == REFUSED, _no_credential(commit_ids=False)),
    (lambda k: not k.secret and k.credentials == COMMIT_IDS, _no_credential(commit_ids=True)),
    (lambda k: k.name.startswith("gcp:"), _gcp_as_typed),
)

# Keys whose bound follows the run's rows (GSM8K's or dataTrainFile's; stacks.cross_keys): a batch holds at most
# every row, a per-GPU micro batch at most a full batch's samples (rows x the most responses per prompt).
BATCH_KEYS = ("grpoTrainBatchSize", "grpoPpoMiniBatchSize")
MICRO_KEYS = ("grpoPpoMicroBatchSizePerGpu", "grpoLogProbMicroBatchSizePerGpu", "grpoRefLogProbMicroBatchSizePerGpu")
# What a type error on one of them says is allowed: the row's maximum is only the typo guard.
DATA_BOUND = {**dict.fromkeys(BATCH_KEYS, f"the run's training rows ({GSM8K.train_rows} for GSM8K)"),
              **dict.fromkeys(MICRO_KEYS, "a full batch's samples (the run's rows x "
                              f"{KEYS_BY_NAME['grpoRolloutN'].maximum})")}


def full(name: str) -> str:
    """The key as `pulumi config` and the stack files spell it, e.g. verl-gke:gpuNodes."""
    return KEYS_BY_NAME[name].full


# The recipe names its inputs by field (catalog.problems.named); the user sets keys. A GrpoSettings field is the
# key "grpo" + CamelCase(field); the recipe's other inputs:
RECIPE_INPUTS = {"nnodes": "gpuNodes", "train_file": "dataTrainFile", "reward_file": "rewardFile",
                 "reward_function": "rewardFunction"}


def field_key(field: str) -> str:
    """The full config key that sets a recipe field, e.g. rollout_n -> verl-gke:grpoRolloutN."""
    return full(RECIPE_INPUTS.get(field) or "grpo" + "".join(part.capitalize() for part in field.split("_")))
