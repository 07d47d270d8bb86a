"""One rule in one place (issues 25, 44): one problem type, each rule beside what it guards and run once
by the gate, values derived once per config, and compose that only wires.

- every bad setting is a catalog.problems.Problem: every component's args answer `problems()` with
  them, and one helper raises them;
- a key's own rules sit in its row (stacks.keys), the rules over several keys in stacks.cross_keys;
  the gate (stacks.config.load) holds none, it calls them;
- the gate (whose component pass is stacks.component_rules) runs each component rule once: the rules
  a component holds are not checked again by the config;
- stacks.derived computes the derived values once per config object, shared by the gate, compose and
  the plan;
- compose.py calls no catalog or recipe function, and no component takes the stack's config.
"""

from __future__ import annotations

import ast
import collections
import dataclasses
import gc
import inspect
import sys
import weakref
from collections.abc import Callable
from pathlib import Path

import pulumi
import pytest

from catalog import accelerators, capacity, naming
from components.budget import ProjectBudgetArgs
from components.cluster import GkeClusterArgs
from components.data_prep import DataPrepArgs
from components.network import RdmaNetworkArgs
from components.problems import ArgsError, require
from components.ray_cluster import RayClusterArgs
from components.run_supervisor import GpuReleaseAccessArgs
from components.storage import TrainingStorageArgs
from components.task_files import TaskFilesArgs, TaskSourceAccessArgs
from stacks import compose, derived, key_values
from stacks import config as stack_config
from tests.stack_helpers import ROOT
from tools import mocking, plan

ARGS = (GkeClusterArgs, RayClusterArgs, TrainingStorageArgs, DataPrepArgs, ProjectBudgetArgs, RdmaNetworkArgs,
        TaskFilesArgs, TaskSourceAccessArgs, GpuReleaseAccessArgs)
BUDGET = {"verl-gke:billingAccount": "012345-567890-ABCDEF", "verl-gke:budgetMonthly": "500"}


def _raw(stack: str, **extra: str) -> dict[str, str]:
    raw, _ = plan.read_stack_file(ROOT / f"Pulumi.{stack}.yaml", stack)
    return {**raw, **extra}


class _Calls:
    """Counts the calls of functions by their code, however a caller reaches them (a module's name for one, a
    rule in a key's row, a method), while the block runs: `counts[label]`."""

    def __init__(self) -> None:
        self.counts: collections.Counter = collections.Counter()
        self._watched: list[tuple[str, object, Callable[..., bool]]] = []

    def watch(self, label: str, fn: Callable, when: Callable[..., bool] = lambda *a: True) -> None:
        """Count each call of `fn` whose positional parameters (self first for a method) satisfy `when`."""
        self._watched.append((label, fn.__code__, when))

    def __enter__(self) -> _Calls:
        sys.setprofile(self._profile)
        return self

    def __exit__(self, *exc: object) -> None:
        sys.setprofile(None)

    def _profile(self, frame, event: str, _arg: object) -> None:
        if event != "call":
            return
        for label, code, when in self._watched:
            if frame.f_code is code:
                args = [frame.f_locals[name] for name in code.co_varnames[:code.co_argcount]]
                if when(*args):
                    self.counts[label] += 1


@pytest.mark.parametrize("stack,extra", [("b200", {}), ("dev", BUDGET)])
def test_the_gate_runs_each_rule_once(stack, extra):
    calls = _Calls()
    calls.watch("offered_problem", capacity.Capacity.offered_problem)
    calls.watch("RayCluster name label", naming.dns_1035_label_problem, lambda value, *a: str(value).endswith("-ray"))
    calls.watch("foreign accelerator in name", accelerators.foreign_accelerator_problem)
    for cls in (GkeClusterArgs, RayClusterArgs, TrainingStorageArgs, DataPrepArgs, ProjectBudgetArgs):
        calls.watch(cls.__name__, cls.problems)
    raw = _raw(stack, **extra)
    with calls:
        stack_config.load(raw, stack, allow_placeholder_project=True)
    assert calls.counts == {"offered_problem": 1, "RayCluster name label": 1, "foreign accelerator in name": 1,
                            "GkeClusterArgs": 1, "RayClusterArgs": 1, "TrainingStorageArgs": 1, "DataPrepArgs": 1,
                            **({"ProjectBudgetArgs": 1} if extra else {})}


def test_a_key_rule_runs_at_the_key_and_at_the_component_that_holds_the_value():
    """The model id: by its key (it guards the recipe's arithmetic) and by DataPrepArgs (the folder it stages),
    once each. The namespace: by its key and by TrainingStorageArgs, which creates it; RayCluster and DataPrep
    get TrainingStorage's namespace and KSA outputs (stand-ins in the gate, as compose passes Outputs)."""
    raw = _raw("b200")
    namespace, model = raw["verl-gke:namespace"], raw["verl-gke:model"]
    calls = _Calls()
    calls.watch("model_id", naming.model_id_problem, lambda value, *a: value == model)
    calls.watch("namespace", naming.namespace_problem, lambda value, *a: value == namespace)
    # naming.namespace_problem reads dns_label itself: any other caller judges the namespace a second way.
    calls.watch("dns_label", naming.dns_label_problem, lambda value, *a: value == namespace)
    with calls:
        stack_config.load(raw, "b200", allow_placeholder_project=True)
    assert calls.counts == {"model_id": 2, "namespace": 2, "dns_label": 2}


def test_a_component_rule_still_names_its_key():
    """Checked once, by the component's rule, the problem still names the key and its value."""
    raw = _raw("b200", **{"verl-gke:capacity": "on-demand"})
    with pytest.raises(stack_config.ConfigError) as err:
        stack_config.load(raw, "b200", allow_placeholder_project=True)
    (problem,) = err.value.problems
    assert problem.startswith("verl-gke:capacity = 'on-demand': a4-highgpu-8g is not offered as on-demand")
    raw = _raw("h200", **{"verl-gke:namePrefix": "verl-b200"})
    with pytest.raises(stack_config.ConfigError) as err:
        stack_config.load(raw, "h200", allow_placeholder_project=True)
    (problem,) = err.value.problems
    assert problem.startswith("verl-gke:namePrefix: RayClusterArgs.name = 'verl-b200-ray': ")
    assert "b200" in problem and "h200" in problem


def _project_sources() -> list[Path]:
    layers = ("catalog", "components", "recipe", "stacks", "tools")
    return sorted(p for layer in layers for p in (ROOT / layer).rglob("*.py"))


def test_every_bad_setting_is_one_problem_type():
    """catalog.problems.Problem is the one problem class: no other module defines one (a Finding, a second
    Problem), and no problems function answers bare (path, reason) tuples."""
    others, tuples = [], []
    for path in _project_sources():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef) and ("Problem" in node.name or "Finding" in node.name) \
                    and path != ROOT / "catalog" / "problems.py":
                others.append(f"{path.relative_to(ROOT)}:{node.name}")
            if isinstance(node, ast.FunctionDef) and node.name.endswith("problems") and node.returns is not None \
                    and "tuple[str, str]" in ast.unparse(node.returns):
                tuples.append(f"{path.relative_to(ROOT)}:{node.name}")
    assert others == [] and tuples == [], (others, tuples)


def test_the_gate_holds_no_rule_of_its_own():
    """stacks.config.load calls the rules where they sit; it judges no value itself (no catalog check, no
    recorded problem)."""
    tree = ast.parse((ROOT / "stacks" / "config.py").read_text())
    calls = [ast.unparse(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call)]
    assert "cross_keys.placement" in calls, "the scan found no rule group: the test itself is broken"
    judged = [c for c in calls if c.endswith(("_problem", ".bad", ".check"))]
    checks = sorted(m for m in _imports(ROOT / "stacks" / "config.py")
                    if m in ("catalog.naming", "catalog.gcp_ranges", "catalog.storage_locations", "catalog.zones"))
    assert judged == [] and checks == [], (judged, checks)


def test_a_kind_rule_judges_every_key_of_its_kind(monkeypatch):
    """A rule for every non-secret key is one row of stacks.keys.KIND_RULES: each such key set to what it refuses
    is refused, naming that key; a secret key is not judged by it."""
    canary = "canary-value-7"
    refuse = ("must not be the canary", lambda value: "must not be the canary" if value == canary else None)
    monkeypatch.setattr(key_values, "KIND_RULES", (*key_values.KIND_RULES, (lambda k: not k.secret, refuse[1])))
    raw = _raw("b200")
    for k in stack_config.KEYS:
        with pytest.raises(stack_config.ConfigError) as err:
            # A bad namePrefix (unless it is the key judged): refused even where the canary is not.
            stack_config.load({**raw, "verl-gke:namePrefix": "Not_A_Prefix", k.full: canary}, "b200",
                              allow_placeholder_project=True)
        judged = [p for p in err.value.problems if p.endswith(refuse[0])]
        assert judged == ([] if k.secret else [f"{k.full} = {canary!r}: {refuse[0]}"]), (k.name, judged)


def test_derived_values_are_computed_once_per_config(monkeypatch):
    calls = []
    real = derived.derive
    monkeypatch.setattr(derived, "derive", lambda cfg: (calls.append(cfg), real(cfg))[1])
    raw = _raw("b200")
    # `pulumi up`: the gate's load and compose share one config object, so one derivation.
    mocking.run(lambda: compose.program(allow_placeholder_project=True), raw, "b200")
    assert len(calls) == 1
    cfg = calls[0]
    assert derived.of(cfg) is derived.of(cfg)
    assert len(calls) == 1
    other = stack_config.load(raw, "b200", allow_placeholder_project=True)
    assert derived.of(other) is not derived.of(cfg) and derived.of(other) == derived.of(cfg)


def _outputs_in(value: object) -> list[object]:
    if isinstance(value, pulumi.Output):
        return [value]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        value = [getattr(value, f.name) for f in dataclasses.fields(value)]
    elif isinstance(value, dict):
        value = [*value.keys(), *value.values()]
    elif not isinstance(value, (list, tuple, set, frozenset)):
        return []
    return [o for v in value for o in _outputs_in(v)]


def test_the_cache_keeps_no_config_alive_and_holds_no_output():
    """derived.of's values must let their config go (else every config a test process loads stays), and
    hold plain values only (an Output belongs to one program run)."""
    cfg = stack_config.load(_raw("b200"), "b200", allow_placeholder_project=True)
    d, gone = derived.of(cfg), weakref.ref(cfg)
    assert d.job is not None and _outputs_in([d, d.job]) == []
    del cfg
    gc.collect()
    assert gone() is None, "the derived values keep their config alive"
    assert d.job is not None  # read before the config went: kept


def test_every_args_class_has_one_shape():
    """Each XArgs answers problems() and no component formats or raises its own "invalid X arguments"."""
    for cls in ARGS:
        assert callable(getattr(cls, "problems", None)), cls
        assert not hasattr(cls, "validate"), f"{cls.__name__}: a second validation shape"
    joins = []
    for path in sorted((ROOT / "components").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.startswith("invalid "):
                joins.append(path.name)
            if isinstance(node, ast.JoinedStr) and any(isinstance(v, ast.Constant) and str(v.value).startswith(
                    "invalid ") for v in node.values[:1]):
                joins.append(path.name)
    assert set(joins) == {"problems.py"}, joins
    # Nor an argument check of its own: a bare ValueError is a traceback in `pulumi up`.
    raises = [path.name for path in sorted((ROOT / "components").glob("*.py"))
              for node in ast.walk(ast.parse(path.read_text()))
              if isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call)
              and getattr(node.exc.func, "id", "") in ("ValueError", "TypeError")]
    assert raises == [], raises


def test_the_helper_raises_every_problem_as_a_run_error():
    args = dataclasses.replace(_ray_args(), gpu_nodes=0, image="verlai/verl")
    assert [p.key for p in args.problems()] == ["gpu_nodes", "image"]
    with pytest.raises(ArgsError) as err:
        require("RayCluster", args)
    # A RunError prints the message alone in `pulumi up`; a ValueError as the components raised before.
    assert isinstance(err.value, pulumi.RunError) and isinstance(err.value, ValueError)
    assert err.value.problems == ["RayClusterArgs.gpu_nodes = 0: must be an integer >= 1",
                                  f"RayClusterArgs.image = 'verlai/verl': {naming.image_ref_problem('verlai/verl')}"]
    assert str(err.value).startswith("invalid RayCluster arguments:\n  - RayClusterArgs.gpu_nodes = 0")


def test_a_secret_arg_is_never_shown():
    args = TrainingStorageArgs(project_id="p-1234", project_number="1", location="us-central1",
                               bucket_prefix="x-data", namespace="verl", hf_token="hf_plain_token_value")
    with pytest.raises(ArgsError) as err:
        require("TrainingStorage", args)
    assert "hf_plain_token_value" not in str(err.value)
    assert "TrainingStorageArgs.hf_token: a plain value" in str(err.value)


def _ray_args() -> RayClusterArgs:
    cfg = stack_config.load(_raw("b200"), "b200", allow_placeholder_project=True)
    from stacks import component_rules

    return component_rules.gate_args(cfg)[0]


# --- compose only wires ---------------------------------------------------------------------------------


def _imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
    return found


def test_compose_calls_no_catalog_or_recipe_function():
    """compose.build reads derived values (stacks.derived) and wires: no catalog or recipe module is in reach."""
    imported = _imports(ROOT / "stacks" / "compose.py")
    assert imported, "the scan found no imports: the test itself is broken"
    computing = sorted(m for m in imported if m.split(".")[0] in ("catalog", "recipe"))
    assert computing == [], computing


def test_no_component_takes_the_stack_config():
    """Components get typed args only: no parameter, field or import of stacks' config."""
    import components

    for path in sorted((ROOT / "components").glob("*.py")):
        assert not any(m.split(".")[0] == "stacks" for m in _imports(path)), path.name
    checked = 0
    for path in sorted((ROOT / "components").glob("*.py")):
        module = __import__(f"components.{path.stem}", fromlist=["_"])
        for _, obj in inspect.getmembers(module):
            if getattr(obj, "__module__", None) != module.__name__:
                continue
            functions = [obj] if inspect.isfunction(obj) else \
                [m for _, m in inspect.getmembers(obj, inspect.isfunction)] if inspect.isclass(obj) else []
            for fn in functions:
                for p in inspect.signature(fn).parameters.values():
                    assert "StackConfig" not in str(p.annotation) and p.name != "cfg", f"{obj.__name__}.{fn.__name__}"
                    checked += 1
            if dataclasses.is_dataclass(obj):
                assert not any("StackConfig" in str(f.type) for f in dataclasses.fields(obj)), obj.__name__
    assert checked > 50 and components.__name__ == "components"
