"""How quickly the Ray job provider submits, side by side with what a person would do by hand.

    venv/bin/python bench/job_submit.py [--runs 5] [--join-runs 3]

Starts its own local Ray head (CPU only, GPUs declared) and measures, as medians:
 (a) GPUs appear -> job submitted: `create` waits for 8 GPUs; a worker with 8 GPUs joins. "Appear" is
     when an independent 50 ms poller first sees them in Ray's state API; "submitted" is the job's
     start_time as Ray records it, and when `create` returned.
 (b) one submission on a ready head: the provider's `create` in-process and in a fresh interpreter
     (imports included, what `pulumi up`'s provider process pays) vs `ray job submit --no-wait`.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from components.ray_job import RayJobProvider  # noqa: E402
from tools.local_ray import RAY, RayNode, gpus_on, ray_env  # noqa: E402


def new_id(tag: str) -> str:
    return f"bench-{tag}-{uuid.uuid4().hex[:8]}"


def job_props(address: str, sid: str, expected_gpus: int = 0) -> dict:
    return {"submission_id": sid, "entrypoint": "echo hi", "address": address,
            "expected_gpus": expected_gpus, "ready_timeout_s": 300}


def job_start(address: str, sid: str) -> float:
    import requests

    return requests.get(f"{address}/api/jobs/{sid}", timeout=10).json()["start_time"] / 1000


def gpus_to_submission(head: RayNode, workers: list[RayNode]) -> tuple[float, float]:
    """(GPUs seen -> Ray's submit time, GPUs seen -> create returned), seconds, wall clock."""
    want = int(gpus_on(head.address)) + 8
    sid = new_id("join")
    seen: dict[str, float] = {}

    def watch() -> None:
        while gpus_on(head.address) < want:
            time.sleep(0.05)
        seen["gpus"] = time.time()

    def create() -> None:
        RayJobProvider().create(job_props(head.address, sid, want))
        seen["returned"] = time.time()

    threads = [threading.Thread(target=watch), threading.Thread(target=create)]
    for t in threads:
        t.start()
    time.sleep(1.0)  # let create settle into its backoff, as it would while GPU nodes provision
    workers.append(RayNode(gpus=8, cpus=0, join=head).start())
    for t in threads:
        t.join()
    return job_start(head.address, sid) - seen["gpus"], seen["returned"] - seen["gpus"]


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def provider_in_process(address: str) -> None:
    RayJobProvider().create(job_props(address, new_id("inproc")))


def provider_fresh(address: str) -> None:
    code = ("import json, sys; from components.ray_job import RayJobProvider; "
            "RayJobProvider().create(json.loads(sys.argv[1]))")
    props = json.dumps(job_props(address, new_id("fresh")))
    subprocess.run([sys.executable, "-c", code, props], cwd=ROOT, check=True, env=ray_env())


def cli(address: str) -> None:
    cmd = [RAY, "job", "submit", "--address", address, "--submission-id", new_id("cli"), "--no-wait",
           "--", "echo", "hi"]
    subprocess.run(cmd, check=True, env=ray_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--join-runs", type=int, default=3)
    args = parser.parse_args()
    head = RayNode(gpus=0).start()
    workers: list[RayNode] = []
    try:
        joins = [gpus_to_submission(head, workers) for _ in range(args.join_runs)]
        provider_in_process(head.address)  # warm the head's job agent; not counted
        samples: dict[str, list[float]] = {"in-process": [], "fresh": [], "cli": []}
        for _ in range(args.runs):  # interleaved so machine noise hits all alike
            samples["in-process"].append(timed(lambda: provider_in_process(head.address)))
            samples["fresh"].append(timed(lambda: provider_fresh(head.address)))
            samples["cli"].append(timed(lambda: cli(head.address)))
    finally:
        for node in [*workers, head]:
            node.stop()

    med = {k: statistics.median(v) for k, v in samples.items()}
    to_submit = statistics.median(j[0] for j in joins)
    to_return = statistics.median(j[1] for j in joins)
    print(f"(a) GPUs appear -> job submitted, median of {len(joins)} worker joins")
    print(f"    submitted (Ray's start_time) {to_submit:6.2f} s    create returned {to_return:6.2f} s")
    print(f"    (the readiness poll backs off to at most 2 s; per join: {[f'{a:.2f}' for a, _ in joins]})")
    print(f"(b) one submission on a ready head, median of {args.runs}")
    print(f"    {'provider create (in-process)':34} {med['in-process']:6.3f} s")
    print(f"    {'provider create (fresh python)':34} {med['fresh']:6.3f} s")
    print(f"    {'ray job submit --no-wait (CLI)':34} {med['cli']:6.3f} s")
    print(f"    CLI / provider: {med['cli'] / med['in-process']:.1f}x in-process, "
          f"{med['cli'] / med['fresh']:.1f}x fresh interpreter")


if __name__ == "__main__":
    main()
