"""What the program registers so that the Pulumi engine's refresh/replace/destroy rules do the right thing
(issue 21), asserted on the registrations (the plan graph), with the engine's lines they rely on. The real engine
runs those rules on the dynamic resources themselves in tests/test_engine_dynamic.py (the dependents pass, the
guard's refusal at check, the kept bucket's message on destroy).

pulumi/pulumi at commit 1b5949891b3cefcb9974752b24a5ecef0acc86c8:
- pkg/resource/deploy/step_generator.go `calculateDependentReplacements` (from L3268): when a resource
  is replaced delete-before-replace (L2040-2070; the RayCluster is: pulumi-kubernetes `Diff` sets
  DeleteBeforeReplace for a named object, and components.ray_cluster asks for it), each dependent whose
  input has a *property dependency* on it gets that input as one unknown value (L3325-3333,
  `resource.MakeComputed`) and its provider's Diff decides; a `dependsOn` edge alone never replaces
  ("the edge from B to A may be a simple `dependsOn` edge such that a change to B does not actually
  influence any of B's input properties").
- the same file, `isImport` (L1113): an `import` id equal to the id already in state is no import.
pulumi/pulumi-kubernetes at commit 94977969d64112b04e19945818a7d5d5f38f631d:
- provider/pkg/provider/provider.go `DiffConfig` (L454-540): with `clusterIdentifier` set and unchanged,
  a changed or computed kubeconfig no longer replaces the provider; adding it is not a replacement.
- the same file L612-632: `deleteUnreachable` is also read from PULUMI_K8S_DELETE_UNREACHABLE.
"""

from __future__ import annotations

import pytest
from pulumi.runtime import rpc

from components.stack_guard import refusals
from stacks import keys
from tests.stack_helpers import composed

JOB = "pulumi-python:dynamic/verl-gke:RayJob"
RAYCLUSTER = "kubernetes:ray.io/v1:RayCluster"
K8S_PROVIDER = "pulumi:providers:kubernetes"
BUCKET = "gcp:storage/bucket:Bucket"
GUARD = "pulumi-python:dynamic/verl-gke:StackGuard"
KEEPER = "pulumi-python:dynamic/verl-gke:BucketKeeper"


@pytest.fixture(scope="module")
def run():
    return composed({"accelerator": "l4", "clusterMode": "standard", "zonalCluster": True, "gpuNodes": 2,
                       "model": "Qwen/Qwen2.5-0.5B-Instruct"})


def test_the_job_has_a_property_dependency_on_its_raycluster(run):
    job, raycluster = run.one(JOB), run.one(RAYCLUSTER)
    # a property dependency, not only dependsOn: the dependents pass re-diffs the job with this input unknown
    assert job.property_dependencies["cluster_uid"] == [raycluster.urn]
    assert job.inputs["cluster_uid"]  # the uid the API server gave the RayCluster (mocked)
    # nothing else follows the cluster: the dependents pass turns only cluster_uid unknown
    assert [k for k, urns in job.property_dependencies.items() if raycluster.urn in urns] == ["cluster_uid"]


def test_the_kubernetes_provider_has_a_cluster_identifier_and_no_delete_unreachable(run):
    (provider,) = run.of_type(K8S_PROVIDER)
    assert "deleteUnreachable" not in provider.inputs
    cluster = run.one("gcp:container/cluster:Cluster")
    identifier = provider.inputs["clusterIdentifier"]
    assert identifier.startswith(f"projects/test-project-1/locations/{cluster.inputs['location']}/clusters/")
    assert identifier.endswith(f"/{cluster.inputs['name']}/standard")


def test_the_bucket_keeps_its_name_or_adopts_a_named_one(run):
    own = run.one(BUCKET)
    assert own.import_id == "" and own.retain_on_delete
    suffix = run.one("random:index/randomId:RandomId")
    assert suffix.parent == own.parent  # the suffix lives in state: an existing stack keeps its name
    adopted = composed({"accelerator": "l4", "clusterMode": "standard", "zonalCluster": True, "gpuNodes": 2,
                          "model": "Qwen/Qwen2.5-0.5B-Instruct", "bucketName": "verl-data-0a1b2c3d"})
    bucket = adopted.one(BUCKET)
    assert bucket.import_id == "verl-data-0a1b2c3d" and bucket.inputs["name"] == "verl-data-0a1b2c3d"
    assert bucket.urn == own.urn and bucket.retain_on_delete  # same URN: state moves over, never a 2nd bucket
    assert not adopted.of_type("random:index/randomId:RandomId")
    keeper = adopted.one(KEEPER)
    assert keeper.inputs["kept"] is True and keeper.inputs["adopt_key"] == keys.full("bucketName")


def test_the_guard_is_registered_first_with_every_guarded_key(run):
    guard = run.one(GUARD)
    # Its check runs before any other step: the project APIs, which everything else waits on, wait on it.
    assert guard.urn in run.one("verl-gke:apis:ProjectApis").depends_on
    fixed = guard.inputs["fixed"]
    assert fixed[keys.full("clusterMode")]["value"] == "standard"
    assert fixed[keys.full("bucketLocation")]["value"] == "us-central1"
    assert {keys.full("namePrefix"), keys.full("bucketName"), "gcp:region", "gcp:zone"} <= set(fixed)


def test_a_bad_bucket_name_is_refused_naming_the_key():
    from stacks import config

    with pytest.raises(config.ConfigError, match="bucketName"):
        config.load({"gcp:project": "test-project-1", "gcp:region": "us-central1", "gcp:zone": "us-central1-b",
                     "verl-gke:bucketName": "Has_Upper"}, "test")


# ----------------------------------------------------------------------------- what the guard lets through

MODE = keys.full("clusterMode")


def fixed(**values) -> dict:
    return {"fixed": {k: {"value": v, "replaces": f"the thing {k} names"} for k, v in values.items()}}


def test_the_guard_lets_through_what_replaces_nothing():
    olds = fixed(**{MODE: "standard", "gcp:region": "us-central1"})
    assert [p.key for p in refusals(olds, fixed(**{MODE: "autopilot", "gcp:region": "us-central1"}))] == [MODE]
    # unchanged, not known yet, the first deployment (no olds), a newly guarded key: nothing refused
    assert refusals(olds, olds) == []
    assert refusals(olds, fixed(**{MODE: rpc.UNKNOWN, "gcp:region": "us-central1"})) == []
    assert refusals({}, olds) == []
    assert refusals(olds, fixed(**{MODE: "standard", "gcp:region": "us-central1", "new": 1})) == []


def test_refusals_tolerate_a_wholly_unknown_input():
    assert refusals(fixed(a=1), {"fixed": rpc.UNKNOWN}) == []
