"""Every config key of the project: its type, default and description, in one table.

Pulumi.yaml's `config:` block is generated from it (`python -m tools.schema --write`) and a test
keeps the two equal. The validation (stacks.config) and the recipe (recipe.grpo) both name keys
through it, so an error message always names the key the user sets.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from catalog import versions
from catalog.naming import PROJECT


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


RDMA_DEFAULT = [f"192.168.{n + 1}.0/24" for n in range(8)]

KEYS: tuple[Key, ...] = (
    Key("gcp:project", "string", None, "Google Cloud project id (required)."),
    Key("gcp:region", "string", None, "Region for the cluster, subnets and bucket (required)."),
    Key("gcp:zone", "string", None, "Zone in gcp:region that has the GPUs (required)."),
    Key("zoneOffersAccelerator", "string", "",
        "Set to gcp:zone when that zone offers the accelerator but is newer than catalog/zones.py's table."),
    Key("accelerator", "string", "b200",
        "GPU profile: b200 (A4, a4-highgpu-8g), h200 (A3 Ultra) or l4 (G2, g2-standard-24: 2 x L4, no RDMA)."),
    Key("clusterMode", "string", "standard", "GKE mode: autopilot or standard."),
    Key("gpuNodes", "integer", 2, "Number of GPU nodes (Ray GPU workers; 8 GPUs each on b200/h200, 2 on l4)."),
    Key("capacity", "string", "spot",
        "GPU capacity: spot, on-demand, reservation or flex-start, as the accelerator offers it."),
    Key("reservation", "string", "", "Compute Engine reservation name (only with capacity=reservation)."),
    Key("namePrefix", "string", "verl", "Prefix of every GCP resource name (lowercase, <= 20 chars)."),
    Key("namespace", "string", "verl", "Kubernetes namespace for the Ray cluster and jobs."),
    Key("primaryCidr", "string", "10.10.0.0/20", "Primary (node) subnet of the cluster VPC."),
    Key("podsCidr", "string", "10.20.0.0/14", "Secondary range for pods."),
    Key("servicesCidr", "string", "10.30.0.0/20", "Secondary range for services."),
    Key("gvnicCidr", "string", "192.168.0.0/24",
        "Subnet of the additional gVNIC network (accelerators with RDMA NICs only)."),
    Key("rdmaCidrs", "array", RDMA_DEFAULT,
        "One subnet per GPU NIC on the RoCE network, in NIC order (accelerators with RDMA NICs only)."),
    Key("mtu", "integer", 8896, "MTU of the gVNIC and RDMA networks."),
    Key("gkeVersion", "string", "",
        "GKE version to create the cluster at: empty = the release channel's newest, a minor such as 1.33 = "
        "its newest 1.33 patch, or a full version; resolved at deploy time and checked against the floors."),
    Key("releaseChannel", "string", "REGULAR", "GKE release channel: RAPID, REGULAR or STABLE."),
    Key("zonalCluster", "boolean", False,
        "Standard only: a zonal cluster in gcp:zone instead of a regional one (the GKE free tier covers one "
        "zonal cluster per billing account; the control plane is then in one zone)."),
    Key("masterAuthorizedNetworks", "array", [],
        "IPv4 CIDRs allowed to reach the control plane's IP endpoint; empty = the IP endpoint is off. pulumi "
        "and kubectl use the DNS-based endpoint, authorized by IAM, from any address."),
    Key("migrations", "array", [],
        "Changes a stack created before them applies to its live resources: private-cluster, private-nodes, "
        "no-compact-placement, primary-mtu (README 'Upgrading a live stack'); new stacks get them all."),
    Key("cpuMachineType", "string", "c2-standard-16", "Machine type of the CPU pool (Standard)."),
    Key("cpuNodesMin", "integer", 1, "CPU pool autoscaling minimum (Standard)."),
    Key("cpuNodesMax", "integer", 5, "CPU pool autoscaling maximum (Standard)."),
    Key("rayHeadCpu", "integer", 12,
        "CPUs the Ray head requests (it runs no tasks); cpuMachineType must have more vCPUs."),
    Key("rayHeadMemoryGib", "integer", 32, "Memory (GiB) the Ray head requests."),
    Key("deletionProtection", "boolean", False, "GKE deletion protection (true blocks pulumi destroy)."),
    Key("bucketLocation", "string", "", "Bucket location; empty = gcp:region."),
    Key("bucketName", "string", "",
        "An existing bucket to adopt (imported), e.g. the one a destroyed stack kept: `pulumi destroy` prints "
        "its name. Empty: the stack's own bucket, <namePrefix>-data-<random> (the suffix is kept in state)."),
    Key("bucketDeleteOnDestroy", "boolean", False,
        "Delete the bucket and ALL its contents (weights, checkpoints) on pulumi destroy."),
    Key("billingAccount", "string", "",
        "Cloud Billing account id (012345-567890-ABCDEF) for the optional budget alert; set with budgetMonthly."),
    Key("budgetMonthly", "integer", 0,
        "Monthly budget for this project in the billing account's currency; alerts at 50/90/100% "
        "(needs billingAccount)."),
    Key("bucketSoftDeleteDays", "integer", 0,
        "Days Cloud Storage keeps (and bills) deleted objects such as rotated checkpoints: 0 = off, or 7..90."),
    Key("model", "string", "Qwen/Qwen2.5-32B-Instruct", "Hugging Face model id to train."),
    Key("hfToken", "string", None, "Hugging Face token (set with --secret; needed for gated models).",
        secret=True),
    Key("wandbApiKey", "string", None,
        "Weights & Biases API key (set with --secret; needed when grpoLogger has wandb).", secret=True),
    Key("verlVersion", "string", versions.VERL_VERSION, "verl git tag staged into the bucket."),
    Key("image", "string", versions.VERL_IMAGE, "Container image for Ray pods and data staging."),
    Key("imageMirror", "boolean", True,
        "Pull Docker Hub images through an Artifact Registry remote repository in the region "
        "(cached; eligible for GKE image streaming)."),
    Key("rayVersion", "string", versions.RAY_VERSION, "Ray version inside the image (KubeRay rayVersion)."),
    Key("submitJob", "boolean", True, "Submit the GRPO job once the Ray cluster can run it."),
    Key("jobReadyTimeoutMinutes", "integer", 90, "How long to wait for the Ray head and all GPUs."),
    Key("jobWaitForCompletion", "boolean", False, "Keep pulumi up running until the job ends."),
    Key("jobCompletionTimeoutMinutes", "integer", 1440, "Bound on waiting for completion."),
    Key("jobResubmitOnFailure", "boolean", True,
        "On refresh, resubmit a FAILED/STOPPED job (resumes from the last checkpoint)."),
    Key("jobMaxRecoveries", "integer", 3,
        "Recoveries one run may use: in-run restarts after lost GPU nodes plus resubmissions (-r<k>)."),
    Key("jobReleaseGpus", "boolean", True,
        "Scale the GPU workers to 0 when the run ends (the next submission scales them back)."),
    Key("jobMergeModel", "boolean", True,
        "Merge the final checkpoint into a Hugging Face folder in the bucket (output mergedModel)."),
    # Bring your own task (stacks.dataset): empty dataTrainFile = GSM8K, staged by verl's own script.
    Key("dataTrainFile", "string", "",
        "Training parquet in verl's RL format (data_source, prompt, ability, reward_model.ground_truth, "
        "extra_info): a local path, uploaded to the bucket by pulumi up, or gs://<bucket>/<object>, copied into "
        "the bucket and checked by the staging Job; empty = GSM8K."),
    Key("dataValFile", "string", "",
        "Validation parquet in the same format (required with dataTrainFile): a local path or gs://<bucket>/<object>."),
    Key("dataTrainRows", "integer", 0,
        "Rows of a gs:// dataTrainFile, which the plan cannot read (sizes the run; the staging Job checks it)."),
    Key("rewardFile", "string", "",
        "Python file with the reward function (a local path, uploaded next to the data); empty = verl's "
        "built-in scorer for the rows' data_source."),
    Key("rewardFunction", "string", "compute_score",
        "Name of the reward function in rewardFile: fn(data_source, solution_str, ground_truth, extra_info) "
        "returning a number or a dict with \"score\"."),
    Key("rewardPackages", "array", [],
        "Modules rewardFile imports that only the container image has (the offline smoke test skips them)."),
    Key("grpoTrainBatchSize", "integer", 256, "data.train_batch_size (prompts per step)."),
    Key("grpoRolloutN", "integer", 8, "actor_rollout_ref.rollout.n (responses per prompt)."),
    Key("grpoMaxPromptLength", "integer", 512, "data.max_prompt_length (tokens)."),
    Key("grpoMaxResponseLength", "integer", 1024,
        "data.max_response_length (tokens); verl v0.6.1 examples/grpo_trainer use 1024 for GSM8K."),
    Key("grpoLearningRate", "string", "1e-6", "actor_rollout_ref.actor.optim.lr."),
    Key("grpoPpoMiniBatchSize", "integer", 0,
        "actor_rollout_ref.actor.ppo_mini_batch_size; 0 = a quarter of the train batch (4 updates per step)."),
    Key("grpoPpoMicroBatchSizePerGpu", "integer", 16, "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu."),
    Key("grpoLogProbMicroBatchSizePerGpu", "integer", 8,
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu."),
    Key("grpoRefLogProbMicroBatchSizePerGpu", "integer", 4,
        "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu."),
    Key("grpoTensorParallelSize", "integer", 0,
        "actor_rollout_ref.rollout.tensor_model_parallel_size; 0 = the smallest that fits (heads, GPU memory)."),
    Key("grpoGpuMemoryUtilization", "string", "0.6", "actor_rollout_ref.rollout.gpu_memory_utilization."),
    Key("grpoRolloutEngine", "string", "vllm", "actor_rollout_ref.rollout.name: vllm or sglang."),
    Key("grpoActorStrategy", "string", "fsdp2", "actor_rollout_ref.actor.strategy: fsdp or fsdp2."),
    Key("grpoKlLossCoef", "string", "0.001", "actor_rollout_ref.actor.kl_loss_coef (KL as a loss term)."),
    Key("grpoKlLossType", "string", "low_var_kl", "actor_rollout_ref.actor.kl_loss_type."),
    Key("grpoEntropyCoeff", "string", "0", "actor_rollout_ref.actor.entropy_coeff."),
    Key("grpoTotalEpochs", "integer", 2, "trainer.total_epochs."),
    Key("grpoTotalTrainingSteps", "integer", 0,
        "trainer.total_training_steps: stop after this many steps (0 = run every epoch)."),
    Key("grpoSaveFreq", "integer", 30, "trainer.save_freq (steps between checkpoints; the plan shows the "
        "save time, kept under 10 % of the run)."),
    Key("grpoTestFreq", "integer", 10, "trainer.test_freq (steps between validations)."),
    Key("grpoValBeforeTrain", "boolean", True, "trainer.val_before_train (a baseline score at step 0)."),
    # tensorboard: verl 0.6.1 requires it (its package metadata), so the image has it; see TENSORBOARD_DIR.
    Key("grpoLogger", "array", ["console", "tensorboard"],
        "trainer.logger backends, e.g. [console, tensorboard, wandb] (wandb needs wandbApiKey)."),
    Key("grpoExtraOverrides", "array", [], "Extra verl Hydra overrides (key=value), appended last."),
    Key("grpoUseRemovePadding", "boolean", True, "actor_rollout_ref.model.use_remove_padding (sequence packing)."),
    Key("grpoUseDynamicBsz", "boolean", True,
        "actor.use_dynamic_bsz and the log-prob passes' *_use_dynamic_bsz (micro-batches by tokens)."),
    Key("grpoPpoMaxTokenLenPerGpu", "integer", 0,
        "actor.ppo_max_token_len_per_gpu; 0 = the largest multiple of prompt+response <= 32768 that fits."),
    Key("grpoLogProbMaxTokenLenPerGpu", "integer", 0,
        "rollout/ref log_prob_max_token_len_per_gpu; 0 = up to 2x the update budget, as memory allows."),
    # Kept so existing stack files still load: verl 0.6.1 always CPU-offloads the reference and never
    # reads ref.fsdp_config.param_offload (fsdp_workers.py), so any value is ignored with a warning.
    Key("grpoRefParamOffload", "string", "auto",
        "Ignored (warns when set): verl 0.6.1 always keeps the reference model on the host."),
    Key("grpoFsdpSize", "integer", 0,
        "actor.fsdp_config.fsdp_size: -1 = shard over all GPUs, n = HSDP groups of n; 0 = the faster that fits."),
    Key("grpoMaxCheckpointsToKeep", "integer", 2, "trainer.max_actor_ckpt_to_keep (older checkpoints deleted)."),
)
KEYS_BY_NAME = {k.name: k for k in KEYS}


def full(name: str) -> str:
    """The key as `pulumi config` and the stack files spell it, e.g. verl-gke:gpuNodes."""
    return KEYS_BY_NAME[name].full


# The recipe names its inputs by field (recipe.problems); the user sets keys. A GrpoSettings field is the
# key "grpo" + CamelCase(field); the recipe's other inputs:
RECIPE_INPUTS = {"nnodes": "gpuNodes", "train_file": "dataTrainFile", "reward_file": "rewardFile",
                 "reward_function": "rewardFunction"}


def field_key(field: str) -> str:
    """The full config key that sets a recipe field, e.g. rollout_n -> verl-gke:grpoRolloutN."""
    return full(RECIPE_INPUTS.get(field) or "grpo" + "".join(part.capitalize() for part in field.split("_")))
