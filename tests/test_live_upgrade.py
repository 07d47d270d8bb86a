"""A live stack's next `pulumi up` keeps its URNs and its running job, and announces what it changes.

tests/data/live_state/<stack>.json is each shipped stack as it was deployed before issue 24 (the
plan snapshots of commit 7746758): what a live stack's state holds. The current code's plan of the
same stack file is compared with it: the URNs, the job provider's own diff, and what the program asks
the engine to ignore. (Which GCP field the bridged provider replaces on is the provider's to say: no
offline model of it is kept.)
"""

from __future__ import annotations

import functools
import json
import re
from pathlib import Path

import pytest

from components.ray_job_provider import diff_inputs
from tests.stack_helpers import shipped_plan
from tools import snapshot

DATA = Path(__file__).parent / "data"
LIVE = DATA / "live_state"
STACKS = sorted(p.stem for p in LIVE.glob("*.json"))
JOB = "pulumi-python:dynamic/verl-gke:RayJob"
RAYCLUSTER = "kubernetes:ray.io/v1:RayCluster"
# The job inputs whose change this release announces in README.md's "Upgrading a live stack".
ANNOUNCED_JOB_REPLACES = {"entrypoint", "submission_id", "runtime_env"}


@functools.cache
def states(stack: str) -> tuple[dict, dict]:
    old = {r["urn"]: r for r in json.loads((LIVE / f"{stack}.json").read_text())["resources"]}
    new = {r["urn"]: r for r in json.loads(snapshot.render(stack, shipped_plan(stack)))["resources"]}
    return old, new


def _job_urn(urns) -> str | None:
    return next((u for u in urns if u.endswith("::grpo") and "RayJob" in u), None)


@pytest.mark.parametrize("stack", STACKS)
def test_live_stack_keeps_its_running_job_and_ray_cluster(stack):
    old, new = states(stack)
    urn = _job_urn(old)
    if urn is None:
        pytest.skip(f"{stack} submits no job")
    assert urn in new, "the job's URN changed: Pulumi would delete the running job"
    result = diff_inputs(old[urn]["inputs"], new[urn]["inputs"])
    # A new job command (the layout, the supervisor's hash) resubmits the run once: announced in the
    # README's upgrade note. Nothing else may: not the endpoint switch, not the cluster it runs on.
    unannounced = set(result.replaces) - ANNOUNCED_JOB_REPLACES
    assert not unannounced, f"the job would be stopped and resubmitted: replaces {result.replaces}"
    for ray_urn, before in old.items():
        if before["type"] == RAYCLUSTER:
            assert ray_urn in new, f"{ray_urn}: gone from the plan"
            assert new[ray_urn]["inputs"]["metadata"]["name"] == before["inputs"]["metadata"]["name"]


# Resources a live stack loses on upgrading (their URN leaves the plan, no alias keeps it): Pulumi deletes
# them. Each is named in README.md's "Upgrading a live stack".
ANNOUNCED_DELETIONS = {"node-identity-artifactregistry-reader"}


@pytest.mark.parametrize("stack", STACKS)
def test_every_resource_a_live_stack_loses_is_announced(stack):
    old, new = states(stack)
    aliased = {str(a) for r in new.values() for a in r.get("aliases") or []}
    gone = {urn.rsplit("::", 1)[1] for urn in set(old) - set(new) - aliased}
    assert gone <= ANNOUNCED_DELETIONS, f"deleted on a live stack, not announced: {sorted(gone - ANNOUNCED_DELETIONS)}"


def test_the_readme_names_every_announced_deletion():
    text = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    section = text[text.index("\n## Upgrading a live stack\n"):]
    section = section[:section.index("\n## ", 5)]
    assert all(f"`{name}`" in section for name in ANNOUNCED_DELETIONS)


def test_the_readme_announces_the_job_resubmission():
    text = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    section = text[text.index("\n## Upgrading a live stack\n"):]
    section = section[:section.index("\n## ", 5)]
    assert "The running job is stopped and a new run submitted" in section


def test_the_job_check_catches_a_move_to_another_cluster():
    """The same comparison flags a job moved to another cluster (another endpoint and another CA)."""
    old, new = states(STACKS[0])
    job = _job_urn(old)
    moved = json.loads(json.dumps(new[job]["inputs"]))
    moved["gke"].update(endpoint="gke-other.us-central1.gke.goog", ca_certificate="T1RIRVI=")
    assert "gke" in diff_inputs(old[job]["inputs"], moved).replaces


@pytest.mark.parametrize("stack", STACKS[:1])
def test_kubernetes_provider_survives_the_endpoint_switch(stack):
    _, new = states(stack)
    (provider,) = [r for r in new.values() if r["type"] == "pulumi:providers:kubernetes"]
    assert provider["inputs"].get("clusterIdentifier")


def _active_cluster(kubeconfig_text: str) -> dict:
    """What pulumi-kubernetes compares to decide a provider replacement: the current context's cluster
    entry (provider/pkg/provider/provider.go DiffConfig, getActiveClusterFromConfig @94977969d)."""
    cfg = json.loads(kubeconfig_text)
    context = next(c["context"] for c in cfg["contexts"] if c["name"] == cfg["current-context"])
    return next(c["cluster"] for c in cfg["clusters"] if c["name"] == context["cluster"])


def test_a_live_cluster_keeps_its_kubeconfig_while_the_clusteridentifier_is_added():
    """The first `up` of this release records clusterIdentifier; pulumi-kubernetes ignores the active
    cluster only once the identifier is the same on both sides, so in that `up` the kubeconfig's active
    cluster must not change: a live cluster (IP endpoint still on) keeps the IP endpoint and its CA."""
    from components import cluster

    live = {"ipEndpointsConfig": {"enabled": True}, "dnsEndpointConfig": {"endpoint": "gke-1.us.gke.goog"}}
    # Pre-DNS releases (commit 7746758 components/cluster.py kubeconfig): server https://<ip> with the CA.
    before = {"server": "https://34.1.2.3", "certificate-authority-data": "Q0E="}
    assert _active_cluster(cluster.provider_kubeconfig("verl-gke", "34.1.2.3", "Q0E=", live)) == before
    assert _active_cluster(cluster.provider_kubeconfig("verl-gke", "34.1.2.3", "Q0E=", {})) == before  # never set
    after = {**live, "ipEndpointsConfig": {"enabled": False}}
    assert _active_cluster(cluster.provider_kubeconfig("verl-gke", "34.1.2.3", "Q0E=", after)) == {
        "server": "https://gke-1.us.gke.goog"}


@pytest.mark.parametrize("stack", STACKS[:1])
def test_the_ip_endpoint_is_kept_until_the_dns_endpoint_migration(stack):
    from stacks.compose import program
    from tools import mocking, plan

    _, new = states(stack)
    (cl,) = [r for r in new.values() if r["type"] == "gcp:container/cluster:Cluster"]
    assert "controlPlaneEndpointsConfig.ipEndpointsConfig" in cl["ignoreChanges"]
    raw, secret_keys = plan.read_stack_file(snapshot.ROOT / f"Pulumi.{stack}.yaml")
    raw = {**raw, "gcp:project": "p-1234567", "verl-gke:migrations": '["dns-endpoint"]'}
    migrated = mocking.run(program, raw, stack, secret_keys).one("gcp:container/cluster:Cluster")
    assert "controlPlaneEndpointsConfig.ipEndpointsConfig" not in migrated.ignore_changes


def test_the_private_cluster_migration_keeps_the_endpoint_subnetwork_gke_filled_ignored():
    """After the README's `gcloud ... --enable-private-nodes` and `pulumi refresh`, the cluster's state
    holds what GKE returns: private nodes on, and private_endpoint_subnetwork, which GKE fills on a PSC
    cluster with the node subnet (terraform-provider-google #20429 shows one in a plan) although the
    program never sets it. The field is ForceNew and not Computed, and its diff is suppressed only with
    master_ipv4_cidr_block (resource_container_cluster.go @e03b7622), so it stays ignored once the
    migration is named (the field alone: the program still asks for private nodes)."""
    from tests.stack_helpers import composed

    cluster = composed({"clusterMode": "standard", "migrations": ["private-cluster"]}).one(
        "gcp:container/cluster:Cluster")
    assert "privateClusterConfig.privateEndpointSubnetwork" in cluster.ignore_changes
    assert cluster.inputs["privateClusterConfig"]["enablePrivateNodes"] is True


# The last release's resources (tests/data/release_state.json, frozen from its plan snapshots): a
# refactor may move code, never a URN. Each must still be produced, or kept by an alias.
RELEASE = json.loads((DATA / "release_state.json").read_text())["stacks"]


@pytest.mark.parametrize("stack", sorted(RELEASE))
def test_no_urn_of_the_last_release_is_lost(stack):
    _, new = states(stack)
    aliased = {str(a) for r in new.values() for a in r.get("aliases") or []}
    lost = [u for u in RELEASE[stack]["urns"] if u not in new and u not in aliased]
    assert not lost, f"a deployed stack would delete: {lost}"


# The job inputs whose change this release announces to stacks of the last release (README.md, "Upgrading a
# live stack"): the supervisor ships with the provider <-> supervisor protocol module now, in a folder named
# by the hash of both, so the entrypoint names another script and the run gets another submission id.
ANNOUNCED_LAST_RELEASE_JOB_REPLACES = {"entrypoint", "submission_id"}
SUPERVISOR_SCRIPT = re.compile(r"^python3 (\S+) ")


@pytest.mark.parametrize("stack", [s for s in sorted(RELEASE) if RELEASE[s]["job_inputs"]])
def test_the_last_releases_job_is_not_resubmitted(stack):
    """A job started by the last release keeps running unless this release announces why not: its stored
    inputs diff with no replacement beyond the announced ones."""
    _, new = states(stack)
    urn = _job_urn(new)
    result = diff_inputs(RELEASE[stack]["job_inputs"], new[urn]["inputs"])
    unannounced = set(result.replaces) - ANNOUNCED_LAST_RELEASE_JOB_REPLACES
    assert not unannounced, f"the running job would be stopped and resubmitted: {result.replaces}"
    assert result.delete_before_replace  # the old run is stopped before the new one is submitted


def test_the_announced_resubmission_stops_the_old_run_before_submitting_the_new():
    """Never two runs on the GPUs: the job is replaced delete-before-replace. The program's option wins over
    the provider's DiffResponse when it is set (pulumi/pulumi pkg/resource/deploy/step_generator.go
    L2043-2046 @1b5949891b3cefcb9974752b24a5ecef0acc86c8: `goal.DeleteBeforeReplace` overrides
    `diff.DeleteBeforeReplace`), so the registration must ask for it, not merely leave it to the diff."""
    from stacks.compose import program
    from tools import mocking, plan

    stack = next(s for s in sorted(RELEASE) if RELEASE[s]["job_inputs"])
    raw, secret_keys = plan.read_stack_file(snapshot.ROOT / f"Pulumi.{stack}.yaml")
    job = mocking.run(program, {**raw, "gcp:project": "p-1234567"}, stack, secret_keys).one(JOB)
    assert job.delete_before_replace is True


@pytest.mark.parametrize("stack", sorted(RELEASE))
def test_the_last_releases_ray_cluster_changes_only_metadata(stack):
    """A RayCluster of the last release is updated in place, and in its metadata only: the API server then
    keeps metadata.generation (tests/data/pulumi_k8s_await.json custom_resource_generation), so the
    waitFor's observedGeneration gate holds at once and the new wait is checked against the live head.
    A spec change would replace the cluster (its running job with it) and needs an upgrade note."""
    _, new = states(stack)
    after = next(r for r in new.values() if r["type"] == RAYCLUSTER)
    before = RELEASE[stack]["raycluster_inputs"]
    assert after.get("ignoreChanges") == ["spec.workerGroupSpecs"]  # the run-time replica counts

    def kept(inputs: dict) -> dict:
        spec = {k: v for k, v in inputs["spec"].items() if k != "workerGroupSpecs"}
        return {**{k: v for k, v in inputs.items() if k not in ("metadata", "spec")}, "spec": spec}

    assert kept(after["inputs"]) == kept(before)
    replaced_on = [p.removeprefix('metadata.annotations["').removesuffix('"]')
                   for p in after.get("replaceOnChanges", []) if p.startswith("metadata.annotations[")]
    for key in replaced_on:
        assert after["inputs"]["metadata"]["annotations"].get(key) == before["metadata"]["annotations"].get(key), key


@pytest.mark.parametrize("stack", [s for s in sorted(RELEASE) if RELEASE[s]["job_inputs"]])
def test_the_last_releases_run_changes_only_its_supervisor(stack):
    """The announced resubmission is the supervisor's alone: the same trainer command, run folder, state file
    and options, the same runtime env; so the new run resumes from the old run's last checkpoint."""
    _, new = states(stack)
    before, after = RELEASE[stack]["job_inputs"], new[_job_urn(new)]["inputs"]
    old_script = SUPERVISOR_SCRIPT.match(before["entrypoint"]).group(1)
    new_script = SUPERVISOR_SCRIPT.match(after["entrypoint"]).group(1)
    assert old_script != new_script
    assert after["entrypoint"] == before["entrypoint"].replace(old_script, new_script, 1)
    assert after["runtime_env"] == before["runtime_env"] and after["expected_gpus"] == before["expected_gpus"]


def test_the_readme_announces_the_last_releases_job_resubmission():
    text = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    section = text[text.index("\n## Upgrading a live stack\n"):]
    section = section[:section.index("\n## ", 5)]
    note = section[section.index("**From the last release"):]
    note = note[:note.index("\n\n")]
    assert "the running job is stopped and a new run submitted" in note
    assert all(f"`{key}`" in note for key in ANNOUNCED_LAST_RELEASE_JOB_REPLACES)
    # the replacement does not look at the job's status: a finished run is submitted again (GPUs scaled up)
    assert "already finished" in note and "submitJob false" in note
