"""Issue 43 items 9 and 11: the job's NCCL check (components/scripts/nccl_check.py) before the trainer starts.

What NCCL logs is read from real NCCL output: tests/data/nccl/*.log are NCCL 2.28.9's own INFO logs
(PyTorch 2.11, one rank on one H200 with no RDMA device, captured on this project's device machine on
2026-12-04 with NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET,ENV): the default run (IB has no device, NCCL
falls back to Socket), NCCL_NET=gIB without the plugin, and NCCL_NET_PLUGIN at a missing internal
library. A gIB run on A4 nodes is not available here: its lines are written in the formats those logs and
NCCL's IB transport use (`NET/<name> : Using [i]dev ...; OOB ...`, `via NET/<name>/<nic>`).

The check itself runs on a real local Ray cluster: a head without GPUs, as KubeRay's, and two worker nodes;
this machine has no torch, so every rank's all-reduce fails the way a broken NCCL would, with its log.
"""

from __future__ import annotations

import json
import re
import shlex
import sys
import uuid

import pytest
import requests

from components.ray_client import TERMINAL
from components.scripts import nccl_check
from components.scripts.nccl_check import RankResult, problems, read_log, relevant_lines
from tests import docs
from tests.ray_fixtures import REPO, RayNode, gpus_on, job_logs, wait_for, wait_for_no_gpu_workers, wait_status

DATA = REPO / "tests" / "data" / "nccl"
SCRIPT = REPO / "components" / "scripts" / "nccl_check.py"
SUPERVISE = REPO / "components" / "scripts" / "supervise.py"
TRAINER = REPO / "tests" / "standins" / "trainer.py"
UVERBS = [f"uverbs{i}" for i in range(8)]


def _log(name: str) -> str:
    return (DATA / name).read_text()


def gib_log(nics: int = 8, host: str = "gke-a4-0") -> str:
    """A gIB rank's lines, in NCCL's formats (see the module docstring)."""
    devices = " ".join(f"[{i}]mlx5_{i}:1/RoCE" for i in range(nics))
    lines = [f"{host}:77:77 [0] NCCL INFO NCCL version 2.27.5+cuda12.8",
             f"{host}:77:77 [0] NCCL INFO NET/gIB : Using {devices} [RO]; OOB eth0:10.0.0.2<0>",
             f"{host}:77:77 [0] NCCL INFO Assigned NET plugin gIB to comm",
             f"{host}:77:77 [0] NCCL INFO Using network gIB"]
    lines += [f"{host}:77:90 [0] NCCL INFO Channel {c:02d}/0 : 0[0] -> 8[0] [send] via NET/gIB/{c % nics}/GDRDMA"
              for c in range(16)]
    return "\n".join(lines) + "\n"


def rank(log: str, devices: list[str] | None = None, ok: bool = True, error: str = "") -> RankResult:
    return RankResult(rank=0, node="gke-a4-0", ok=ok, error=error, log=log,
                      rdma_devices=UVERBS if devices is None else devices)


# ----------------------------------------------------------------------------- what NCCL's log says


def test_the_socket_fallback_real_log_is_read_as_socket_with_its_one_interface():
    log = read_log(_log("one_rank_socket_fallback.log"))
    assert log.networks == ["Socket"] and log.version == "2.28.9+cuda13.0"
    assert log.devices == {"IB": 0, "Socket": 1}


def test_a_run_that_fell_back_to_sockets_fails_the_check_naming_the_network():
    (found,) = problems([rank(_log("one_rank_socket_fallback.log"))], world=1, net="gIB", nics=8)
    assert found == "rank 0 on gke-a4-0: NCCL used network ['Socket'], not gIB"


def test_nccl_net_gib_without_the_plugin_fails_at_init_and_the_check_shows_why():
    text = _log("net_gib_without_plugin.log")
    found = problems([rank(text, ok=False, error="DistBackendError: invalid usage")], world=1, net="gIB", nics=8)
    assert found == ["rank 0 on gke-a4-0: the all-reduce failed: DistBackendError: invalid usage",
                     "rank 0 on gke-a4-0: NCCL logged no 'Using network' line (no communicator came up)"]
    shown = relevant_lines(text)
    assert any("NCCL WARN Failed to initialize any NET plugin" in ln for ln in shown)
    assert any("NET/Plugin: Could not find: libnccl-net.so" in ln for ln in shown)


def test_a_plugin_path_that_is_not_there_shows_in_the_lines_kept():
    shown = relevant_lines(_log("internal_plugin_missing.log"))
    assert any("NCCL_NET_PLUGIN set by environment to /usr/local/gib/lib64/libnccl-net_internal.so" in ln
               for ln in shown)


def test_gib_on_every_nic_of_every_rank_passes():
    assert problems([rank(gib_log())], world=1, net="gIB", nics=8) == []
    assert read_log(gib_log()).channel_nics == {"gIB": set(range(8))}


def test_gib_on_fewer_nics_than_the_node_has_fails():
    (found,) = problems([rank(gib_log(nics=4))], world=1, net="gIB", nics=8)
    assert found == "gke-a4-0: NET/gIB lists 4 of 8 NICs over the node's ranks"


def test_a_nodes_ranks_each_on_their_own_nic_cover_the_node_without_a_using_line():
    """Each rank's channels name only the NIC paired with its GPU; gIB may print no "Using [..]" line."""
    def own_nic(i: int) -> str:
        return "\n".join(re.sub(r"NET/gIB/\d+/", f"NET/gIB/{i}/", ln) for ln in gib_log().splitlines()
                         if " : Using " not in ln)
    ranks = [RankResult(rank=i, node="gke-a4-0", ok=True, error="", log=own_nic(i), rdma_devices=UVERBS)
             for i in range(8)]
    assert problems(ranks, world=8, net="gIB", nics=8) == []
    assert problems(ranks[:3], world=3, net="gIB", nics=8) == [
        "gke-a4-0: NET/gIB lists 3 of 8 NICs over the node's ranks"]


def test_a_ray_container_without_the_rdma_devices_fails_naming_the_first_container_rule():
    (found,) = problems([rank(gib_log(), devices=[])], world=1, net="gIB", nics=8)
    assert "holds 0 of 8 RDMA devices in /dev/infiniband" in found and "first container only" in found


def test_a_rank_that_never_answered_counts_as_missing():
    found = problems([rank(gib_log())], world=16, net="gIB", nics=8)
    assert found == ["only 1 of 16 ranks answered"]


@pytest.mark.parametrize("argv", [["--nodes", "1", "--gpus-per-node", "8", "--nics", "8", "--net", "gIB"],
                                  ["--gpus-per-node", "8", "--nics", "0", "--net", "gIB"],
                                  ["--gpus-per-node", "8", "--nics", "8"]])
def test_bad_arguments_exit_2_before_touching_ray(argv, monkeypatch):
    monkeypatch.delenv("NCCL_NET", raising=False)
    with pytest.raises(SystemExit) as err:
        nccl_check.parse(argv)
    assert err.value.code == 2


def test_the_readme_quotes_what_a_passing_and_a_failing_check_print():
    readme = docs.text()
    assert f"`[verl-gke] {nccl_check.passed_line('gIB', 8, '<version>')}`" in readme
    assert "`[verl-gke] NCCL check FAILED: ...`" in readme


# ----------------------------------------------------------------------------- on a real Ray cluster


@pytest.fixture(scope="module")
def head(zero_gpu_head):
    return zero_gpu_head


@pytest.fixture(scope="module")
def two_gpu_nodes(head):
    """Two worker nodes of one GPU each: the check's ranks must land on both."""
    wait_for_no_gpu_workers(head)
    nodes = []
    try:
        for _ in range(2):
            nodes.append(RayNode(gpus=1, cpus=1, join=head).start(timeout=240))
        wait_for(lambda: gpus_on(head.address) == head.gpus + 2, 240, "two GPU worker nodes")
        yield nodes
    finally:
        for node in nodes:
            node.stop()


def _run(head: RayNode, entrypoint: str, timeout: float = 600) -> tuple[str, str]:
    job_id = f"ncclcheck-{uuid.uuid4().hex[:8]}"
    resp = requests.post(f"{head.address}/api/jobs/", json={"entrypoint": entrypoint, "submission_id": job_id,
                                                            "runtime_env": {"env_vars": {"NCCL_NET": "gIB"}}},
                         timeout=30)
    resp.raise_for_status()
    return wait_status(head.address, job_id, TERMINAL, timeout=timeout), job_logs(head.address, job_id)


CHECK_ARGS = "--nodes 2 --gpus-per-node 1 --nics 8 --timeout-s 180"


def test_the_check_spans_two_nodes_and_fails_with_every_ranks_report(head, two_gpu_nodes):
    status, text = _run(head, f"{shlex.quote(sys.executable)} {SCRIPT} {CHECK_ARGS}")
    assert status == "FAILED", text[-3000:]
    assert "NCCL check: one all-reduce of 256 MB over 2 GPUs on 2 nodes, expecting NET/gIB" in text
    # No torch on this machine: each rank's all-reduce fails as a broken NCCL would, and says so.
    said = [ln for ln in text.splitlines() if ln.startswith("[verl-gke] NCCL check FAILED: ")]
    failed = [ln for ln in said if "the all-reduce failed: ModuleNotFoundError" in ln]
    assert len(failed) == 2, text[-3000:]
    ray_nodes = {ln.split("(Ray node ")[1].split(")")[0] for ln in failed}
    assert len(ray_nodes) == 2, f"both ranks ran on one node: {failed}"
    assert sum("holds 0 of 8 RDMA devices" in ln for ln in said) == 2
    report = json.loads(next(ln for ln in text.splitlines() if ln.startswith('{"nccl_check"')))
    assert report["nccl_check"] == "failed" and len(report["problems"]) >= 4


def test_the_check_fails_fast_when_two_nodes_cannot_be_had(head, two_gpu_nodes):
    status, text = _run(head, f"{shlex.quote(sys.executable)} {SCRIPT} --nodes 3 --gpus-per-node 1 --nics 8 "
                              "--timeout-s 20")
    assert status == "FAILED", text[-3000:]
    assert "NCCL check FAILED: TimeoutError: Ray could not place 1 GPUs on each of 3 nodes within 20s" in text


def test_the_supervisor_fails_before_the_trainer_when_the_check_fails(head, two_gpu_nodes, tmp_path):
    ckpt = tmp_path / "ckpt"
    sup = [sys.executable, str(SUPERVISE), "--run-id", "nccl-run", "--state", str(ckpt / "verl-gke-run.json"),
           "--max-recoveries", "3", "--expected-gpus", "2", "--dashboard", head.address,
           "--checkpoint-dir", str(ckpt), "--nccl-check", CHECK_ARGS]
    trainer = [sys.executable, str(TRAINER), "--ckpt", str(ckpt), "--gpus", "2", "--steps", "1"]
    status, text = _run(head, shlex.join([*sup, "--", *trainer]))
    assert status == "FAILED", text[-3000:]
    assert "NCCL check FAILED" in text
    assert "run nccl-run attempt 1: FAILED before training, the NCCL check failed" in text
    assert "starting the trainer" not in text and not (ckpt / "steps.log").exists()
    state = json.loads((ckpt / "verl-gke-run.json").read_text())
    assert state["attempts"]["1"]["outcome"] == "FAILED" and "NCCL check" in state["attempts"]["1"]["reason"]
