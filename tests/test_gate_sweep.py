"""A generated sweep: every config the gate accepts plans without an exception.

Configs start from a shipped stack file and change a few keys, each drawn from the key table:
integers from their bounds (stacks.keys: each row's maximum) and near the default, choices from what the gate
allows, strings from a pool of legal and borderline values. The gate (tools.plan.gate: every key,
every component's own rules, the sample quotas) is cheap, so many configs go through it and through
everything the plan computes without the mocks (memory, sizing, price, staging budget); a few
accepted ones of each accelerator are composed under the mocks as `pulumi up` would run them.
A refused config must be a ConfigError (exit 2 in the plan), never another exception.
"""

from __future__ import annotations

import dataclasses
import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from catalog.accelerators import ACCELERATORS
from catalog.capacity import CAPACITIES
from catalog.models import MODELS
from components.cluster import GkeClusterArgs
from components.data_prep import DataPrepArgs
from components.ray_cluster import RayClusterArgs
from components.storage import TrainingStorageArgs
from stacks import component_rules
from stacks import config as stack_config
from stacks.keys import Key, full
from tests.stack_helpers import STACK_FILES
from tools import plan

BASES = {p.stem.split(".", 1)[1]: plan.read_stack_file(p)[0] for p in STACK_FILES}
STRINGS: dict[str, list[str]] = {
    "accelerator": list(ACCELERATORS),
    "clusterMode": list(stack_config.MODES),
    "capacity": list(CAPACITIES),
    "releaseChannel": list(stack_config.CHANNELS),
    "grpoRolloutEngine": ["vllm", "sglang"],
    "grpoActorStrategy": ["fsdp", "fsdp2"],
    "grpoKlLossType": ["kl", "low_var_kl", "mse"],
    "model": sorted(MODELS)[:4] + ["Qwen/Qwen2.5-0.5B-Instruct", "someone/uncatalogued-7b"],
    "cpuMachineType": ["e2-standard-8", "c2-standard-16", "n2-highcpu-16", "e2-standard-4"],
    "grpoLearningRate": ["1e-6", "3e-7", "0.5", "1"],
    "grpoGpuMemoryUtilization": ["0.3", "0.6", "0.9"],
    "grpoKlLossCoef": ["0", "0.001", "10"],
    "namePrefix": ["verl", "v", "verl-sweep-01"],
    "namespace": ["verl", "default", "team-a"],
    "primaryCidr": ["10.10.0.0/20", "100.64.0.0/20", "172.16.0.0/16"],
    "podsCidr": ["10.20.0.0/14", "100.80.0.0/14"],
    "bucketLocation": ["", "US", "us-central1"],
    "reservation": ["", "my-reservation"],
    "gkeVersion": ["", "1.33", "1.34"],
}


def _value(key: Key):
    if key.type == "integer":
        top = key.maximum
        near = [v for v in (key.default, 0, 1, 2, 4, 8, 16, 32, 64, 256, top) if isinstance(v, int) and v <= top]
        return st.one_of(st.sampled_from(near), st.integers(min_value=-1, max_value=top)).map(str)
    if key.type == "boolean":
        return st.sampled_from(["true", "false"])
    if key.name in STRINGS:
        return st.sampled_from(STRINGS[key.name])
    return None


MUTABLE = {k.full: s for k in stack_config.KEYS if ":" not in k.name and (s := _value(k)) is not None}


@st.composite
def configs(draw) -> tuple[str, dict[str, str]]:
    stack = draw(st.sampled_from(sorted(BASES)))
    raw = dict(BASES[stack])
    for key in draw(st.lists(st.sampled_from(sorted(MUTABLE)), min_size=1, max_size=4, unique=True)):
        raw[key] = draw(MUTABLE[key])
    if draw(st.booleans()):  # a model outside the catalog, with the pins the gate asks for
        raw[full("model")] = draw(st.sampled_from(["someone/uncatalogued-7b", "Qwen/Qwen3-8B"]))
        raw[full("grpoTensorParallelSize")] = draw(st.sampled_from(["1", "2"]))
        for key in ("grpoPpoMaxTokenLenPerGpu", "grpoLogProbMaxTokenLenPerGpu"):
            raw[full(key)] = draw(st.sampled_from(["2048", "8192"]))
    return stack, raw


composed: dict[str, int] = {}
COMPOSE_PER_ACCELERATOR = 1  # composing under the mocks takes seconds: a few, not every example


@settings(max_examples=120, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(configs())
def test_every_accepted_config_plans(case):
    stack, raw = case
    try:
        cfg = plan.gate(raw, stack)
    except stack_config.ConfigError as err:
        assert err.problems and all(isinstance(p, str) and p for p in err.problems)
        return
    # Everything the plan computes from the config without the mocks.
    plan.run_figures(cfg)
    plan.price_report(cfg)
    plan.storage_summary(cfg)
    acc = cfg.accelerator.key
    if composed.get(acc, 0) < COMPOSE_PER_ACCELERATOR:
        composed[acc] = composed.get(acc, 0) + 1
        built = plan.build_plan(stack, raw, [])
        assert built["resources"], json.dumps(raw)


def test_the_sweep_composed_each_accelerator():
    """The sweep above really reached the mocks for every accelerator (runs after it in file order)."""
    if not composed:
        pytest.skip("only meaningful after test_every_accepted_config_plans in the same session")
    assert set(composed) == set(ACCELERATORS), composed


# --- the gate builds the components' args as compose does --------------------------------------------


def _plain(value) -> bool:
    import pulumi

    return not isinstance(value, pulumi.Output) and value != component_rules.STANDIN


@pytest.mark.parametrize("stack", ["dev", "b200"])
def test_gate_gives_components_the_args_compose_gives_them(monkeypatch, stack):
    """Each component's args as the gate builds them equal compose's, wherever compose passes a plain value
    (a drift here would let the gate pass a config that a component then refuses)."""
    seen: dict[str, list] = {"gate": [], "compose": []}
    phase = ["gate"]
    for cls in (RayClusterArgs, TrainingStorageArgs, DataPrepArgs, GkeClusterArgs):
        real = cls.problems
        monkeypatch.setattr(cls, "problems", lambda self, _real=real: (seen[phase[0]].append(self), _real(self))[1])
    raw = BASES[stack]
    cfg = stack_config.load(raw, stack, allow_placeholder_project=True)
    seen["gate"].clear()
    component_rules.problems(cfg)
    phase[0] = "compose"
    plan.build_plan(stack, raw, [])
    gate = {type(a).__name__: a for a in seen["gate"]}
    built = {type(a).__name__: a for a in seen["compose"]}
    assert set(gate) == set(built) == {"RayClusterArgs", "TrainingStorageArgs", "DataPrepArgs", "GkeClusterArgs"}
    compared = 0
    for name, args in built.items():
        for f in dataclasses.fields(args):
            ours, theirs = getattr(gate[name], f.name), getattr(args, f.name)
            if f.name in ("network", "cpu_pool") or not (_plain(ours) and _plain(theirs)):
                continue
            if isinstance(theirs, dict) and not all(_plain(v) for v in theirs.values()):
                continue
            assert ours == theirs, f"{name}.{f.name}: gate {ours!r} != compose {theirs!r}"
            compared += 1
    assert compared >= 40, compared
