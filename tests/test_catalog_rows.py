"""Adding an accelerator or a model is a catalog row: a test-only row composes a full stack."""

from __future__ import annotations

import dataclasses

import pytest

from catalog import accelerators, models
from stacks import config
from tests.stack_helpers import job_spec, run_config

POOL = "gcp:container/nodePool:NodePool"


@pytest.fixture
def x100(monkeypatch):
    """An imaginary 4-GPU, 4-NIC machine: nothing else in the code names it."""
    row = dataclasses.replace(accelerators.ACCELERATORS["h200"], key="x100", machine_type="x9-gpu-4g",
                              accelerator_type="nvidia-x100", gpus_per_node=4, rdma_nics=4,
                              nccl_tuner_file="/usr/local/gib/configs/tuner_config_x100.txtpb")
    monkeypatch.setitem(accelerators.ACCELERATORS, "x100", row)
    return row


@pytest.mark.parametrize("mode", ["standard", "autopilot"])
def test_a_new_accelerator_row_composes_a_full_stack(x100, mode):
    keys = {"accelerator": "x100", "clusterMode": mode, "gpuNodes": 2,
            "rdmaCidrs": [f"192.168.{i + 1}.0/24" for i in range(4)], "grpoTensorParallelSize": 4,
            "grpoTrainBatchSize": 64, "grpoPpoMiniBatchSize": 64, "grpoPpoMicroBatchSizePerGpu": 8}
    run = run_config(keys)
    assert run.outputs["gpus"] == 8 and run.outputs["accelerator"] == "x100"
    assert len(run.of_type("gcp:compute/subnetwork:Subnetwork")) == 1 + 1 + 4
    spec = run.one("kubernetes:ray.io/v1:RayCluster").inputs["spec"]
    (group,) = spec["workerGroupSpecs"]
    limits = group["template"]["spec"]["containers"][0]["resources"]["limits"]
    assert limits["nvidia.com/gpu"] == "4"
    job = next(r for r in run.resources if r.type == "pulumi-python:dynamic/verl-gke:RayJob")
    assert job.inputs["runtime_env"]["env_vars"]["NCCL_TUNER_CONFIG_PATH"] == x100.nccl_tuner_file
    assert job_spec(keys).trainer.values()["trainer.n_gpus_per_node"] == "4"
    if mode == "standard":
        assert run.one(POOL, "gke-gpu-pool").inputs["nodeConfig"]["machineType"] == "x9-gpu-4g"


def test_a_new_model_row_is_what_the_recipe_checks(monkeypatch):
    tiny = models.ModelSpec("qwen2.5", "tiny", 6, 3, layers=2, hidden=96, intermediate=256, vocab=1000, tied=True)
    monkeypatch.setitem(models.MODELS, "Qwen/Qwen2.5-Tiny", tiny)
    base = {"gcp:project": "rows-project-1", "gcp:region": "us-central1", "gcp:zone": "us-central1-b",
            "verl-gke:model": "Qwen/Qwen2.5-Tiny"}
    with pytest.raises(config.ConfigError, match="vLLM cannot shard Qwen/Qwen2.5-Tiny .6 attention / 3 KV"):
        config.load({**base, "verl-gke:grpoTensorParallelSize": "2"}, "rows")  # KV heads neither split nor copied
    assert config.load({**base, "verl-gke:grpoTensorParallelSize": "1"}, "rows").model == "Qwen/Qwen2.5-Tiny"
