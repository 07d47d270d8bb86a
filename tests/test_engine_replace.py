"""What the program registers so that the Pulumi engine's refresh/replace/destroy rules do the right thing
(issue 21), asserted on the registrations (the plan graph), with the engine's lines they rely on.

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

from components.stack_guard import kept_message, refusals
from stacks import keys
from tests.provider_grpc import ProviderServer
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
    assert "cluster_uid" not in {"submission_id", "entrypoint"}  # the run's identity does not change with it


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


# ----------------------------------------------------------------------------- the guard over the wire

MODE = keys.full("clusterMode")


def fixed(**values) -> dict:
    return {"fixed": {k: {"value": v, "replaces": f"the thing {k} names"} for k, v in values.items()}}


def guard_check(news: dict, olds: dict | None):
    from google.protobuf import struct_pb2
    from pulumi.dynamic.dynamic import serialize_provider
    from pulumi.runtime.proto import provider_pb2

    from components.stack_guard import StackGuardProvider

    with ProviderServer() as server:
        blob = serialize_provider(StackGuardProvider())

        def struct(props):
            out = struct_pb2.Struct()
            out.update({**props, "__provider": blob})
            return out

        resp = server.stub.Check(provider_pb2.CheckRequest(
            urn="urn:pulumi:test::verl-gke::pulumi-python:dynamic/verl-gke:StackGuard::stack-guard",
            olds=struct(olds) if olds else struct_pb2.Struct(), news=struct(news)), timeout=120)
        return {(f.property, f.reason) for f in resp.failures}


def test_the_guard_refuses_a_replace_forcing_change_at_check():
    olds = fixed(**{MODE: "standard", "gcp:region": "us-central1"})
    failures = guard_check(fixed(**{MODE: "autopilot", "gcp:region": "us-central1"}), olds)
    # A resource-level failure: a property failure would make the engine print the input of that name
    # ("property verl-gke:clusterMode value {<nil>}": issueCheckFailures, step_generator.go L3054-3072)
    assert [p for p, _ in failures] == [""]
    (reason,) = [r for _, r in failures]
    assert f"changing {MODE} from 'standard' to 'autopilot'" in reason
    assert f"pulumi config set {MODE} standard" in reason
    assert "pulumi destroy" in reason
    # unchanged, unknown, first deployment (no olds), a newly guarded key: nothing refused
    assert guard_check(olds, olds) == set()
    assert guard_check(fixed(**{MODE: rpc.UNKNOWN, "gcp:region": "us-central1"}), olds) == set()
    assert guard_check(olds, None) == set()
    assert guard_check(fixed(**{MODE: "standard", "gcp:region": "us-central1", "new": 1}), olds) == set()


def test_refusals_tolerate_a_wholly_unknown_input():
    assert refusals(fixed(a=1), {"fixed": rpc.UNKNOWN}) == []


def test_destroy_prints_the_kept_bucket_and_how_to_adopt_it():
    from google.protobuf import struct_pb2
    from pulumi.dynamic.dynamic import serialize_provider
    from pulumi.runtime.proto import provider_pb2

    from components.stack_guard import BucketKeeperProvider

    with ProviderServer() as server:
        blob = serialize_provider(BucketKeeperProvider())
        for kept in (True, False):
            props = struct_pb2.Struct()
            props.update({"bucket": "verl-data-0a1b2c3d", "kept": kept, "adopt_key": keys.full("bucketName"),
                          "__provider": blob})
            server.stub.Delete(provider_pb2.DeleteRequest(
                id="verl-data-0a1b2c3d", urn="urn:pulumi:test::verl-gke::x::keeper", properties=props), timeout=120)
        server.proc.terminate()
        server._drain.join(timeout=30)
    assert server.stderr_lines == [kept_message("verl-data-0a1b2c3d", keys.full("bucketName"))]
    assert f"pulumi config set {keys.full('bucketName')} verl-data-0a1b2c3d" in server.stderr_lines[0]


def dependents_pass_inputs(job, replaced_urn: str) -> dict:
    """The engine's dependents pass for one dependent (step_generator.go L3325-3333): every input with a
    property dependency on the replaced resource becomes one unknown value; the rest stay as they are."""
    return {k: (rpc.UNKNOWN if replaced_urn in job.property_dependencies.get(k, []) else v)
            for k, v in job.raw_inputs.items() if k != "__provider"}


def test_a_replaced_raycluster_replaces_the_job_in_the_dependents_pass(run):
    job, raycluster = run.one(JOB), run.one(RAYCLUSTER)
    olds = {k: v for k, v in job.raw_inputs.items() if k != "__provider"}
    news = dependents_pass_inputs(job, raycluster.urn)
    assert [k for k in news if news[k] == rpc.UNKNOWN] == ["cluster_uid"]  # nothing else follows the cluster
    with ProviderServer() as server:
        assert list(server.diff("grpo", olds, news).replaces) == ["cluster_uid"]
        # an RDMA network or the namespace replaced too: whatever else turns unknown, the diff does not crash
        every = {k: rpc.UNKNOWN for k in olds}
        assert "cluster_uid" in server.diff("grpo", olds, every).replaces


# ----------------------------------------------------------------------------- providers as the state holds them

# `__provider` as `pulumi up` writes it into the state (pulumi.dynamic.serialize_provider: dill, by reference to
# module and class). Refresh, destroy and the removal of a resource unpickle these in the provider process
# (sdk/python/lib/pulumi/dynamic/__main__.py `get_provider` on the state's properties): a renamed or moved
# class fails them with ModuleNotFoundError/AttributeError. base64 of the pickles, recorded once, never updated.
STATE_BLOBS = {
    "components.stack_guard.StackGuardProvider":
        "gASVNAAAAAAAAACMFmNvbXBvbmVudHMuc3RhY2tfZ3VhcmSUjBJTdGFja0d1YXJkUHJvdmlkZXKUk5QpgZQu",
    "components.stack_guard.BucketKeeperProvider":
        "gASVNgAAAAAAAACMFmNvbXBvbmVudHMuc3RhY2tfZ3VhcmSUjBRCdWNrZXRLZWVwZXJQcm92aWRlcpSTlCmBlC4=",
    "components.ray_job_provider.RayJobProvider":
        "gASVNQAAAAAAAACMG2NvbXBvbmVudHMucmF5X2pvYl9wcm92aWRlcpSMDlJheUpvYlByb3ZpZGVylJOUKYGULg==",
    # state written before the provider moved out of components/ray_job.py
    "components.ray_job.RayJobProvider": "gASVLAAAAAAAAACMEmNvbXBvbmVudHMucmF5X2pvYpSMDlJheUpvYlByb3ZpZGVylJOUKYGULg==",
}


def test_this_version_pickles_its_providers_under_the_recorded_names():
    import base64
    import pickletools

    from pulumi.dynamic.dynamic import serialize_provider

    from components.ray_job_provider import RayJobProvider
    from components.stack_guard import BucketKeeperProvider, StackGuardProvider

    for provider in (StackGuardProvider(), BucketKeeperProvider(), RayJobProvider()):
        blob = serialize_provider(provider)
        names = [arg for op, arg, _ in pickletools.genops(base64.b64decode(blob)) if op.name == "SHORT_BINUNICODE"]
        assert STATE_BLOBS[".".join(names)] == blob  # by reference, and the name the state will hold


def test_providers_recorded_in_state_still_unpickle_in_the_provider_process():
    """Delete (guard, keeper) and Diff (job) with the recorded blobs, through a fresh provider server."""
    from google.protobuf import struct_pb2
    from pulumi.runtime.proto import provider_pb2

    def struct(props: dict, blob: str):
        out = struct_pb2.Struct()
        out.update({**props, "__provider": blob})
        return out

    urn = "urn:pulumi:test::verl-gke::pulumi-python:dynamic/verl-gke:{}::x"
    with ProviderServer() as server:
        server.stub.Delete(provider_pb2.DeleteRequest(
            id="stack-guard", urn=urn.format("StackGuard"),
            properties=struct(fixed(**{MODE: "standard"}), STATE_BLOBS["components.stack_guard.StackGuardProvider"])),
            timeout=120)
        server.stub.Delete(provider_pb2.DeleteRequest(
            id="b", urn=urn.format("BucketKeeper"),
            properties=struct({"bucket": "b", "kept": False, "adopt_key": "k"},
                              STATE_BLOBS["components.stack_guard.BucketKeeperProvider"])), timeout=120)
        job = {"submission_id": "s", "entrypoint": "e", "expected_gpus": 1, "address": "http://127.0.0.1:1"}
        for name in ("components.ray_job_provider.RayJobProvider", "components.ray_job.RayJobProvider"):
            resp = server.stub.Diff(provider_pb2.DiffRequest(
                id="s", urn=urn.format("RayJob"), olds=struct(job, STATE_BLOBS[name]),
                news=struct({**job, "entrypoint": "f"}, STATE_BLOBS[name])), timeout=120)
            assert list(resp.replaces) == ["entrypoint"], name
