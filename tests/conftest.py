"""Test tiers, and what the suite's tests share.

Every test is in exactly one tier, a pytest marker: `pytest -m fast` is the inner loop, `.ci/run` runs them all.
A test is marked here from what it uses, so a new one lands in its tier without anyone marking it:
- `ray` when it requests a fixture that starts a real local Ray head (RAY_FIXTURES, directly or through a
  fixture of its own); a test that starts Ray nodes itself, or through a fixture of its module (the
  rehearsal's), carries `@pytest.mark.ray`;
- `cli`, `k8s` as the test or its module marks itself (the real Pulumi CLI, a real Kubernetes API server);
- `fast` otherwise: Pulumi mocks and plain Python.
Two tiers on one test is an error at collection. A test that starts a real Ray node (tools.local_ray) in the
`fast` tier (the `cli` and `k8s` tiers drive a Ray head too), or runs the Pulumi CLI (tests/pulumi_cli.py)
outside `cli` and `k8s`, fails and says which marker it needs.

pytest-xdist runs whole modules on its workers (pyproject's `--dist loadfile`): a module's fixtures (a Ray
head, a composed stack) are set up once.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import pytest

from tests.session_files import SHARED_ENV, SHARED_PREFIX

TIERS = {
    "fast": "Pulumi mocks and plain Python only (the default inner loop: pytest -m fast)",
    "ray": "starts real local Ray nodes (tools/local_ray.py)",
    "cli": "runs the real Pulumi CLI (tools/pulumi-cli/build.sh builds it)",
    "k8s": "runs a real Kubernetes control plane",
}
# Fixtures that start a real Ray head: a test requesting one, through any fixture of its own, is in the ray tier.
RAY_FIXTURES = frozenset({"zero_gpu_head", "two_gpu_head"})


def tier_of(item: pytest.Item) -> str:
    """The one tier of a test: its own tier markers (a test's, its class's or its module's), else `ray` for
    a Ray fixture, else `fast`. Raises UsageError for a test in two."""
    marked = {m.name for m in item.iter_markers() if m.name in TIERS}
    if RAY_FIXTURES & set(getattr(item, "fixturenames", ())):
        marked.add("ray")
    if len(marked) > 1:
        raise pytest.UsageError(f"{item.nodeid} is in the tiers {sorted(marked)}: one per test (tests/conftest.py)")
    return marked.pop() if marked else "fast"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        tier = tier_of(item)
        if item.get_closest_marker(tier) is None:
            item.add_marker(tier)


_running: list[pytest.Item] = []  # the test whose setup, call or teardown runs now


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    _running.append(item)
    try:
        return (yield)
    finally:
        _running.pop()
        _freeze_after_imports()


def _outside_tier(tier: str, what: str, also: tuple[str, ...] = ()) -> None:
    """Fail the running test (its setup, call or teardown) unless it is in `tier` (or one of `also`)."""
    if _running and all(_running[-1].get_closest_marker(t) is None for t in (tier, *also)):
        pytest.fail(f"{_running[-1].nodeid} {what} outside the `{tier}` tier: use a fixture of that tier or mark "
                    f"the test @pytest.mark.{tier} (tests/conftest.py)", pytrace=False)


def _guard_real_systems() -> None:
    """A real Ray node never in the fast tier (a test that swaps tools.local_ray.RAY for a stand-in starts
    none); the Pulumi CLI only in the cli tier."""
    from tests import pulumi_cli
    from tools import local_ray

    real_ray, start = local_ray.RAY, local_ray.RayNode.start
    workspace = pulumi_cli.Workspace.__init__

    def guarded_start(self, *args, **kwargs):
        if local_ray.RAY == real_ray:
            # The real CLI and Kubernetes tiers drive a real Ray head too (the job provider against it).
            _outside_tier("ray", "started a real Ray node", also=("cli", "k8s"))
        return start(self, *args, **kwargs)

    def guarded_workspace(self, *args, **kwargs):
        _outside_tier("cli", "made a Pulumi CLI workspace", also=("k8s",))  # the k8s tier deploys with `pulumi up`
        workspace(self, *args, **kwargs)

    local_ray.RayNode.start = guarded_start
    pulumi_cli.Workspace.__init__ = guarded_workspace


def pytest_configure(config: pytest.Config) -> None:
    for tier, what in TIERS.items():
        config.addinivalue_line("markers", f"{tier}: {what}")
    # Every composition turns asyncio's logger off, as Pulumi's Python host does (tools.mocking.run): off from
    # the start, so what a test sees of asyncio's log does not depend on whether a composition ran before it.
    logging.getLogger("asyncio").setLevel(logging.CRITICAL)
    _guard_real_systems()
    if not hasattr(config, "workerinput"):
        # The session's folder of compositions (tests/stack_helpers.py): made before the xdist workers start, so
        # they inherit its name and each shipped plan or shared config is composed once in the whole session.
        # Always a new one: a value from the environment may name another checkout's, or a removed folder. A
        # session killed outright (a CI timeout) left its folder behind: those older than a day go now.
        for old in Path(tempfile.gettempdir()).glob(f"{SHARED_PREFIX}*"):
            with contextlib.suppress(OSError):
                if time.time() - old.stat().st_mtime > 86400:
                    shutil.rmtree(old, ignore_errors=True)
        before, folder = os.environ.get(SHARED_ENV), tempfile.mkdtemp(prefix=SHARED_PREFIX)
        os.environ[SHARED_ENV] = folder

        def cleanup() -> None:
            shutil.rmtree(folder, ignore_errors=True)
            if before is None:
                os.environ.pop(SHARED_ENV, None)
            else:
                os.environ[SHARED_ENV] = before

        config.add_cleanup(cleanup)


@pytest.fixture
def bogus_ray_address(monkeypatch):
    """RAY_ADDRESS and RAY_API_SERVER_ADDRESS at an address nothing serves, for the modules that mark themselves
    with it: a job provider call that read them instead of its inputs would fail, not find a local head."""
    from tests.ray_fixtures import point_ray_env_nowhere

    point_ray_env_nowhere(monkeypatch)


def _ray_head(gpus: int):
    """A real Ray head for one module, started as KubeRay runs it (in a pod, with the image's environment),
    stopped with the module after the jobs it left running."""
    from tests.ray_fixtures import image_env, stop_running_jobs
    from tools.local_ray import RayNode

    head = RayNode(gpus=gpus, env=image_env()).start(timeout=240)
    try:
        yield head
        stop_running_jobs(head.address)
    finally:
        head.stop()


@pytest.fixture(scope="module")
def zero_gpu_head():
    """A head without GPUs, as KubeRay's head pod: the GPUs come with worker nodes a test starts."""
    yield from _ray_head(0)


@pytest.fixture(scope="module")
def two_gpu_head():
    """A head that declares two GPUs from the start."""
    yield from _ray_head(2)


_modules_at_freeze = 0


def _freeze_after_imports() -> None:
    """After a test that imported modules, collect once and move what is left out of the collector's reach.

    A worker holds ~500,000 objects once the cloud SDKs are imported, nearly all of them module-level and
    alive to the end, and every full collection walks them all: measured, 113 full collections a worker
    cost 36-51 CPU-seconds, half of the workers' own CPU. gc.freeze() keeps what is alive now out of
    later collections (reference counting still frees it); collecting first means only live objects are
    frozen, and doing it after the whole protocol means the test's fixture values are released first.
    pulumi_gcp imports its modules lazily, so this runs after most tests; each collection walks only
    what was made since the last freeze. What is alive at a freeze and turns into cyclic garbage later
    (a module-scoped fixture's value) is never collected: a few dozen objects, measured."""
    global _modules_at_freeze
    if len(sys.modules) != _modules_at_freeze:
        gc.collect()
        gc.freeze()
        _modules_at_freeze = len(sys.modules)


@pytest.fixture(autouse=True)
def _real_cli_tier(request: pytest.FixtureRequest) -> None:
    """The `cli` tier needs the built CLI: a local run without it skips (pytest's summary says why); under CI
    (.ci/run builds it first) its absence is a failure, never a skip."""
    if request.node.get_closest_marker("cli") is None:
        return
    from tests import pulumi_cli

    if not pulumi_cli.available():
        if os.environ.get("CI"):
            pytest.fail(pulumi_cli.MISSING)
        pytest.skip(pulumi_cli.MISSING)


@pytest.fixture(autouse=True)
def _real_k8s_tier(request: pytest.FixtureRequest) -> None:
    """The `k8s` tier needs the built control plane and etcd: a local run without them skips (pytest's summary
    says why); under CI (.ci/run builds and installs them first) their absence is a failure, never a skip."""
    if request.node.get_closest_marker("k8s") is None:
        return
    from tests import k8s_cluster

    why = k8s_cluster.missing()
    if why:
        if os.environ.get("CI"):
            pytest.fail(why)
        pytest.skip(why)
