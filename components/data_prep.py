"""DataPrep: an in-cluster Job on CPU nodes that stages the verl source, the model weights and the
GSM8K parquet files into the training bucket (GCS FUSE PVC at MOUNT), or copies in and checks the
stack's gs:// task files and smoke-tests its reward (step "task", with components/scripts/task_check.py and,
for a reward, reward_check.py, reward_jail.py and reward_run.py shipped next to the script).

The Job runs components/scripts/stage_data.py, shipped in a ConfigMap (the file is the single
source). Every folder it writes carries COMPLETE_MARKER, so a rerun skips what is staged and
resumes what is not. The Job is auto-named: a changed spec (model, verl version, image, script)
replaces it create-before-delete, i.e. runs it again, cheaply. Pulumi waits for the Job to
complete (the provider's Job await logic) and fails the update with the pod's status when it
fails; `pulumi.com/replaceUnready` makes the next `pulumi up` rerun a failed Job. The Hugging
Face token reaches the pod only through a secretKeyRef.
"""

from __future__ import annotations

import json
import posixpath
from dataclasses import dataclass, field
from pathlib import Path

import pulumi
import pulumi_kubernetes as k8s

from catalog import naming
from catalog.gcsfuse import EPHEMERAL_STORAGE_LIMIT as FUSE_STORAGE_LIMIT
from catalog.gcsfuse import SIDECAR_ANNOTATION as FUSE_VOLUMES
from catalog.gcsfuse import STAGING_SCRATCH_GIB, DiskBudget, gib_quantity, staging_disk_budget
from catalog.paths import COMPLETE_MARKER, MOUNT, STAGING_LEASE, TASKS_DIR, BucketPaths
from catalog.problems import Problem
from catalog.versions import VERL_IMAGE, VERL_REPO
from components.problems import require

SCRIPT_FILE = Path(__file__).resolve().parent / "scripts" / "stage_data.py"
SCRIPT_KEY = "stage_data.py"
# The parquet checks the "task" step runs on gs:// task files (the plan's own, components/scripts/task_check.py),
# shipped next to the script when the stack has such files, and the reward's smoke test in its jail, when it
# has a reward file.
CHECK_FILE = SCRIPT_FILE.parent / "task_check.py"
CHECK_KEY = "task_check.py"
REWARD_FILES = tuple(SCRIPT_FILE.parent / n for n in ("reward_check.py", "reward_jail.py", "reward_run.py"))
SHIPPED_KEYS = (SCRIPT_KEY, CHECK_KEY, *(f.name for f in REWARD_FILES))
SCRIPTS_DIR = "/scripts"  # the ConfigMap, read-only
SCRATCH_DIR = "/scratch"  # emptyDir: temp clone, preprocessing, HF datasets cache
HF_HOME = posixpath.join(SCRATCH_DIR, "huggingface")
CONTAINER = "stage"
TERMINATION_LOG = "/dev/termination-log"  # Kubernetes' default terminationMessagePath
# The script's exit codes that no retry can fix: 2 bad arguments, 3 model gated/private/missing,
# 4 another staging run holds the bucket's lease (it waited --lease-wait already), 5 a gs:// task file is
# missing, still unreadable after the grant had time to propagate, or fails the checks.
PERMANENT_EXIT_CODES = (2, 3, 4, 5)
# Sequential weight downloads (see stage_data.SEQUENTIAL_ENV; set here too so nothing in the image
# that reads them first, such as verl's base image turning hf_transfer on, wins).
SEQUENTIAL_ENV = {"HF_HUB_DISABLE_XET": "1", "HF_HUB_ENABLE_HF_TRANSFER": "0"}
# The provider rule that reruns a failed Job on the next update instead of awaiting it again.
REPLACE_UNREADY = "pulumi.com/replaceUnready"
LABELS = {
    "app.kubernetes.io/name": "data-prep",
    "app.kubernetes.io/part-of": "verl-gke",
    "app.kubernetes.io/managed-by": "pulumi",
}

@dataclass
class DataPrepArgs:
    namespace: pulumi.Input[str]
    service_account: pulumi.Input[str]  # KSA bound to the bucket (Workload Identity)
    pvc_name: pulumi.Input[str]  # the GCS FUSE PVC of the bucket, mounted at MOUNT
    paths: BucketPaths  # catalog.paths.bucket_paths(...) for this stack
    model_id: str
    verl_version: str  # git ref staged into paths.verl_src
    # GCS FUSE sidecar annotations from the storage component; must carry gke-gcsfuse/volumes.
    pod_annotations: dict[str, str]
    image: str = VERL_IMAGE
    verl_repo: str = VERL_REPO
    model_revision: str = "main"
    hf_secret_name: pulumi.Input[str] | None = None  # None: no HF_TOKEN in the pod at all
    hf_secret_key: str = "hf_api_token"
    # CPU pool on Standard ({} on Autopilot); values may be Outputs such as the pool's name.
    node_selector: dict[str, pulumi.Input[str]] = field(default_factory=dict)
    cpu_request: str = "2"
    memory_request: str = "4Gi"  # the dataset step imports verl, hence torch
    memory_limit: str = "8Gi"
    # catalog.gcsfuse.staging_disk_budget(largest file): the stage container's ephemeral limit
    # (scratch included), the download parallelism and the GCS FUSE sidecar's ephemeral limit,
    # which replaces whatever the caller's annotations say ("0" would leave it unbounded).
    disk_budget: DiskBudget = field(default_factory=lambda: staging_disk_budget(5.0))
    bucket_name: pulumi.Input[str] | None = None  # the lease object's bucket; None: no lease
    active_deadline_seconds: int = 3 * 3600  # ~65 GB of weights for a 32B model, pod start included
    backoff_limit: int = 3  # reruns resume; preemptions and evictions do not count
    # Pulumi waits this much longer than the deadline, so Kubernetes' verdict is what it reports.
    await_margin_seconds: int = 15 * 60
    # Small files to copy into the bucket too: in-pod path under MOUNT -> text (e.g. the run supervisor).
    extra_files: dict[str, str] = field(default_factory=dict)
    # False when the stack trains on its own files (components.task_files uploads them): GSM8K is not staged.
    stage_gsm8k: bool = True
    # stacks.dataset.staging_check(...): gs:// task files to copy in and check and the reward to smoke-test
    # (step "task"); None: none.
    task_check: dict | None = None

    def problems(self) -> list[Problem]:
        return _problems(self)


class DataPrep(pulumi.ComponentResource):
    config_map: k8s.core.v1.ConfigMap
    job: k8s.batch.v1.Job  # depend on this: it is created only once the Job has completed
    job_name: pulumi.Output[str]
    staged: pulumi.Output[bool]  # resolves (True) when the Job has completed
    paths: BucketPaths
    # The paths it wrote, as Outputs that carry the dependency on the completed Job.
    verl_src: pulumi.Output[str]
    model_dir: pulumi.Output[str]
    dataset_dir: pulumi.Output[str]
    train_file: pulumi.Output[str]
    val_file: pulumi.Output[str]

    def __init__(self, name: str, args: DataPrepArgs, opts: pulumi.ResourceOptions | None = None):
        require("DataPrep", {"name": name}, name_problems(name), owner="DataPrep")
        require("DataPrep", args)
        annotations = _annotations(args)
        script = SCRIPT_FILE.read_text()
        super().__init__("verl-gke:data_prep:DataPrep", name, None, opts)
        self.paths = args.paths
        child = pulumi.ResourceOptions(parent=self)

        # Auto-named and immutable: a changed script gets a new ConfigMap, hence a new Job.
        self.config_map = k8s.core.v1.ConfigMap(
            f"{name}-script",
            metadata={"namespace": args.namespace, "labels": LABELS},
            data={SCRIPT_KEY: script, **{f.name: f.read_text() for f in _checks(args.task_check)},
                  **{_extra_key(dest): text for dest, text in args.extra_files.items()}},
            immutable=True,
            opts=child,
        )
        env = [
            *({"name": k, "value": v} for k, v in SEQUENTIAL_ENV.items()),
            {"name": "HF_HOME", "value": HF_HOME},  # GSM8K download cache: local scratch, not the bucket
            {"name": "HF_HUB_DISABLE_PROGRESS_BARS", "value": "1"},  # no megabytes of \r in the logs
            {"name": "PYTHONUNBUFFERED", "value": "1"},
        ]
        if args.hf_secret_name is not None:
            # optional: a missing Secret/key fails a gated model fast (exit 3, actionable message)
            # instead of leaving the pod in CreateContainerConfigError until the deadline.
            env.append({"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {
                "name": args.hf_secret_name, "key": args.hf_secret_key, "optional": True}}})
        flags: list[pulumi.Input[str]] = list(command_flags(args))
        if args.bucket_name is not None:
            flags += ["--lease-gcs", pulumi.Output.concat("gs://", args.bucket_name, "/", STAGING_LEASE)]
        container = {
            "name": CONTAINER,
            "image": args.image,
            "command": ["python3", posixpath.join(SCRIPTS_DIR, SCRIPT_KEY)],
            "args": flags,
            "env": env,
            # The script writes why it failed here; without it, the log's tail: either way the
            # reason reaches the Job's pod status, which Pulumi prints when the Job fails.
            "terminationMessagePolicy": "FallbackToLogsOnError",
            "resources": resources(args),
            "volumeMounts": [
                {"name": "bucket", "mountPath": MOUNT},
                {"name": "script", "mountPath": SCRIPTS_DIR, "readOnly": True},
                {"name": "scratch", "mountPath": SCRATCH_DIR},
            ],
        }
        pod_spec = {
            "restartPolicy": "Never",
            "serviceAccountName": args.service_account,
            "containers": [container],
            "volumes": [
                {"name": "bucket", "persistentVolumeClaim": {"claimName": args.pvc_name}},
                {"name": "script", "configMap": {
                    "name": self.config_map.metadata.name, "defaultMode": 0o444}},
                {"name": "scratch", "emptyDir": {"sizeLimit": gib_quantity(STAGING_SCRATCH_GIB)}},
            ],
        }
        if args.node_selector:
            pod_spec["nodeSelector"] = dict(args.node_selector)
        timeout = f"{args.active_deadline_seconds + args.await_margin_seconds}s"
        # No metadata.name: auto-naming makes a spec change a create-before-delete replacement.
        # No ttlSecondsAfterFinished: Pulumi must keep seeing the Job. No skipAwait.
        self.job = k8s.batch.v1.Job(
            f"{name}-job",
            metadata={"namespace": args.namespace, "labels": LABELS,
                      "annotations": {REPLACE_UNREADY: "true"}},
            spec={
                "backoffLimit": args.backoff_limit,
                "activeDeadlineSeconds": args.active_deadline_seconds,
                "podFailurePolicy": {"rules": [
                    {"action": "FailJob", "onExitCodes": {
                        "containerName": CONTAINER, "operator": "In", "values": list(PERMANENT_EXIT_CODES)}},
                    # Spot preemption, node drain, eviction: retry without spending backoffLimit.
                    {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]},
                ]},
                "template": {
                    "metadata": {"labels": LABELS, "annotations": annotations},
                    "spec": pod_spec,
                },
            },
            opts=pulumi.ResourceOptions.merge(child, pulumi.ResourceOptions(
                custom_timeouts=pulumi.CustomTimeouts(create=timeout, update=timeout),
                # A component's depends_on does not reach its children: hand it on to the Job, whose pod
                # downloads at once (the network's NAT, the image mirror and its read grant).
                depends_on=opts.depends_on if opts else None)),
        )

        def after_job(value):
            return self.job.id.apply(lambda _: value)

        self.job_name = self.job.metadata.name
        self.staged = after_job(True)
        self.verl_src = after_job(args.paths.verl_src)
        self.model_dir = after_job(args.paths.model_dir)
        self.dataset_dir = after_job(args.paths.dataset_dir)
        self.train_file = after_job(args.paths.train_file)
        self.val_file = after_job(args.paths.val_file)
        self.register_outputs({
            "job_name": self.job_name, "staged": self.staged, "verl_src": self.verl_src,
            "model_dir": self.model_dir, "dataset_dir": self.dataset_dir,
            "train_file": self.train_file, "val_file": self.val_file,
        })


def command_flags(args: DataPrepArgs) -> list[str]:
    """stage_data.py's flags, from the shared path table and the pinned versions."""
    return [
        "--verl-repo", args.verl_repo,
        "--verl-ref", args.verl_version,
        "--verl-dir", args.paths.verl_src,
        "--model-id", args.model_id,
        "--model-revision", args.model_revision,
        "--model-dir", args.paths.model_dir,
        "--dataset-dir", args.paths.dataset_dir,
        "--marker-name", COMPLETE_MARKER,
        "--work-dir", SCRATCH_DIR,
        "--max-workers", str(args.disk_budget.parallel_files),
        "--termination-log", TERMINATION_LOG,
        *[flag for dest in args.extra_files
          for flag in ("--ship", f"{posixpath.join(SCRIPTS_DIR, _extra_key(dest))}={dest}")],
        *([] if args.stage_gsm8k and not args.task_check else ["--steps", ",".join(
            ["verl", "model", *(["dataset"] if args.stage_gsm8k else []), *(["task"] if args.task_check else [])])]),
        *(["--task", json.dumps(args.task_check, sort_keys=True)] if args.task_check else []),
    ]


def _checks(task_check: dict | None) -> list[Path]:
    """The scripts step "task" imports, shipped next to stage_data.py."""
    if not task_check:
        return []
    return [CHECK_FILE, *(REWARD_FILES if task_check.get("reward") else ())]


def _extra_key(dest: str) -> str:
    """The ConfigMap key of an extra file: its file name."""
    return posixpath.basename(dest)


def resources(args: DataPrepArgs) -> dict[str, dict[str, str]]:
    """The stage container's requests and limits (the gate sizes the pod by them: stacks.node_fit)."""
    container_gib = gib_quantity(args.disk_budget.container_gib)
    return {"requests": {"cpu": args.cpu_request, "memory": args.memory_request, "ephemeral-storage": container_gib},
            "limits": {"memory": args.memory_limit, "ephemeral-storage": container_gib}}


def sized_template(args: DataPrepArgs) -> dict:
    """The part of the staging pod's template that sizes it: the container's resources, the sidecar's
    annotations."""
    return {"metadata": {"annotations": _annotations(args)}, "spec": {"containers": [{"resources": resources(args)}]}}


def _annotations(args: DataPrepArgs) -> dict[str, str]:
    """The pod annotations: the caller's, with the budget's buffer as the sidecar's limit (and, by the
    webhook rule, its request)."""
    return {**args.pod_annotations, FUSE_STORAGE_LIMIT: gib_quantity(args.disk_budget.buffer_gib)}


def name_problems(name: str) -> list[Problem]:
    # Auto-name "<name>-job-xxxxxxx" must stay a valid label value (<= 63) for the job-name label.
    return [Problem("name", "must be a DNS label of at most 40 characters")] \
        if naming.dns_label_problem(name, max_len=40) else []


def _problems(args: DataPrepArgs) -> list[Problem]:
    found: list[Problem] = []
    checks = {
        "namespace": naming.dns_label_problem, "service_account": naming.dns_subdomain_problem,
        "pvc_name": naming.dns_subdomain_problem, "hf_secret_name": naming.dns_subdomain_problem,
    }
    for arg, check in checks.items():
        value = getattr(args, arg)
        if isinstance(value, str) and (problem := check(value)):
            found.append(Problem(arg, problem))
    for arg, check in (("hf_secret_key", naming.secret_key_problem), ("image", naming.image_ref_problem),
                       ("model_id", naming.model_id_problem), ("model_revision", naming.git_ref_problem),
                       ("verl_version", naming.git_ref_problem), ("verl_repo", naming.repo_url_problem)):
        if problem := check(getattr(args, arg)):
            found.append(Problem(arg, problem))
    found += _path_problems(args)
    keys = [_extra_key(dest) for dest in args.extra_files]
    for dest in args.extra_files:
        if (posixpath.normpath(dest) != dest or not dest.startswith(MOUNT + "/")
                or naming.secret_key_problem(_extra_key(dest)) or _extra_key(dest) in SHIPPED_KEYS
                or keys.count(_extra_key(dest)) > 1):
            found.append(Problem("extra_files", f"{dest!r} must be a normalised path under {MOUNT}/ whose file name "
                                 f"is a unique ConfigMap key other than {', '.join(SHIPPED_KEYS)}"))
    if args.task_check is not None:
        tasks = posixpath.join(MOUNT, TASKS_DIR) + "/"
        spec = args.task_check if isinstance(args.task_check, dict) else {}
        files, reward = spec.get("files"), spec.get("reward")
        if not isinstance(files, list) or not (files or reward) or not all(
                str(f.get("source", "")).startswith("gs://") and str(f.get("path", "")).startswith(tasks)
                for f in files) or (reward is not None and not (
                    isinstance(reward, dict) and str(reward.get("path", "")).startswith(tasks)
                    and all(str(f.get("path", "")).startswith(tasks) for f in reward.get("data", [])))):
            found.append(Problem("task_check", f"must be stacks.dataset.staging_check(...): gs:// files copied "
                                 f"under {tasks} and a reward (with its data) read from there"))

    if not isinstance(args.stage_gsm8k, bool):
        found.append(Problem("stage_gsm8k", "must be true or false"))
    if not isinstance(args.disk_budget, DiskBudget):
        found.append(Problem("disk_budget", "must be catalog.gcsfuse.staging_disk_budget(...)"))
    quantities_ok = True
    for arg in ("cpu_request", "memory_request", "memory_limit"):
        if problem := naming.positive_quantity_problem(getattr(args, arg)):
            found.append(Problem(arg, problem))
            quantities_ok = False
    if quantities_ok and naming.quantity(args.memory_request) > naming.quantity(args.memory_limit):
        found.append(Problem("memory_request", f"must not exceed memory_limit = {args.memory_limit!r}"))
    for arg, minimum in (("active_deadline_seconds", 60), ("backoff_limit", 0), ("await_margin_seconds", 60)):
        value = getattr(args, arg)
        if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
            found.append(Problem(arg, f"must be an integer >= {minimum}"))

    for arg, value_types in (("pod_annotations", (str,)), ("node_selector", (str, pulumi.Output))):
        value = getattr(args, arg)
        if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, value_types)
                                                  for k, v in value.items()):
            found.append(Problem(arg, "must be a dict of strings to strings"))
    if isinstance(args.pod_annotations, dict) and args.pod_annotations.get(FUSE_VOLUMES) != "true":
        found.append(Problem("pod_annotations",
                             f'must carry {FUSE_VOLUMES}: "true" (the bucket PVC is a GCS FUSE volume)'))
    return found


def _path_problems(args: DataPrepArgs) -> list[Problem]:
    paths = args.paths
    if not isinstance(paths, BucketPaths):
        return [Problem("paths", "must be a catalog.paths.BucketPaths (bucket_paths(...))")]
    found: list[Problem] = []
    folders = {"verl_src": paths.verl_src, "model_dir": paths.model_dir, "dataset_dir": paths.dataset_dir}
    for field_name, value in {**folders, "train_file": paths.train_file, "val_file": paths.val_file}.items():
        if (not isinstance(value, str) or posixpath.normpath(value) != value
                or not value.startswith(MOUNT + "/") or any(c.isspace() for c in value)):
            found.append(Problem(f"paths.{field_name}", f"must be a normalised absolute path under {MOUNT}/"))
    if found:
        return found
    # The script wipes verl_src and dataset_dir before restaging: no folder may hold another.
    for a, pa in folders.items():
        for b, pb in folders.items():
            if a != b and (pa == pb or pb.startswith(pa + "/")):
                found.append(Problem(f"paths.{b}", f"must not be inside or equal to paths.{a} = {pa!r}"))
    for field_name, file_name in (("train_file", "train.parquet"), ("val_file", "test.parquet")):
        expected = posixpath.join(paths.dataset_dir, file_name)
        if getattr(paths, field_name) != expected:
            found.append(Problem(f"paths.{field_name}",
                          f"must be {expected!r}: the script writes {file_name} into paths.dataset_dir"))
    if not paths.model_dir.endswith(f"/{args.model_id}/{args.model_revision}"):
        found.append(Problem("paths.model_dir", f"must be the folder of model_id = {args.model_id!r} "
                      f"at model_revision = {args.model_revision!r}"))
    if not paths.verl_src.endswith("/" + args.verl_version):
        found.append(Problem("paths.verl_src", f"must be the folder of verl_version = {args.verl_version!r}"))
    return found
