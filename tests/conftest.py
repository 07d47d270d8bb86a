"""How the suite is split across pytest-xdist workers (pyproject's addopts: `-n 3 --dist loadgroup`).

Much of the suite's time is spent waiting on real Ray heads (a node start, a job, a deadline), not on
the CPU, so three workers overlap well even on two cores. Measured on this 2-core machine (pytest's
own summary, whole-machine CPU from /proc/stat): -n 3 296 s and 505 CPU-seconds, -n 4 305 s and 586;
after the gc.freeze below, back to back, -n 3 206 s and -n 4 200 s. A fourth worker adds contention
(every Ray process lives longer) and its own imports, and little or no speed.
The work units (the scheduler below):

- a module is one unit, run on one worker in file order: its module-scoped fixtures (a Ray head, a
  composed stack) are set up once, and a test may read what an earlier one left (test_gate_sweep);
- a module in SPLIT is one unit per test: its tests are long and independent (the plan tool against
  hostile input, the money checks), so they run side by side. A module of tests on Ray heads (the
  rehearsal) is not split: a head costs ~8 CPU-seconds and 5-10 s to start here, more than running its
  tests one after another costs in time;
- the modules of one entry in SHARED_HEADS are one unit: they share one Ray head.

Units are handed out longest first (UNITS, measured with `pytest --durations=0` on a loaded 2-core
machine), then in file order. xdist queues a second unit behind each worker's first (a worker needs
the next test to run the current one), so each of the first long units gets a short module behind it
rather than the next long one. The order is a speed hint only; no test depends on it.

xdist's own `xdist_group` mark is not used: under pytest 9.2 a node keeps its id in `_id`, and the
`_nodeid` that xdist 3.8 rewrites to carry the group is ignored.
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
from typing import TYPE_CHECKING

import pytest

from tests.session_files import SHARED_ENV, SHARED_PREFIX

if TYPE_CHECKING:
    from tools.local_ray import RayNode

# Long modules of independent tests with no module-scoped fixture or cache (the slowest compose a stack per
# test): one unit per test. Any other module is one unit.
SPLIT = {
    "test_hostile_input.py",
    "test_money.py",
    "test_stage_task.py",
    "test_stage_data.py",
    "test_gke_version.py",
    "test_cli_loader.py",
}

# Modules whose tests share one Ray head (the fixture named here, with its GPUs declared on the head):
# one unit, so one worker runs them one after another on one head (a head costs ~8 CPU-seconds and 5-10 s to
# start here). Isolation between them is not what they test: each module stops the jobs it left running
# (`_shared_head`) and the worker nodes it started, and a test that counts GPUs first
# waits for the GPU workers of earlier tests to leave (or counts relative to what it found). A module's fixed
# submission ids must not be another's: the job provider adopts a job of the same id.
SHARED_HEADS = {
    "zero_gpu_head": ({"test_gpu_release.py", "test_supervise.py", "test_watch.py"}, 0),  # a KubeRay head
    "two_gpu_head": ({"test_ray_job_provider.py", "test_ray_presence.py"}, 2),  # GPUs there from the start
}

# The longest units, longest first: a node id prefix (a test of a SPLIT module) or a module. The rehearsal is
# one unit: its tests share its Ray nodes, and more than two rehearsals at once on two cores made `ray start`
# itself time out (Ray's own node-info deadline, seen at -n 8).
UNITS = [
    "tests/test_k8s_tier.py",  # a control plane and a `pulumi up` per shipped stack
    "tests/test_ray_job_provider.py",  # its unit: two_gpu_head
    "tests/test_rehearsal.py",
    "tests/test_supervise.py",  # its unit: zero_gpu_head
    "tests/test_plan.py",
    "tests/test_admission.py",
]


def unit(nodeid: str) -> str:
    """The work unit of a test: its module, the modules on its shared head, or the test itself (SPLIT)."""
    module = nodeid.split("::", 1)[0]
    head = _shared_head_of(module)
    if head:
        return f"tests/: the modules on the shared Ray head {head}"
    return nodeid if os.path.basename(module) in SPLIT else module


def _shared_head_of(path: str) -> str | None:
    """The name of the shared head (SHARED_HEADS) the tests in module `path` use, if any."""
    name = os.path.basename(path)
    return next((head for head, (modules, _) in SHARED_HEADS.items() if name in modules), None)


@pytest.hookimpl(optionalhook=True)  # an xdist hook: pytest refuses it as unknown when xdist is not loaded
def pytest_xdist_make_scheduler(config: pytest.Config, log):
    if config.getvalue("dist") != "loadgroup":
        return None  # another --dist asked for on the command line
    from xdist.scheduler import LoadGroupScheduling

    class ModuleUnits(LoadGroupScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return unit(nodeid)

    return ModuleUnits(config, log)


def _rank(nodeid: str) -> int:
    return next((r for r, prefix in enumerate(UNITS) if nodeid.startswith(prefix)), len(UNITS))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    workers = int(getattr(config, "workerinput", {}).get("workercount", 0))
    if not workers:
        return  # one process: pytest's own order
    units: dict[str, list[pytest.Item]] = {}
    for item in items:
        units.setdefault(unit(item.nodeid), []).append(item)
    rank = {id(u): min(_rank(i.nodeid) for i in u) for u in units.values()}  # a unit ranks as its longest test
    ordered = sorted(units.values(), key=lambda u: rank[id(u)])  # stable: file order among equals
    long = [u for u in ordered if rank[id(u)] < len(UNITS)]
    short = sorted((u for u in ordered if rank[id(u)] == len(UNITS)), key=len)[:workers]
    first = [*long[:workers], *short]
    rest = [u for u in ordered if all(u is not f for f in first)]
    items[:] = [i for u in [*first, *rest] for i in u]


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "cli: runs the real Pulumi CLI (tools/pulumi-cli/build.sh builds it)")
    config.addinivalue_line("markers", "k8s: runs a real Kubernetes control plane, KubeRay and kwok "
                                       "(tools/k8s/build.sh builds them)")
    # Every composition turns asyncio's logger off, as Pulumi's Python host does (tools.mocking.run): off from
    # the start, so what a test sees of asyncio's log does not depend on whether a composition ran before it.
    logging.getLogger("asyncio").setLevel(logging.CRITICAL)
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


_running_heads: dict[str, RayNode] = {}  # name in SHARED_HEADS -> its started node


def _shared_head(name: str):
    """A module's view of the running head `name`, started on first use as KubeRay runs it: in a pod, with the
    image's environment. The jobs the module left running are stopped when it ends (each module stops the
    worker nodes it started itself). Module-scoped: a head that failed to start fails that module, and the
    next one tries again."""
    from tests.ray_fixtures import image_env, stop_running_jobs
    from tools.local_ray import RayNode

    if name not in _running_heads:
        _running_heads[name] = RayNode(gpus=SHARED_HEADS[name][1], env=image_env()).start(timeout=240)
    head = _running_heads[name]
    yield head
    stop_running_jobs(head.address)


@pytest.fixture
def bogus_ray_address(monkeypatch):
    """RAY_ADDRESS and RAY_API_SERVER_ADDRESS at an address nothing serves, for the modules that mark themselves
    with it: a job provider call that read them instead of its inputs would fail, not find a local head."""
    from tests.ray_fixtures import point_ray_env_nowhere

    point_ray_env_nowhere(monkeypatch)


@pytest.fixture(scope="module")
def zero_gpu_head():
    """The Ray head of the zero_gpu_head modules (SHARED_HEADS)."""
    yield from _shared_head("zero_gpu_head")


@pytest.fixture(scope="module")
def two_gpu_head():
    """The Ray head of the two_gpu_head modules (SHARED_HEADS)."""
    yield from _shared_head("two_gpu_head")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None):
    """After the fixtures' teardown (a module's jobs stopped), stop each shared head the next test does not
    use: its group's modules are one unit under xdist, so the head stops after its group's last test instead
    of idling (~4 CPU-seconds a minute) to the end of the worker's session."""
    try:
        return (yield)
    finally:
        keep = _shared_head_of(str(nextitem.path)) if nextitem is not None else None
        for name in [n for n in _running_heads if n != keep]:
            _running_heads.pop(name).stop()


def pytest_sessionfinish(session: pytest.Session) -> None:
    for name in list(_running_heads):  # an interrupted run
        _running_heads.pop(name).stop()


_modules_at_freeze = 0


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
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
    try:
        return (yield)
    finally:
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
