"""Each component is usable alone: built by itself under mocks from nothing but its own args.

No stack config, no compose, no other component: plain strings where the stack would pass another
component's outputs. What a program of your own would do with `from components.x import X`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import pulumi
import pytest

from catalog import gcsfuse, nics
from catalog.accelerators import ACCELERATORS
from catalog.paths import bucket_paths
from components.apis import ProjectApis
from components.cluster import GkeCluster, GkeClusterArgs
from components.data_prep import DataPrep, DataPrepArgs
from components.network import AttachedNic, ClusterNetwork, RdmaNetwork, RdmaNetworkArgs
from components.network_mapping import NetworkMapping
from components.problems import ArgsError
from components.ray_cluster import RayCluster, RayClusterArgs
from components.ray_job import RayJob, RayJobArgs
from components.storage import TrainingStorage, TrainingStorageArgs
from tools import mocking

PROJECT = "alone-project-1"
B200 = ACCELERATORS["b200"]
PATHS = bucket_paths("alone", "Qwen/Qwen2.5-0.5B-Instruct", "v0.6.1")


def handle() -> ClusterNetwork:
    backing = [("g-net", "g-sub")] + [("r-net", f"r-sub-{i}") for i in range(B200.rdma_nics)]
    return ClusterNetwork(network="net", subnet="sub", pods_range_name="pods", services_range_name="svc",
                          nics=tuple(AttachedNic(s, n, sub) for s, (n, sub)
                                     in zip(nics.additional_nics(B200.rdma_nics), backing, strict=True)))


# The args of each component that takes an XArgs, as a program of your own would give them.
ARGS: dict[str, tuple[type, Callable[[], object]]] = {
    "GkeCluster": (GkeCluster, lambda: GkeClusterArgs(
        project=PROJECT, region="us-central1", zone="us-central1-b", name="alone-gke", autopilot=False,
        accelerator=B200, gpu_nodes=1, network=handle(), min_version="1.33.5-gke.1000000",
        node_service_account="nodes@alone-project-1.iam.gserviceaccount.com")),
    "TrainingStorage": (TrainingStorage, lambda: TrainingStorageArgs(
        project_id=PROJECT, project_number="123", location="us-central1", bucket_prefix="alone-data",
        namespace="alone")),
    "DataPrep": (DataPrep, lambda: DataPrepArgs(
        namespace="alone", service_account="ksa", pvc_name="pvc", paths=PATHS,
        model_id="Qwen/Qwen2.5-0.5B-Instruct", verl_version="v0.6.1",
        pod_annotations=gcsfuse.pod_annotations(False, gcsfuse.WORKER_SIDECAR))),
    "RayCluster": (RayCluster, lambda: RayClusterArgs(
        name="alone-ray", namespace="alone", accelerator=B200, gpu_nodes=1, autopilot=True, zone="us-central1-b",
        image="verlai/verl:vllm011.latest", ray_version="2.49.2", service_account="ksa", pvc_name="pvc",
        writer_pvc_name="writer-pvc", checkpoint_pvc_name="ckpt-pvc", head_checkpoint_pvc_name="head-ckpt-pvc",
        network_annotations=nics.interface_annotations(nics.additional_nics(B200.rdma_nics)), paths=PATHS)),
    "RayJob": (RayJob, lambda: RayJobArgs(
        submission_id="alone-1", entrypoint="echo hi", expected_gpus=0, address="http://127.0.0.1:8265")),
}
TOKENS = {"GkeCluster": "verl-gke:cluster:GkeCluster", "TrainingStorage": "verl-gke:storage:TrainingStorage",
          "DataPrep": "verl-gke:data_prep:DataPrep", "RayCluster": "verl-gke:ray_cluster:RayCluster",
          "RayJob": "pulumi-python:dynamic/verl-gke:RayJob"}
NAMES = {"GkeCluster": "gke", "TrainingStorage": "storage", "DataPrep": "data-prep", "RayCluster": "ray",
         "RayJob": "job"}


def _built(component: str, args_of: Callable[[object], object] = lambda a: a) -> Callable[[], object]:
    cls, make = ARGS[component]
    return lambda: cls(NAMES[component], args_of(make()))


BUILDERS: dict[str, tuple[str, Callable[[], object]]] = {
    "ProjectApis": ("verl-gke:apis:ProjectApis", lambda: ProjectApis("apis", PROJECT)),
    "RdmaNetwork": ("verl-gke:network:RdmaNetwork", lambda: RdmaNetwork("net", RdmaNetworkArgs(
        project=PROJECT, region="us-central1", zone="us-central1-b", prefix="alone",
        primary_cidr="10.0.0.0/20", pods_cidr="10.4.0.0/14", services_cidr="10.8.0.0/20",
        gvnic_cidr="192.168.0.0/24", rdma_cidrs=tuple(f"192.168.{i + 1}.0/24" for i in range(8))))),
    "NetworkMapping": ("verl-gke:network_mapping:NetworkMapping",
                       lambda: NetworkMapping("netmap", list(handle().nics))),
    **{component: (TOKENS[component], _built(component)) for component in ARGS},
}


@pytest.mark.parametrize("component", sorted(BUILDERS))
def test_component_builds_alone(component):
    type_token, build = BUILDERS[component]
    run = mocking.run(lambda: pulumi.export("built", type(build()).__name__), {"gcp:project": PROJECT}, "alone")
    assert run.outputs["built"] == component
    (root,) = [r for r in run.resources if r.type == type_token]
    children = [r for r in run.resources if r.parent == root.urn]
    assert children or root.custom, f"{component} registered no children"
    # Everything registered is the component or one of its descendants: it needed nothing else.
    strays = [r.name for r in run.resources if r is not root and not _descends(run, r, root)]
    assert strays == [], strays


def _descends(run: mocking.Run, reg: mocking.Registration, root: mocking.Registration) -> bool:
    by_urn = run.by_urn()
    while reg.parent in by_urn:
        if reg.parent == root.urn:
            return True
        reg = by_urn[reg.parent]
    return False


# --- bad args, values not known yet, secrets -----------------------------------------------------------


def _refused(program: Callable[[], object]) -> tuple[ArgsError, mocking.Run]:
    seen = mocking.Run()
    with pytest.raises(ArgsError) as err:
        mocking.run(program, {"gcp:project": PROJECT}, "alone", result=seen)
    # A RunError: `pulumi up` prints the message alone, no traceback.
    assert isinstance(err.value, pulumi.RunError)
    return err.value, seen


def _input_fields(args: object) -> list[str]:
    return [f.name for f in dataclasses.fields(args)  # type: ignore[arg-type]
            if str(f.type).startswith(("pulumi.Input[", "pulumi.Output[")) and getattr(args, f.name) is not None]


@pytest.mark.parametrize("component", sorted(ARGS))
def test_a_value_not_known_yet_is_not_judged(component):
    """Every pulumi.Input field given as an Output (another resource's, a secret): the component builds."""
    fields = _input_fields(ARGS[component][1]())
    assert fields

    def as_outputs(args):
        return dataclasses.replace(args, **{f: pulumi.Output.secret(getattr(args, f)) for f in fields})

    run = mocking.run(lambda: _built(component, as_outputs)(), {"gcp:project": PROJECT}, "alone")
    assert [r for r in run.resources if r.type == TOKENS[component]]


@pytest.mark.parametrize("component,field,value", [
    ("GkeCluster", "gpu_nodes", 2), ("GkeCluster", "region", "us-central1"),
    ("RayCluster", "gpu_nodes", 1), ("DataPrep", "verl_version", "v0.6.1"),
])
def test_an_output_where_a_plain_value_is_needed_is_a_clean_error(component, field, value):
    """These fields shape resources when the program runs: an Output there was a TypeError traceback."""
    given = pulumi.Output.from_input(value)
    err, seen = _refused(_built(component, lambda a: dataclasses.replace(a, **{field: given})))
    (problem,) = err.problems
    assert problem.startswith(f"{type(ARGS[component][1]()).__name__}.{field} is a pulumi.Output: give a plain ")
    assert seen.resources == []


def test_a_value_of_the_wrong_type_is_a_clean_error():
    err, seen = _refused(_built("GkeCluster", lambda a: dataclasses.replace(a, gpu_nodes="2")))
    (problem,) = err.problems
    assert problem.startswith("GkeClusterArgs: a value has the wrong type (TypeError: ")
    assert seen.resources == []


def test_a_secret_is_never_shown():
    token, key = "hf_live_token_0123456789", "wandb_live_key_0123456789"
    err, _ = _refused(_built("TrainingStorage", lambda a: dataclasses.replace(
        a, hf_token=token, wandb_api_key=key, namespace="Bad_NS")))
    assert len(err.problems) == 3 and token not in str(err) and key not in str(err)
    err, _ = _refused(_built("RayJob", lambda a: dataclasses.replace(
        a, submission_id="-bad", runtime_env={"env_vars": {"HF_TOKEN": token}}, log_tail_lines=-1)))
    assert [p.split(":")[0].split(" ")[0] for p in err.problems] == [
        "RayJobArgs.submission_id", "RayJobArgs.log_tail_lines"]
    assert token not in str(err)
