"""The typed, validated view of one stack's configuration, and the one validation gate: `load()`.

`load()` turns raw config strings (as the Pulumi CLI hands them to the program) into a frozen
StackConfig and reports every problem at once (catalog.problems), each naming the key, the bad value
and what is allowed, before any resource is registered. It holds no rule itself; it calls them, in
order, where each sits:
- each key's row, its type, bounds, choices and own rules: stacks.keys, read by stacks.key_values;
- the rules over several keys: stacks.cross_keys (the stack's own data and reward: stacks.dataset);
- the recipe's, on the GRPO settings: recipe.grpo (settings_problems, extra_override_problems: the extra
  overrides read as Hydra reads them, recipe.overrides) and recipe.tuning (what cannot be derived);
- every component's, on the args this config gives it: XArgs.problems(), through stacks.component_rules.
A config that passes here never fails inside a component.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

from catalog import gcsfuse
from catalog.accelerators import ACCELERATORS, Accelerator
from catalog.capacity import Capacity
from catalog.datasets import GSM8K, DatasetFacts
from catalog.gke import Floor
from catalog.problems import ConfigError, Problem
from recipe import tuning
from recipe.grpo import GrpoSettings, extra_override_problems, settings_problems
from recipe.grpo import warnings as grpo_warnings
from stacks import checkpoints, component_rules, cross_keys, dataset, node_fit
from stacks.cross_keys import PLACEHOLDER_PROJECT
from stacks.key_values import KeyValues
from stacks.keys import CHANNELS, KEYS, KEYS_BY_NAME, MODES, PROJECT, field_key

__all__ = ["CHANNELS", "KEYS", "KEYS_BY_NAME", "MODES", "PLACEHOLDER_PROJECT", "PROJECT", "ConfigError",
           "StackConfig", "load", "from_pulumi"]
# The keys the recipe's arithmetic reads: it runs only when every one passed its row and the rules over keys.
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


def load(raw: Mapping[str, str], stack: str, allow_placeholder_project: bool = False,
         secret_keys: Collection[str] = ()) -> StackConfig:
    """Validate raw config (full keys -> strings, as the CLI hands them to the program; `secret_keys`: the
    keys it marks secret) into a StackConfig."""
    r = KeyValues(raw, secret_keys)  # unknown keys, then every key through its row (stacks.keys)
    v = r.v
    acc = ACCELERATORS.get(v["accelerator"], ACCELERATORS["b200"])
    # The capacity's own rules and what the machine offers are GkeClusterArgs' (stacks.component_rules).
    capacity = Capacity(v["capacity"], v["reservation"])
    floors = acc.gke_floors + capacity.gke_floors + gcsfuse.gke_floors()
    cross_keys.placement(r, acc, allow_placeholder_project)
    cross_keys.network(r, acc)
    cross_keys.cluster(r, acc, floors)
    cross_keys.credentials(r)
    cross_keys.budget(r)
    cross_keys.bucket(r)
    cross_keys.save_freq(r)
    task, reading, task_ok = cross_keys.own_task(r)
    if task is None and not v["dataTrainFile"]:  # own data that failed to read: its rows are unknown, not GSM8K's
        cross_keys.batch_bounds(r, GSM8K.train_rows, "the GSM8K training rows")
    grpo = _grpo(v)
    # Before the layouts are weighed: their checkpoint sizes follow what a checkpoint holds.
    grpo = dataclasses.replace(grpo, save_contents=checkpoints.contents_for(grpo.save_contents, capacity.kind))
    # Every extra override, read as Hydra reads it, judged apart from the recipe's arithmetic (recipe.overrides),
    # which reads only those that passed; a stack's own task is checked against verl's defaults only once all did.
    found = _named(extra_override_problems(grpo.extra_overrides, own_task=task is not None))
    r.problems += found
    overrides_ok = task is None or not found
    inputs_ok = overrides_ok and not r.refused & _RECIPE_KEYS  # the recipe's inputs all passed their rows
    warnings: list[str] = []
    data, notes = GSM8K, []
    if task is not None and reading is not None and task_ok and inputs_ok:
        data, found, task_warnings, notes = dataset.facts(
            task, reading, max_prompt_length=grpo.max_prompt_length, max_response_length=grpo.max_response_length)
        r.problems += found
        warnings += reading.warnings + task_warnings
        notes = reading.notes + notes
        task_ok = not found
    # Arithmetic only on values that passed (a model id that is none would make it report the wrong thing).
    model, gpu_nodes = v["model"], v["gpuNodes"]
    if inputs_ok and task_ok:
        grpo, derive_problems = tuning.resolve(grpo, model=model, acc=acc, nnodes=gpu_nodes, data=data)
        r.problems += _named(derive_problems)
        if not derive_problems:
            shape = {"nnodes": gpu_nodes, "gpus_per_node": acc.gpus_per_node, "model": model}
            found = settings_problems(grpo, accelerator=acc, data=data, **shape)
            r.problems += [p for p in _named(found) if p not in r.problems]  # the overrides' are reported above
            warnings += [] if found else map(str, _named(grpo_warnings(grpo, accelerator=acc, data=data, **shape)))
            grpo = checkpoints.resolve_save_freq(grpo, model=model, acc=acc, nnodes=gpu_nodes,
                                                 capacity_kind=capacity.kind, data=data)
    cross_keys.secret_in_overrides(r, grpo.extra_overrides)
    if r.problems:
        raise ConfigError(r.problems)
    cfg = StackConfig(
        stack=stack, project=v["gcp:project"], region=v["gcp:region"], zone=v["gcp:zone"], accelerator=acc,
        gpu_nodes=gpu_nodes, capacity=capacity, prefix=v["namePrefix"], namespace=v["namespace"],
        network=_network(v, acc), cluster=_cluster(v, floors), bucket_location=v["bucketLocation"] or v["gcp:region"],
        bucket_delete_on_destroy=v["bucketDeleteOnDestroy"], model=model,
        has_hf_token=bool(raw.get(KEYS_BY_NAME["hfToken"].full)),
        has_wandb_key=bool(raw.get(KEYS_BY_NAME["wandbApiKey"].full)),
        verl_version=v["verlVersion"], image=v["image"], ray_version=v["rayVersion"], grpo=grpo, job=_job(v),
        budget=BudgetConfig(v["billingAccount"], v["budgetMonthly"]) if v["billingAccount"] else None,
        warnings=tuple(warnings), bucket_soft_delete_days=v["bucketSoftDeleteDays"], image_mirror=v["imageMirror"],
        bucket_name=v["bucketName"], data=data, task=task, task_notes=tuple(notes),
    )
    # Every component's own rules on the args this config gives it (stacks.component_rules).
    if problems := component_rules.problems(cfg):
        raise ConfigError(problems)
    # Then each pod against its node (from the args the components accepted: stacks.node_fit).
    if problems := node_fit.problems(cfg):
        raise ConfigError(problems)
    return cfg


def _network(v: dict[str, Any], acc: Accelerator) -> NetworkConfig:
    # No gVNIC or RoCE network is built for an accelerator without RDMA NICs.
    gvnic, rdma = (v["gvnicCidr"], v["rdmaCidrs"]) if acc.rdma else ("", ())
    return NetworkConfig(v["primaryCidr"], v["podsCidr"], v["servicesCidr"], gvnic, rdma, v["mtu"])


def _cluster(v: dict[str, Any], floors: tuple[Floor, ...]) -> ClusterConfig:
    return ClusterConfig(v["clusterMode"], v["gkeVersion"], v["releaseChannel"], floors,
                         v["masterAuthorizedNetworks"], v["cpuMachineType"], v["cpuNodesMin"], v["cpuNodesMax"],
                         v["deletionProtection"], v["zonalCluster"], v["rayHeadCpu"], v["rayHeadMemoryGib"])


def _job(v: dict[str, Any]) -> JobSettings:
    return JobSettings(
        submit=v["submitJob"],
        ready_timeout_s=v["jobReadyTimeoutMinutes"] * 60,
        wait_for_completion=v["jobWaitForCompletion"],
        completion_timeout_s=v["jobCompletionTimeoutMinutes"] * 60,
        resubmit_on_failure=v["jobResubmitOnFailure"],
        max_recoveries=v["jobMaxRecoveries"],
        release_gpus=v["jobReleaseGpus"],
        merge_model=v["jobMergeModel"],
    )


def _grpo(v: dict[str, Any]) -> GrpoSettings:
    return GrpoSettings(
        train_batch_size=v["grpoTrainBatchSize"],
        rollout_n=v["grpoRolloutN"],
        max_prompt_length=v["grpoMaxPromptLength"],
        max_response_length=v["grpoMaxResponseLength"],
        learning_rate=v["grpoLearningRate"],
        ppo_mini_batch_size=v["grpoPpoMiniBatchSize"],
        ppo_micro_batch_size_per_gpu=v["grpoPpoMicroBatchSizePerGpu"],
        log_prob_micro_batch_size_per_gpu=v["grpoLogProbMicroBatchSizePerGpu"],
        ref_log_prob_micro_batch_size_per_gpu=v["grpoRefLogProbMicroBatchSizePerGpu"],
        tensor_parallel_size=v["grpoTensorParallelSize"],
        gpu_memory_utilization=v["grpoGpuMemoryUtilization"],
        rollout_engine=v["grpoRolloutEngine"],
        actor_strategy=v["grpoActorStrategy"],
        kl_loss_coef=v["grpoKlLossCoef"],
        kl_loss_type=v["grpoKlLossType"],
        entropy_coeff=v["grpoEntropyCoeff"],
        total_epochs=v["grpoTotalEpochs"],
        save_freq=v["grpoSaveFreq"],
        test_freq=v["grpoTestFreq"],
        val_before_train=v["grpoValBeforeTrain"],
        logger=v["grpoLogger"],
        extra_overrides=v["grpoExtraOverrides"],
        use_remove_padding=v["grpoUseRemovePadding"],
        use_dynamic_bsz=v["grpoUseDynamicBsz"],
        ppo_max_token_len_per_gpu=v["grpoPpoMaxTokenLenPerGpu"],
        log_prob_max_token_len_per_gpu=v["grpoLogProbMaxTokenLenPerGpu"],
        fsdp_size=v["grpoFsdpSize"],
        max_checkpoints_to_keep=v["grpoMaxCheckpointsToKeep"],
        total_training_steps=v["grpoTotalTrainingSteps"],
        save_contents=v["grpoSaveContents"],
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
