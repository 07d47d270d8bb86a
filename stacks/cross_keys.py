"""The rules over more than one key, in one place: each reads keys that passed their own rows (stacks.keys,
read by stacks.key_values) and records its problems on the KeyValues, naming the key to change.

A rule of one key's value sits with the key (stacks.keys); a component's rule with the component
(XArgs.problems(), stacks.component_rules); the recipe's with the recipe (recipe.grpo, recipe.tuning);
stacks.config.load(), the gate, calls them all.
"""

from __future__ import annotations

import ipaddress

from catalog import gke, naming, zones
from catalog.accelerators import Accelerator
from catalog.gke import Floor
from catalog.models import is_gated
from catalog.problems import Problem
from catalog.storage_locations import bucket_location_problem
from stacks import dataset
from stacks.key_values import KeyValues
from stacks.keys import BATCH_KEYS, KEYS, KEYS_BY_NAME, MICRO_KEYS, full

PLACEHOLDER_PROJECT = "replace-with-your-project-id"  # what the stack files ship with
SECRET_IN_TEXT_MIN = 8  # a secret this long is looked for inside other text (a shorter one would match by chance)


def placement(r: KeyValues, acc: Accelerator, allow_placeholder_project: bool) -> None:
    """The project is one (the offline plan takes the stack files' placeholder), the zone is in the region and
    offers the accelerator."""
    project, region, zone = r.v["gcp:project"], r.v["gcp:region"], r.v["gcp:zone"]
    if project == PLACEHOLDER_PROJECT and not allow_placeholder_project:
        r.bad("gcp:project", project, "is the placeholder; run `pulumi config set gcp:project <your-project>`")
    if "gcp:zone" not in r.missing:
        # The zone's shape, said as the region's zone it must be where the region is one.
        shape = naming.zone_in_region_problem(zone, region) if r.passed("gcp:region") else naming.zone_problem(zone)
        if shape:
            r.bad("gcp:zone", zone, shape)
    vouched = r.v["zoneOffersAccelerator"]
    if vouched and vouched != zone:
        r.bad("zoneOffersAccelerator", vouched, f"must be empty or gcp:zone ({zone}): it vouches for that one zone")
    if r.passed("accelerator") and "gcp:zone" not in r.missing and not naming.zone_problem(zone) and (
            problem := zones.offered_problem(acc.machine_type, zone, vouched)):
        r.bad("gcp:zone", zone, problem)


def network(r: KeyValues, acc: Accelerator) -> None:
    """Ranges an accelerator without RDMA NICs would leave unused, one RDMA subnet per NIC, an address per GPU
    node on every additional NIC, and no two ranges overlapping."""
    nets: dict[str, ipaddress.IPv4Network | ipaddress.IPv6Network] = {}
    for key in ("primaryCidr", "podsCidr", "servicesCidr"):
        if r.passed(key):
            nets[key] = ipaddress.ip_network(r.v[key])
    if not acc.rdma:
        # No gVNIC or RoCE network is built: a range set for one would be silently unused.
        for key in ("gvnicCidr", "rdmaCidrs"):
            if r.is_set(key):
                r.bad(key, r.raw[full(key)], f"accelerator {acc.key} has no RDMA NICs, so no additional network is "
                      "built: unset it")
    else:
        rdma = r.v["rdmaCidrs"]
        additional = [("gvnicCidr", "gvnicCidr", r.v["gvnicCidr"])] if r.passed("gvnicCidr") else []
        additional += [("rdmaCidrs", f"rdmaCidrs[{i}]", v) for i, v in enumerate(rdma)] if r.passed("rdmaCidrs") else []
        if len(rdma) != acc.rdma_nics:
            r.bad("rdmaCidrs", list(rdma), f"must list {acc.rdma_nics} subnets, one per RDMA NIC of {acc.key}")
        gpu_nodes = r.v["gpuNodes"]
        for key, label, value in additional:
            net = ipaddress.ip_network(value)
            # GCP keeps 4 addresses per subnet; each GPU node needs its own address on every NIC.
            if net.num_addresses - 4 < gpu_nodes:
                r.bad(key, value, f"has {net.num_addresses - 4} usable addresses for {gpu_nodes} GPU nodes")
            else:
                nets[label] = net
    labels = list(nets)
    for i, a in enumerate(labels):
        for b in labels[i + 1:]:
            if nets[a].overlaps(nets[b]):
                r.bad(a.split("[")[0], str(nets[a]), f"overlaps {b} = {nets[b]}: every range must be disjoint")


def cluster(r: KeyValues, acc: Accelerator, floors: tuple[Floor, ...]) -> None:
    """A pinned GKE version meets the floors, the mode suits the accelerator (whether the CPU pool holds the Ray
    head: stacks.node_fit, on the rendered pods)."""
    pin = r.v["gkeVersion"]
    if pin and r.passed("gkeVersion"):
        # A full pin meets every floor or fails here; a minor pin fails here when its whole minor is
        # below a floor, and otherwise at deploy time if the channel's newest patch of it is (preflight).
        short = gke.unmet(pin, floors) if gke.version_key(pin) else gke.unmet_by_minor(pin, floors)
        if short:
            r.bad("gkeVersion", pin, f"is below {short[0].version}, the floor for {short[0].needed_for} "
                  f"({short[0].source}); unset it to take the release channel's newest version")
    mode = r.v["clusterMode"]
    if mode == "autopilot" and not acc.autopilot:
        r.bad("clusterMode", mode, f"accelerator {acc.key} has no Autopilot worker size in the catalog: use standard")
    if r.v["zonalCluster"] and mode == "autopilot":
        r.bad("zonalCluster", True, "Autopilot clusters are regional: set it false or use clusterMode standard")
    lo, hi = r.v["cpuNodesMin"], r.v["cpuNodesMax"]
    if hi < lo:
        r.bad("cpuNodesMax", hi, f"must be >= cpuNodesMin ({lo})")


def credentials(r: KeyValues) -> None:
    """The secrets the run needs: a gated model's token, the W&B key when grpoLogger has wandb."""
    model = r.v["model"]
    if is_gated(model) and not r.raw.get(full("hfToken")):
        r.bad("hfToken", "<unset>", f"model {model} is gated on the hub: run "
              "`pulumi config set --secret hfToken <token>` with a token that has access")
    if "wandb" in r.v["grpoLogger"] and not r.raw.get(full("wandbApiKey")):
        # Without a key wandb.init fails in the TaskRunner, after every GPU has loaded the model.
        r.bad("wandbApiKey", "<unset>", "grpoLogger has wandb: run `pulumi config set --secret "
              "wandbApiKey <key>` (https://wandb.ai/authorize), or drop wandb from grpoLogger")


def secret_in_overrides(r: KeyValues, overrides: tuple[str, ...]) -> None:
    """A secret's own value typed into an override (the overrides are the job's plain-text entrypoint). Never
    shows the value."""
    for spec in (k for k in KEYS if k.secret):
        value = r.raw.get(spec.full)
        if isinstance(value, str) and len(value.strip()) >= SECRET_IN_TEXT_MIN and any(
                value.strip() in item for item in overrides):
            r.bad("grpoExtraOverrides", "<not shown>", f"an item carries the value of the secret {spec.full}: the "
                  "overrides are the job's entrypoint, in plain text on the Ray dashboard; remove it")


def budget(r: KeyValues) -> None:
    """The optional budget alert: both keys or neither."""
    account, amount = r.v["billingAccount"], r.v["budgetMonthly"]
    if account:
        if amount < 1:
            r.bad("budgetMonthly", amount, "must be a positive amount (in the billing account's currency) "
                  "when billingAccount is set")
    elif amount > 0 and "billingAccount" not in r.masked:
        r.bad("billingAccount", "<unset>", "must be set when budgetMonthly is set (the budget lives on the "
              "billing account): run `pulumi config set billingAccount 012345-567890-ABCDEF`")


def bucket(r: KeyValues) -> None:
    """The bucket defaults to the cluster's region: then the region must be a location Cloud Storage offers. A bucket
    the stack adopts is never deleted by it."""
    region = r.v["gcp:region"]
    if not r.v["bucketLocation"] and r.passed("gcp:region") and (problem := bucket_location_problem(region)):
        r.bad("gcp:region", region, problem)
    if r.v["bucketName"] and r.v["bucketDeleteOnDestroy"] and r.passed("bucketName", "bucketDeleteOnDestroy"):
        r.bad("bucketDeleteOnDestroy", True, f"must be false with {full('bucketName')}: the stack adopts that bucket, "
              "it did not create it, and `pulumi destroy` would delete it with everything in it (to delete it "
              "yourself: `gcloud storage rm --recursive gs://<bucket>`)")


def save_freq(r: KeyValues) -> None:
    # verl saves, the last step included, only when save_freq > 0 (trainer/ppo/ray_trainer.py fit, v0.6.1):
    # the merge would find nothing, fail the job, and each resubmission would train from step 0 again.
    if r.v["grpoSaveFreq"] < 0 and r.v["jobMergeModel"]:
        r.bad("grpoSaveFreq", r.v["grpoSaveFreq"], f"-1 saves no checkpoint, and {full('jobMergeModel')} (on) "
              "merges the last one: use 0 (derived) or n >= 1, or set jobMergeModel to false")


def batch_bounds(r: KeyValues, rows: int, whose: str) -> None:
    """A batch holds at most the run's rows; a per-GPU micro batch at most a full batch's samples."""
    samples = rows * KEYS_BY_NAME["grpoRolloutN"].maximum
    for key, top, why in [*((k, rows, whose) for k in BATCH_KEYS),
                          *((k, samples, "a full batch's samples") for k in MICRO_KEYS)]:
        if r.passed(key) and r.v[key] > top:
            r.bad(key, r.v[key], f"must be at most {top} ({why})")


# The keys of a stack's own task: its files are resolved and read only when every one passed its own row.
TASK_KEYS = ("dataTrainFile", "dataValFile", "rewardFile", "rewardFunction", "rewardPackages", "dataTrainRows")


def own_task(r: KeyValues) -> tuple[dataset.TaskSpec | None, dataset.Inspection | None, bool]:
    """The stack's own data and reward (stacks.dataset): the keys that go together, then the paths checked,
    the files read and the reward smoke-tested, so a broken file fails the plan and `pulumi preview` before
    anything exists. Returns (task, its reading, whether it is usable); (None, None, True) for GSM8K."""
    train, val, reward = r.v["dataTrainFile"], r.v["dataValFile"], r.v["rewardFile"]
    function, packages = r.v["rewardFunction"], r.v["rewardPackages"]
    own_rows_passed = r.passed(*TASK_KEYS)  # before the rules below, which only say what goes with what
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
    if not val:
        r.bad("dataValFile", val, "must be set with dataTrainFile: verl validates on it (data.val_files)")
    if not own_rows_passed:
        return None, None, False
    found: list[Problem] = []
    files = {role: dataset.resolve_file(full(key), value, name, found)
             for role, key, value, name in (("train", "dataTrainFile", train, "train.parquet"),
                                             ("val", "dataValFile", val, "val.parquet"),
                                             ("reward", "rewardFile", reward, "reward.py")) if value}
    r.problems += found
    if found or not r.passed("dataValFile"):
        return None, None, False
    declared = r.v["dataTrainRows"]
    if files["train"].source and declared < 1:
        r.bad("dataTrainRows", declared, f"must be the number of rows of {train}: the plan cannot read a gs:// file "
              "(no credentials offline) and sizes the run with it; the staging Job checks it against the file "
              "(rows: pyarrow.parquet.ParquetFile(f).metadata.num_rows)")
    elif not files["train"].source and declared:
        r.bad("dataTrainRows", declared, "only applies when dataTrainFile is a gs:// path (a local file's rows are "
              "read from it)")
    if not r.passed("dataTrainRows"):
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
    batch_bounds(r, rows, f"the {rows} rows of dataTrainFile")
    return task, reading, True
