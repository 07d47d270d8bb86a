"""A short NCCL all-reduce across GPU nodes before the trainer starts: fail fast, with NCCL's own log.

A network NCCL cannot load, or one it loads on fewer NICs than the nodes have, shows only at the
trainer's first cross-node collective, after staging and the model load; a fallback to TCP sockets
shows only as slow steps. This check places one rank on every GPU of `--nodes` nodes (a Ray placement
group, one bundle per node), runs one all-reduce with `NCCL_DEBUG=INFO`, and reads each rank's NCCL log:

- the sum is right on every rank;
- every rank's communicator uses the network the job selects (`Using network <name>`, NCCL
  init.cc; `NET/<name>` in its transport lines), e.g. gIB, not Socket;
- the network lists `--nics` devices on every node (`NET/<name> : Using [0]... [n]...`, or the
  distinct NIC indices in `via NET/<name>/<i>` channel lines);
- the Ray container of every rank holds `--nics` RDMA devices (/dev/infiniband/uverbs*, the device nodes
  a container is given): GKE attaches a pod's RDMA NICs to its first container only (the RayCluster
  puts the Ray container first; components/rdma_attach.py checks the pod spec).

Any miss fails with the matching log lines. Exit codes: 0 pass, 1 a check failed, 2 bad arguments.
The network settings are the job's (its runtime env reaches every actor). Runs in the job's driver
(the head); imports Ray there and torch only inside the ranks, on the GPU nodes.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from dataclasses import dataclass, field

LINE_PREFIX = "[verl-gke]"  # as verl_gke_protocol's lines: the job provider shows them
RDMA_DEVICES = "/dev/infiniband"  # uverbs<N>: one per RDMA device the container was given
LOG_LINES_SHOWN = 40  # per failing rank


# ----------------------------------------------------------------------------- NCCL's log, read


@dataclass
class RankLog:
    """What one rank's NCCL log says about its network."""

    networks: list[str] = field(default_factory=list)  # "Using network X" (one per communicator)
    devices: dict[str, int] = field(default_factory=dict)  # net name -> devices in its "Using [..]" line
    channel_nics: dict[str, set[int]] = field(default_factory=dict)  # net name -> NIC indices in "via NET/x/i"
    version: str = ""
    warnings: list[str] = field(default_factory=list)

    def nics(self, net: str) -> int:
        return max(self.devices.get(net, 0), len(self.channel_nics.get(net, ())))


_USING_NETWORK = re.compile(r"NCCL INFO Using network (\S+)")
_NET_DEVICES = re.compile(r"NCCL INFO NET/(\S+) : Using (.*?)(?:; OOB .*)?$")
_DEVICE = re.compile(r"\[\d+\]")
_VIA = re.compile(r"via NET/([^/\s]+)/(\d+)")
_VERSION = re.compile(r"NCCL INFO NCCL version (\S+)")


def read_log(text: str) -> RankLog:
    found = RankLog()
    for line in text.splitlines():
        if m := _USING_NETWORK.search(line):
            found.networks.append(m.group(1))
        if m := _NET_DEVICES.search(line):
            found.devices[m.group(1)] = max(found.devices.get(m.group(1), 0), len(_DEVICE.findall(m.group(2))))
        for net, nic in _VIA.findall(line):
            found.channel_nics.setdefault(net, set()).add(int(nic))
        if (m := _VERSION.search(line)) and not found.version:
            found.version = m.group(1)
        if "NCCL WARN" in line:
            found.warnings.append(line.strip())
    return found


def relevant_lines(text: str, limit: int = LOG_LINES_SHOWN) -> list[str]:
    """The lines that say which network NCCL took and why: NET, network choice, warnings, versions."""
    keep = [ln for ln in text.splitlines()
            if re.search(r"NET/|NCCL WARN|Using network|NET plugin|NCCL version|NCCL_NET|NCCL_IB", ln)]
    return keep[-limit:]


@dataclass
class RankResult:
    rank: int
    node: str
    ok: bool  # the all-reduce returned and its sum was right
    error: str
    log: str  # the rank's NCCL log (NCCL_DEBUG_FILE)
    rdma_devices: list[str]  # the uverbs device nodes in the rank's container
    seconds: float = 0.0


def problems(results: list[RankResult], *, world: int, net: str, nics: int) -> list[str]:
    """Every way the check failed, one line each (empty: passed)."""
    found: list[str] = []
    if len(results) < world:
        found.append(f"only {len(results)} of {world} ranks answered")
    # NICs NCCL used, per node: a rank's channels may name only its own NIC (NCCL_CROSS_NIC=0, GPU and NIC
    # paired by PCI), so the node's ranks together must cover them, in a "Using [..]" line or their channels.
    listed: dict[str, int] = {}
    used: dict[str, set[int]] = {}
    for r in sorted(results, key=lambda r: r.rank):
        where = f"rank {r.rank} on {r.node}"
        if not r.ok:
            found.append(f"{where}: the all-reduce failed: {r.error}")
        log = read_log(r.log)
        if not log.networks:
            found.append(f"{where}: NCCL logged no 'Using network' line (no communicator came up)")
        elif any(n.lower() != net.lower() for n in log.networks):
            found.append(f"{where}: NCCL used network {sorted(set(log.networks))}, not {net}")
        else:
            for n in set(log.networks):
                listed[r.node] = max(listed.get(r.node, 0), log.devices.get(n, 0))
                used.setdefault(r.node, set()).update(log.channel_nics.get(n, ()))
        if nics and len(r.rdma_devices) < nics:
            found.append(f"{where}: the Ray container holds {len(r.rdma_devices)} of {nics} RDMA devices in "
                         f"{RDMA_DEVICES} ({', '.join(r.rdma_devices) or 'none'}): GKE attaches a pod's RDMA NICs to "
                         "its first container only, which must be the Ray container")
    for node in sorted(listed):
        if nics and (count := max(listed[node], len(used.get(node, ())))) < nics:
            found.append(f"{node}: NET/{net} lists {count} of {nics} NICs over the node's ranks")
    return found


# ----------------------------------------------------------------------------- the ranks, on Ray


def _log_path(rank: int) -> str:
    import tempfile

    return os.path.join(tempfile.gettempdir(), f"verl-gke-nccl-check-{rank}.log")


def _so_far(rank: int) -> dict:
    """A rank's NCCL log and RDMA devices as they are now (for a rank that has not finished)."""
    import socket

    try:
        with open(_log_path(rank), errors="replace") as f:
            log = f.read()
    except OSError:
        log = ""
    devices = sorted(d for d in os.listdir(RDMA_DEVICES) if d.startswith("uverbs")) \
        if os.path.isdir(RDMA_DEVICES) else []
    try:
        import ray

        node = f"{socket.gethostname()} (Ray node {ray.get_runtime_context().get_node_id()[:12]})"
    except Exception:  # noqa: BLE001 - the name alone
        node = socket.gethostname()
    return {"rank": rank, "node": node, "ok": False, "error": "", "log": log, "rdma_devices": devices}


def _rank_main(rank: int, world: int, master: str, port: int, elements: int, timeout_s: float) -> dict:
    """One rank: NCCL's log to a file, one all-reduce, the sum checked. Runs inside a Ray actor."""
    import datetime

    os.environ.update({"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,NET", "NCCL_DEBUG_FILE": _log_path(rank)})
    started, ok, error = time.monotonic(), False, ""
    try:
        import torch
        import torch.distributed as dist

        dist.init_process_group("nccl", init_method=f"tcp://{master}:{port}", rank=rank, world_size=world,
                                timeout=datetime.timedelta(seconds=timeout_s),
                                device_id=torch.device("cuda:0"))
        try:
            tensor = torch.full((elements,), float(rank + 1), device="cuda")
            dist.all_reduce(tensor)
            torch.cuda.synchronize()
            want = world * (world + 1) / 2
            ok = bool(torch.all(tensor == want).item())
            error = "" if ok else f"sum {tensor[0].item():g}, want {want:g}"
        finally:
            dist.destroy_process_group()
    except Exception as err:  # noqa: BLE001 - reported with the log, never raised past the check
        error = f"{type(err).__name__}: {str(err)[:600]}"
    return {**_so_far(rank), "ok": ok, "error": error, "seconds": time.monotonic() - started}


def run_ranks(nodes: int, gpus_per_node: int, elements: int, timeout_s: float) -> list[RankResult]:
    """Place one rank per GPU on `nodes` distinct nodes and run them; what each returned in time."""
    import ray
    from ray.util.placement_group import placement_group, remove_placement_group
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    ray.init(address=os.environ.get("RAY_ADDRESS", "auto"), log_to_driver=False)
    deadline = time.monotonic() + timeout_s
    group = placement_group([{"GPU": gpus_per_node}] * nodes, strategy="STRICT_SPREAD")
    try:
        if not group.wait(timeout_seconds=max(1, deadline - time.monotonic())):
            raise TimeoutError(f"Ray could not place {gpus_per_node} GPUs on each of {nodes} nodes "
                               f"within {timeout_s:g}s")

        # Two calls at a time: a rank stuck in NCCL still hands over its log.
        @ray.remote(num_cpus=0, num_gpus=1, max_concurrency=2)
        class Rank:
            def address(self) -> str:
                import socket

                with socket.socket() as s:
                    s.bind(("", 0))
                    return f"{ray.util.get_node_ip_address()}:{s.getsockname()[1]}"

            def run(self, *args) -> dict:
                return _rank_main(*args)

            def so_far(self, rank: int) -> dict:
                return _so_far(rank)

        ranks = [Rank.options(scheduling_strategy=PlacementGroupSchedulingStrategy(
            group, placement_group_bundle_index=i // gpus_per_node)).remote() for i in range(nodes * gpus_per_node)]
        master, port = ray.get(ranks[0].address.remote(), timeout=max(1, deadline - time.monotonic())).rsplit(":", 1)
        left = max(1.0, deadline - time.monotonic())
        refs = [r.run.remote(i, len(ranks), master, int(port), elements, left) for i, r in enumerate(ranks)]
        done, _ = ray.wait(refs, num_returns=len(refs), timeout=left + 30)
        results = []
        for i, ref in enumerate(refs):
            try:
                if ref in done:
                    results.append(RankResult(**ray.get(ref)))
                else:  # stuck past the deadline (a peer that never connects): its log so far
                    found = ray.get(ranks[i].so_far.remote(i), timeout=30)
                    results.append(RankResult(**{**found, "error": f"no answer within {timeout_s:g}s"}))
            except Exception as err:  # noqa: BLE001 - a rank whose actor died: reported, not raised
                results.append(RankResult(rank=i, node="?", ok=False, error=str(err)[:600], log="", rdma_devices=[]))
        for r in ranks:
            ray.kill(r)
        return results
    finally:
        remove_placement_group(group)  # the GPUs go back to the trainer


# ----------------------------------------------------------------------------- the command

BOUND_S = 1800  # the check keeps its own --timeout-s; this bounds one that hangs past it


def in_subprocess(arguments: str) -> int:
    """This script with `arguments` in a process of its own (the run supervisor's hook before each trainer
    start): its exit code, 124 past BOUND_S. Its output goes to the job's log."""
    import shlex
    import subprocess

    try:
        return subprocess.run([sys.executable, os.path.abspath(__file__), *shlex.split(arguments)],
                              timeout=BOUND_S).returncode
    except subprocess.TimeoutExpired:
        say(f"NCCL check FAILED: it did not end within {BOUND_S}s")
        return 124



def passed_line(net: str, nics: int, versions: str) -> str:
    """What a passing check says (the README quotes it)."""
    return f"NCCL check passed: NET/{net} with {nics} NICs on every node, NCCL {versions}"


def say(message: str) -> None:
    print(f"{LINE_PREFIX} {message}", flush=True)


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--nodes", type=int, default=2, help="GPU nodes to span (the check needs two to cross a NIC)")
    p.add_argument("--gpus-per-node", type=int, required=True)
    p.add_argument("--nics", type=int, required=True, help="RDMA NICs each node's network must list")
    p.add_argument("--net", default=os.environ.get("NCCL_NET", ""),
                   help="the network NCCL must use (default: the job's NCCL_NET)")
    p.add_argument("--megabytes", type=int, default=256, help="size of the all-reduced tensor")
    p.add_argument("--timeout-s", type=float, default=600.0)
    args = p.parse_args(argv)
    if args.nodes < 2 or args.gpus_per_node < 1 or args.nics < 1 or args.megabytes < 1 or args.timeout_s <= 0:
        p.error("--nodes >= 2, --gpus-per-node, --nics and --megabytes >= 1, --timeout-s > 0")
    if not args.net:
        p.error("--net (or NCCL_NET in the job's env) names the network the check expects")
    return args


def main(argv: list[str]) -> int:
    args = parse(argv)
    world = args.nodes * args.gpus_per_node
    say(f"NCCL check: one all-reduce of {args.megabytes} MB over {world} GPUs on {args.nodes} nodes, "
        f"expecting NET/{args.net} on {args.nics} NICs per node (at most {args.timeout_s:g}s)")
    try:
        results = run_ranks(args.nodes, args.gpus_per_node, args.megabytes * 2**20 // 4, args.timeout_s)
    except Exception as err:  # noqa: BLE001 - no ranks at all: the check fails, it does not crash
        say(f"NCCL check FAILED: {type(err).__name__}: {err}")
        return 1
    found = problems(results, world=world, net=args.net, nics=args.nics)
    versions = sorted({v for r in results if (v := read_log(r.log).version)})
    if not found:
        slowest = max((r.seconds for r in results), default=0.0)
        say(f"{passed_line(args.net, args.nics, ', '.join(versions))}, {slowest:.0f}s")
        return 0
    for line in found:
        say(f"NCCL check FAILED: {line}")
    failing = {int(m.group(1)) for line in found if (m := re.match(r"rank (\d+) ", line))}
    for r in sorted(results, key=lambda r: r.rank):
        if r.rank in failing or not failing:
            print(f"--- NCCL log of rank {r.rank} on {r.node}:", flush=True)
            print("\n".join(relevant_lines(r.log)) or "(empty)", flush=True)
    print(json.dumps({"nccl_check": "failed", "problems": found}), flush=True)
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
