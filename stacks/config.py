"""The typed, validated view of one stack's configuration: the one validation gate.

`load()` turns raw config strings (as the Pulumi CLI hands them to the program) into a frozen
StackConfig and reports every problem at once, each naming the key, the bad value and what is
allowed, before any resource is registered. It checks every rule a component would enforce on a
config-derived value, with the component's own implementation (catalog.naming, catalog.capacity),
so a config that passes here never fails inside a component.
"""

from __future__ import annotations

import dataclasses
import difflib
import ipaddress
import json
import math
import re
import unicodedata
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

from catalog import gcp_ranges, gcsfuse, gke, naming, storage_locations, zones
from catalog.accelerators import (
    ACCELERATORS,
    Accelerator,
    gke_reserved_cpu,
    gke_reserved_memory_gib,
)
from catalog.capacity import Capacity
from catalog.datasets import GSM8K, DatasetFacts
from catalog.gcp_provider import GCP_PROVIDER_KEYS, provider_keys
from catalog.gcsfuse import STANDARD_SIDECAR_REQUEST
from catalog.gke import Floor
from catalog.models import is_gated
from catalog.problems import MAX_LINES, MAX_SHOWN, SECRET, ConfigError, Problem, shown
from recipe import tuning
from recipe.grpo import GrpoSettings, settings_problems, task_override_problems
from recipe.grpo import warnings as grpo_warnings
from stacks import checkpoints, component_rules, dataset
from stacks.keys import CHANNELS, KEYS, KEYS_BY_NAME, MODES, PROJECT, Key, field_key

__all__ = ["CHANNELS", "KEYS", "KEYS_BY_NAME", "MODES", "PROJECT", "ConfigError", "StackConfig", "load", "from_pulumi"]
PLACEHOLDER_PROJECT = "replace-with-your-project-id"  # what the stack files ship with


MAX_PREFIX = 20  # keeps "<prefix>-rdma-sub-N", the cluster (<= 40) and bucket names legal
_ATOI = re.compile(r"^[+-]?[0-9]+$")  # what Go's strconv.Atoi takes (the CLI's `integer` check)
# Why a key other than the secret ones (hfToken, wandbApiKey) cannot be kept secret when set with --secret.
_PLAIN_TEXT_WHY = {
    "": "its value goes into resource names, inputs or outputs, or the job, in plain text",
    "billingAccount": "the budget's resource id (billingAccounts/<id>/budgets/...) is plain text in the state",
    "grpoExtraOverrides": "its items are the job's entrypoint, in plain text on the Ray dashboard and in the "
                          "state (a token the run needs goes in hfToken or wandbApiKey)",
}
# Keys whose bound follows the run's rows (GSM8K's or dataTrainFile's): a batch holds at most every row, a
# per-GPU micro batch at most a full batch's samples (rows x the most responses per prompt).
_BATCH_KEYS = ("grpoTrainBatchSize", "grpoPpoMiniBatchSize")
_MICRO_KEYS = ("grpoPpoMicroBatchSizePerGpu", "grpoLogProbMicroBatchSizePerGpu", "grpoRefLogProbMicroBatchSizePerGpu")
# What a type error on one of them says is allowed: the row's maximum is only the typo guard.
_DATA_BOUND = {**dict.fromkeys(_BATCH_KEYS, f"the run's training rows ({GSM8K.train_rows} for GSM8K)"),
               **dict.fromkeys(_MICRO_KEYS, "a full batch's samples (the run's rows x "
                               f"{KEYS_BY_NAME['grpoRolloutN'].maximum})")}
# The keys the recipe's arithmetic reads: it runs only when every one passed the table and its rules.
_RECIPE_KEYS = frozenset({k.name for k in KEYS if k.name.startswith("grpo")} | {"gpuNodes", "model"})


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
    """Typed access to raw config strings that records problems instead of raising.

    A key marked secret (`pulumi config set --secret`) that the program cannot keep secret is refused and
    read as its default from then on, so no later rule shows its value; no problem ever shows a secret's."""

    def __init__(self, raw: Mapping[str, str], secret_keys: Collection[str] = ()):
        self.secret = frozenset(secret_keys)
        self.problems: list[Problem] = []
        self.missing: set[str] = set()
        self.refused: set[str] = set()  # keys with a problem: the arithmetic never runs on their values
        self.v: dict[str, Any] = {}  # every key's value as read (values())
        self.masked = {k.name for k in KEYS if k.full in self.secret and not k.secret}
        for key in sorted(self.masked):
            self.problems.append(Problem(
                KEYS_BY_NAME[key].full, f"is set as a secret (--secret), which the program cannot keep: "
                f"{_PLAIN_TEXT_WHY.get(key, _PLAIN_TEXT_WHY[''])}; set it with `pulumi config set {key} <value>` "
                f"(only {' and '.join(k.name for k in KEYS if k.secret)} are kept secret)"))
        self.refused |= self.masked
        masked = {KEYS_BY_NAME[k].full for k in self.masked}
        self.raw = {k: v for k, v in raw.items() if k not in masked}

    def bad(self, key: str, value: object, allowed: str) -> None:
        full = KEYS_BY_NAME[key].full
        self.problems.append(Problem(full, allowed, SECRET if full in self.secret else value))
        self.refused.add(key)

    def _value(self, key: str) -> Any:
        spec = KEYS_BY_NAME[key]
        if spec.full in self.raw:
            return self.raw[spec.full]
        return spec.default

    def values(self) -> dict[str, Any]:
        """Every key but the secrets (read by the program itself), checked against its row of the table."""
        self.v = {k.name: self.read(k) for k in KEYS if not k.secret}
        return self.v

    def read(self, k: Key) -> Any:
        """One key as its row types it: integer, boolean, list, number, one of its choices, or text."""
        if k.type == "integer":
            return self.int(k)
        if k.type == "boolean":
            return self.bool(k.name)
        if k.type == "array":
            return self.list(k.name)
        if k.number:
            return self.float(k)
        text = self.str(k.name)
        if k.choices and text not in k.choices and k.name not in self.missing:
            self.bad(k.name, text, "must be one of " + ", ".join(k.choices))
        return text

    def str(self, key: str) -> str:
        """The value as text; a required key (no default) that is unset or empty is reported once."""
        value = self._value(key)
        text = "" if value is None else str(value).strip()
        if key.startswith("gcp:") and text and text != str(value):
            # The Google provider reads gcp:* keys itself, as typed: "my-project\n" is not my-project there.
            self.bad(key, value, "has leading or trailing whitespace, which the Google provider keeps: remove it")
        if not text and KEYS_BY_NAME[key].default is None and key not in self.masked:
            self.problems.append(Problem(KEYS_BY_NAME[key].full, f"is not set: {KEYS_BY_NAME[key].description}"))
            self.missing.add(key)
            self.refused.add(key)
        return text

    def check(self, key: str, value: object, problem: str | None) -> None:
        """Record `problem` (a catalog rule's answer) against key, unless the key was reported missing."""
        if problem and key not in self.missing:
            self.bad(key, value, problem)

    def int(self, k: Key) -> int:
        """An integer as the Pulumi CLI accepts one for an `integer` key (Go strconv.Atoi: optional
        sign, decimal digits, int64), within the row's bounds: every count has an upper bound."""
        value = self._value(k.name)
        text = str(value)
        minimum, maximum = k.minimum, k.maximum
        if not _ATOI.fullmatch(text) or not -(2**63) <= int(text) < 2**63:
            self.bad(k.name, value, f"must be an integer from {minimum if minimum is not None else 0} "
                     f"to {_DATA_BOUND.get(k.name, maximum)}")
            return minimum or 0
        number = int(text)
        if minimum is not None and number < minimum:
            self.bad(k.name, number, f"must be an integer >= {minimum}")
        elif number > maximum:
            self.bad(k.name, number, f"must be at most {maximum} ({k.why})")
            return minimum or 0
        return number

    def float(self, k: Key) -> float:
        """A number written as a string, within the row's bounds ((minimum, maximum] when open_minimum)."""
        value = self._value(k.name)
        low, high = k.minimum, k.maximum
        try:
            number = float(str(value).strip())
        except (TypeError, ValueError):
            self.bad(k.name, value, "must be a number")
            return low
        if not math.isfinite(number):  # float() takes nan and inf; no comparison below would catch nan
            self.bad(k.name, value, f"must be a finite number in [{low}, {high}]")
            return low
        if number < low or number > high or (k.open_minimum and number == low):
            bracket = "(" if k.open_minimum else "["
            self.bad(k.name, number, f"must be a number in {bracket}{low}, {high}]")
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


def load(raw: Mapping[str, str], stack: str, allow_placeholder_project: bool = False,
         secret_keys: Collection[str] = ()) -> StackConfig:
    """Validate raw config (full keys -> strings, as the CLI hands them to the program; `secret_keys`: the
    keys it marks secret) into a StackConfig."""
    r = _Reader(raw, secret_keys)
    r.problems += unknown_keys(raw)
    r.values()  # every key against its row of the table; the rules below read r.v

    project = r.v["gcp:project"]
    r.check("gcp:project", project, naming.project_id_problem(project))
    if project == PLACEHOLDER_PROJECT and not allow_placeholder_project:
        r.bad("gcp:project", project, "is the placeholder; run `pulumi config set gcp:project <your-project>`")
    region = r.v["gcp:region"]
    r.check("gcp:region", region, naming.region_problem(region))
    zone = r.v["gcp:zone"]
    if region and "gcp:region" not in r.missing:
        r.check("gcp:zone", zone, naming.zone_in_region_problem(zone, region))

    acc_key = r.v["accelerator"]
    acc = ACCELERATORS.get(acc_key, ACCELERATORS["b200"])
    vouched = r.v["zoneOffersAccelerator"]
    if vouched and vouched != zone:
        r.bad("zoneOffersAccelerator", vouched, f"must be empty or gcp:zone ({zone}): it vouches for that one zone")
    if acc_key in ACCELERATORS and zone and "gcp:zone" not in r.missing and not naming.zone_problem(zone):
        r.check("gcp:zone", zone, zones.offered_problem(acc.machine_type, zone, vouched))
    mode = r.v["clusterMode"]
    gpu_nodes = r.v["gpuNodes"]
    # The capacity's own rules and what the machine offers are GkeClusterArgs' (stacks.component_rules).
    capacity = Capacity(r.v["capacity"], r.v["reservation"])
    if capacity.reservation:
        r.check("reservation", capacity.reservation, naming.dns_1035_label_problem(capacity.reservation))

    prefix = r.v["namePrefix"]
    if problem := naming.dns_1035_label_problem(prefix, MAX_PREFIX):
        r.bad("namePrefix", prefix, problem)
    else:
        _derived_names(r, prefix, acc)
    namespace = r.v["namespace"]
    r.check("namespace", namespace, naming.namespace_problem(namespace))

    network = _network(r, acc, gpu_nodes)
    cluster = _cluster(r, acc, mode, capacity)

    model = r.v["model"]
    model_problem = naming.model_id_problem(model)  # also guards the arithmetic below
    r.check("model", model, model_problem)
    has_token = bool(raw.get(KEYS_BY_NAME["hfToken"].full))
    if is_gated(model) and not has_token:
        r.bad("hfToken", "<unset>", f"model {model} is gated on the hub: run "
              "`pulumi config set --secret hfToken <token>` with a token that has access")

    verl_version = r.v["verlVersion"]
    r.check("verlVersion", verl_version, naming.release_tag_problem(verl_version))
    image = r.v["image"]
    r.check("image", image, naming.image_ref_problem(image))
    ray_version = r.v["rayVersion"]
    r.check("rayVersion", ray_version, naming.ray_version_problem(ray_version))

    budget = _budget(r)
    bucket_location = r.v["bucketLocation"]
    if bucket_location:
        r.check("bucketLocation", bucket_location, storage_locations.bucket_location_problem(bucket_location))
    elif region and "gcp:region" not in r.missing and not naming.region_problem(region):
        # The bucket defaults to the cluster's region: it must be a location Cloud Storage offers.
        r.check("gcp:region", region, storage_locations.bucket_location_problem(region))
    bucket_location = bucket_location or region
    bucket_name = r.v["bucketName"]
    if bucket_name:
        r.check("bucketName", bucket_name, naming.bucket_prefix_problem(bucket_name, 63))
    delete_bucket = r.v["bucketDeleteOnDestroy"]
    soft_delete = r.v["bucketSoftDeleteDays"]
    r.check("bucketSoftDeleteDays", soft_delete, naming.soft_delete_days_problem(soft_delete))
    task, reading, task_ok = _task(r)
    if task is None and not r.v["dataTrainFile"]:  # own data that failed to read: its rows are unknown, not GSM8K's
        _batch_bounds(r, GSM8K.train_rows, "the GSM8K training rows")
    grpo = _grpo(r)
    # Before the layouts are weighed: their checkpoint sizes follow what a checkpoint holds.
    grpo = dataclasses.replace(grpo, save_contents=checkpoints.contents_for(grpo.save_contents, capacity.kind))
    if grpo.save_freq < 0 and r.v["jobMergeModel"]:
        # verl saves, the last step included, only when save_freq > 0 (trainer/ppo/ray_trainer.py fit, v0.6.1):
        # the merge would find nothing, fail the job, and each resubmission would train from step 0 again.
        r.bad("grpoSaveFreq", grpo.save_freq, f"-1 saves no checkpoint, and {KEYS_BY_NAME['jobMergeModel'].full} "
              "(on) merges the last one: use 0 (derived) or n >= 1, or set jobMergeModel to false")
    overrides_ok = True
    if task is not None:
        found = _named(task_override_problems(grpo.extra_overrides))
        r.problems += found
        overrides_ok = not found
    inputs_ok = overrides_ok and not r.refused & _RECIPE_KEYS  # the recipe's inputs all passed the table
    warnings: list[str] = []
    data, notes = GSM8K, []
    if task is not None and reading is not None and task_ok and inputs_ok:
        data, found, task_warnings, notes = dataset.facts(
            task, reading, max_prompt_length=grpo.max_prompt_length, max_response_length=grpo.max_response_length)
        r.problems += found
        warnings += reading.warnings + task_warnings
        notes = reading.notes + notes
        task_ok = not found
    # Arithmetic only on values that parsed, and on a model id that is one (else it reports the wrong thing).
    if inputs_ok and gpu_nodes >= 1 and task_ok and not model_problem:
        grpo, derive_problems = tuning.resolve(grpo, model=model, acc=acc, nnodes=gpu_nodes, data=data)
        r.problems += _named(derive_problems)
        if not derive_problems:
            shape = {"nnodes": gpu_nodes, "gpus_per_node": acc.gpus_per_node, "model": model}
            found = settings_problems(grpo, accelerator=acc, data=data, **shape)
            r.problems += _named(found)
            warnings += [] if found else map(str, _named(grpo_warnings(grpo, accelerator=acc, data=data, **shape)))
            grpo = checkpoints.resolve_save_freq(grpo, model=model, acc=acc, nnodes=gpu_nodes,
                                                 capacity_kind=capacity.kind, data=data)
    _secret_problems(r, raw, grpo.extra_overrides)
    has_wandb_key = bool(raw.get(KEYS_BY_NAME["wandbApiKey"].full))
    if "wandb" in grpo.logger and not has_wandb_key:
        # Without a key wandb.init fails in the TaskRunner, after every GPU has loaded the model.
        r.bad("wandbApiKey", "<unset>", "grpoLogger has wandb: run `pulumi config set --secret "
              "wandbApiKey <key>` (https://wandb.ai/authorize), or drop wandb from grpoLogger")
    job = JobSettings(
        submit=r.v["submitJob"],
        ready_timeout_s=r.v["jobReadyTimeoutMinutes"] * 60,
        wait_for_completion=r.v["jobWaitForCompletion"],
        completion_timeout_s=r.v["jobCompletionTimeoutMinutes"] * 60,
        resubmit_on_failure=r.v["jobResubmitOnFailure"],
        max_recoveries=r.v["jobMaxRecoveries"],
        release_gpus=r.v["jobReleaseGpus"],
        merge_model=r.v["jobMergeModel"],
    )
    image_mirror = r.v["imageMirror"]
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
# Ours first: a typo is most likely of a key the stack files set.
GCP_NAMES = [k.name.partition(":")[2] for k in KEYS if k.name.startswith("gcp:")] + sorted(GCP_PROVIDER_KEYS)


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


def _invisible(key: str) -> bool:
    """Whether a key carries characters a reader cannot see: spaces, zero-width or other format characters."""
    return any(c.isspace() or unicodedata.category(c) in ("Cf", "Cc", "Zs", "Zl", "Zp") for c in key)


def _visible(key: str) -> str:
    return "".join(c for c in unicodedata.normalize("NFKC", key)
                   if not (c.isspace() or unicodedata.category(c) in ("Cf", "Cc", "Zs", "Zl", "Zp")))


def unknown_keys(raw: Mapping[str, str]) -> list[Problem]:
    """Keys in our namespace (or one a typo away from it) that the program does not read, and keys in a
    namespace nothing in `pulumi up` reads."""
    problems: list[Problem] = []
    ours = [k.name for k in KEYS if ":" not in k.name]
    known = {k.full for k in KEYS}

    def closest(name: str, names: list[str]) -> list[str]:
        # A "did you mean" only where a line can be printed: difflib over every key of a file with 20,000
        # stray ones took seconds for lines nobody sees (ConfigError prints the first MAX_LINES).
        return difflib.get_close_matches(name, names, n=1, cutoff=0.6) \
            if len(name) <= MAX_SHOWN and len(problems) < MAX_LINES else []

    for key in sorted(raw):
        namespace, _, name = key.partition(":")
        if key not in known and _invisible(key):
            # Show the exact characters: a "did you mean" with an identical-looking name helps no one.
            look_alike = _visible(key)
            hint = (f"it looks like {look_alike} but carries invisible or space characters; retype it"
                    if look_alike in known else "keys have no spaces or invisible characters")
            problems.append(Problem(shown(key), f"(as typed, escaped) is not a known key: {hint}"))
        elif namespace == PROJECT and name not in KEYS_BY_NAME:
            close = closest(name, ours)
            hint = f"did you mean {PROJECT}:{close[0]}?" if close else "see Pulumi.yaml for the declared keys"
            problems.append(Problem(key, f"is not a known key: {hint}"))
        elif namespace == "gcp" and key not in known and name not in provider_keys():
            # The Google provider reads its own keys (catalog.gcp_provider); a typo of one (gcp:regoin) would
            # otherwise surface only as the key it meant being unset.
            close = closest(name, GCP_NAMES)
            hint = f"did you mean gcp:{close[0]}?" if close else "the keys it reads are in catalog/gcp_provider.py"
            problems.append(Problem(key, f"is not a key the Google provider reads: {hint}"))
        elif namespace != PROJECT and len(namespace) <= MAX_SHOWN and \
                difflib.SequenceMatcher(None, namespace.lower(), PROJECT).ratio() >= 0.75:
            problems.append(Problem(key, f"namespace {namespace!r} is not this project's; did you mean "
                                         f"{PROJECT}:{name}?"))
        elif namespace not in READ_NAMESPACES:
            hint = f"; did you mean {PROJECT}:{name}?" if name in KEYS_BY_NAME else ""
            problems.append(Problem(key, f"nothing in this program reads namespace {namespace!r} (it reads "
                                         f"{', '.join(n + ':' for n in READ_NAMESPACES)} keys), so the value would be "
                                         f"silently ignored{hint}"))
    return problems


def _task(r: _Reader) -> tuple[dataset.TaskSpec | None, dataset.Inspection | None, bool]:
    """The stack's own data and reward (stacks.dataset): paths checked, files read and the reward
    smoke-tested here, so a broken file fails the plan and `pulumi preview` before anything exists.
    Returns (task, its reading, whether it is usable); (None, None, True) for GSM8K."""
    train, val, reward = r.v["dataTrainFile"], r.v["dataValFile"], r.v["rewardFile"]
    function, packages = r.v["rewardFunction"], r.v["rewardPackages"]
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
            r.bad("dataTrainRows", r.v["dataTrainRows"], "only applies with a gs:// dataTrainFile")
        return None, None, True
    before = len(r.problems)
    if not val:
        r.bad("dataValFile", val, "must be set with dataTrainFile: verl validates on it (data.val_files)")
    if problem := dataset.identifier_problem(function):
        r.bad("rewardFunction", function, problem)
    for name in packages:
        if problem := dataset.identifier_problem(name):
            r.bad("rewardPackages", name, f"{problem} (a top-level module name, e.g. sympy)")
    found: list[Problem] = []
    files = {role: dataset.resolve_file(KEYS_BY_NAME[key].full, value, name, found)
             for role, key, value, name in (("train", "dataTrainFile", train, "train.parquet"),
                                             ("val", "dataValFile", val, "val.parquet"),
                                             ("reward", "rewardFile", reward, "reward.py")) if value}
    r.problems += found
    if len(r.problems) > before:
        return None, None, False
    declared = r.v["dataTrainRows"]
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
    _batch_bounds(r, rows, f"the {rows} rows of dataTrainFile")
    return task, reading, True


def _batch_bounds(r: _Reader, rows: int, whose: str) -> None:
    """A batch holds at most the run's rows; a per-GPU micro batch at most a full batch's samples."""
    samples = rows * KEYS_BY_NAME["grpoRolloutN"].maximum
    for key, top, why in [*((k, rows, whose) for k in _BATCH_KEYS),
                          *((k, samples, "a full batch's samples") for k in _MICRO_KEYS)]:
        if key not in r.refused and r.v[key] > top:
            r.bad(key, r.v[key], f"must be at most {top} ({why})")


def _budget(r: _Reader) -> BudgetConfig | None:
    """The optional budget alert: both keys or neither."""
    account = r.v["billingAccount"]
    amount = r.v["budgetMonthly"]
    if account:
        r.check("billingAccount", account, naming.billing_account_id_problem(account))
        if amount < 1:
            r.bad("budgetMonthly", amount, "must be a positive amount (in the billing account's currency) "
                  "when billingAccount is set")
    elif amount > 0 and "billingAccount" not in r.masked:
        r.bad("billingAccount", "<unset>", "must be set when budgetMonthly is set (the budget lives on the "
              "billing account): run `pulumi config set billingAccount 012345-567890-ABCDEF`")
    return BudgetConfig(account, amount) if account and amount > 0 else None


def _derived_names(r: _Reader, prefix: str, acc: Accelerator) -> None:
    """The names built from namePrefix must pass the rules of the components that use them."""
    bucket = f"{prefix}-data"
    if problem := naming.bucket_prefix_problem(bucket, naming.MAX_BUCKET_PREFIX):
        r.bad("namePrefix", prefix, f"the bucket name {bucket}-<suffix> {problem.removeprefix('must ')}"
              if problem.startswith("must not") else problem)
    # The RayCluster name's rules are RayClusterArgs' (stacks.component_rules).
    if problem := naming.service_account_id_problem(f"{prefix}-nodes"):
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

    primary, pods, services = r.v["primaryCidr"], r.v["podsCidr"], r.v["servicesCidr"]
    gvnic = r.v["gvnicCidr"]
    rdma = r.v["rdmaCidrs"]
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
    mtu = r.v["mtu"]  # GCP VPC MTU range: 1300..8896
    return NetworkConfig(primary, pods, services, gvnic, rdma, mtu)


def _cluster(r: _Reader, acc: Accelerator, mode: str, capacity: Capacity) -> ClusterConfig:
    floors = acc.gke_floors + capacity.gke_floors + gcsfuse.gke_floors()
    pin = r.v["gkeVersion"]
    if pin and (problem := naming.gke_version_pin_problem(pin)):
        r.bad("gkeVersion", pin, problem)
    elif pin:
        # A full pin meets every floor or fails here; a minor pin fails here when its whole minor is
        # below a floor, and otherwise at deploy time if the channel's newest patch of it is (preflight).
        short = gke.unmet(pin, floors) if gke.version_key(pin) else gke.unmet_by_minor(pin, floors)
        if short:
            r.bad("gkeVersion", pin, f"is below {short[0].version}, the floor for {short[0].needed_for} "
                  f"({short[0].source}); unset it to take the release channel's newest version")
    channel = r.v["releaseChannel"]
    if mode == "autopilot" and not acc.autopilot:
        r.bad("clusterMode", mode, f"accelerator {acc.key} has no Autopilot worker size in the catalog: use standard")
    zonal = r.v["zonalCluster"]
    if zonal and mode == "autopilot":
        r.bad("zonalCluster", True, "Autopilot clusters are regional: set it false or use clusterMode standard")
    head_cpu = r.v["rayHeadCpu"]
    head_memory = r.v["rayHeadMemoryGib"]
    machine = r.v["cpuMachineType"]
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
    lo = r.v["cpuNodesMin"]
    hi = r.v["cpuNodesMax"]
    if hi < lo:
        r.bad("cpuNodesMax", hi, f"must be >= cpuNodesMin ({lo})")
    return ClusterConfig(mode, pin, channel, floors, _authorized_networks(r), machine, lo, hi,
                         r.v["deletionProtection"], zonal, head_cpu, head_memory)


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
    cidrs = r.v["masterAuthorizedNetworks"]
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
        train_batch_size=r.v["grpoTrainBatchSize"],
        rollout_n=r.v["grpoRolloutN"],
        max_prompt_length=r.v["grpoMaxPromptLength"],
        max_response_length=r.v["grpoMaxResponseLength"],
        learning_rate=r.v["grpoLearningRate"],
        ppo_mini_batch_size=r.v["grpoPpoMiniBatchSize"],
        ppo_micro_batch_size_per_gpu=r.v["grpoPpoMicroBatchSizePerGpu"],
        log_prob_micro_batch_size_per_gpu=r.v["grpoLogProbMicroBatchSizePerGpu"],
        ref_log_prob_micro_batch_size_per_gpu=r.v["grpoRefLogProbMicroBatchSizePerGpu"],
        tensor_parallel_size=r.v["grpoTensorParallelSize"],
        gpu_memory_utilization=r.v["grpoGpuMemoryUtilization"],
        rollout_engine=r.v["grpoRolloutEngine"],
        actor_strategy=r.v["grpoActorStrategy"],
        kl_loss_coef=r.v["grpoKlLossCoef"],
        kl_loss_type=r.v["grpoKlLossType"],
        entropy_coeff=r.v["grpoEntropyCoeff"],
        total_epochs=r.v["grpoTotalEpochs"],
        save_freq=r.v["grpoSaveFreq"],
        test_freq=r.v["grpoTestFreq"],
        val_before_train=r.v["grpoValBeforeTrain"],
        logger=r.v["grpoLogger"],
        extra_overrides=r.v["grpoExtraOverrides"],
        use_remove_padding=r.v["grpoUseRemovePadding"],
        use_dynamic_bsz=r.v["grpoUseDynamicBsz"],
        ppo_max_token_len_per_gpu=r.v["grpoPpoMaxTokenLenPerGpu"],
        log_prob_max_token_len_per_gpu=r.v["grpoLogProbMaxTokenLenPerGpu"],
        fsdp_size=r.v["grpoFsdpSize"],
        max_checkpoints_to_keep=r.v["grpoMaxCheckpointsToKeep"],
        total_training_steps=r.v["grpoTotalTrainingSteps"],
        save_contents=r.v["grpoSaveContents"],
    )


def _named(found: list[Problem]) -> list[Problem]:
    """The recipe's problems (in its own field names) as the user reads them: naming the config keys."""
    return [p.renamed(field_key) for p in found]


def from_pulumi(stack: str, allow_placeholder_project: bool = False) -> StackConfig:
    """Load from the running Pulumi program's config (the CLI or the mocks set it)."""
    import pulumi.runtime.config as rc

    # The CLI passes config in PULUMI_CONFIG (the secret keys in PULUMI_CONFIG_SECRET_KEYS); the Automation API's
    # language server, mocks and tests set both in-process.
    raw = {**rc.get_config_env(), **rc.CONFIG.get()}
    secret = {k for k in raw if rc.is_config_secret(k)} | set(rc.get_config_secret_keys_env())
    return load(raw, stack, allow_placeholder_project, secret_keys=secret)
