"""Offline plan wall time vs merely importing the Pulumi SDKs the program uses, side by side.

    venv/bin/python bench/plan_speed.py [--runs 5] [--stack b200]

Each sample is a fresh interpreter (what a user pays). Prints medians and the ratio.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BUDGET = 1.30  # the offline plan may cost at most this much more than importing the SDKs it uses
# The SDK modules the program uses, nothing of ours. The SDKs load submodules lazily on first
# attribute access, so touch one class in each: `import pulumi_gcp.compute` alone loads nothing.
SDK_IMPORTS = "; ".join([
    "import pulumi, pulumi.dynamic, pulumi.runtime.mocks, pulumi_gcp as gcp, pulumi_kubernetes as k8s",
    "import pulumi_random, yaml",
    "gcp.compute.Network, gcp.container.Cluster, gcp.storage.Bucket, gcp.projects.Service",
    "gcp.organizations.get_project_output",
    "k8s.Provider, k8s.core.v1.Secret, k8s.batch.v1.Job, k8s.apiextensions.CustomResource, k8s.yaml.v2.ConfigFile",
    "pulumi_random.RandomId",
])


def timed(cmd: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, cwd=ROOT, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--stack", default="b200")
    args = parser.parse_args()
    out = Path(tempfile.mkdtemp()) / "plan"
    imports, plans = [], []
    for _ in range(args.runs):  # interleaved so machine noise hits both alike
        imports.append(timed([sys.executable, "-c", SDK_IMPORTS]))
        plans.append(timed([sys.executable, "-m", "tools.plan", "--stack", args.stack, "--out", str(out),
                            "--quiet"]))
    imp, pln = statistics.median(imports), statistics.median(plans)
    print(f"{'import Pulumi SDKs':<22} median {imp:6.2f} s  ({', '.join(f'{t:.2f}' for t in imports)})")
    print(f"{'plan --stack ' + args.stack:<22} median {pln:6.2f} s  ({', '.join(f'{t:.2f}' for t in plans)})")
    ratio = pln / imp
    verdict = "within" if ratio <= BUDGET else "OVER"
    print(f"ratio plan/import: {ratio:.2f}x: {verdict} the {BUDGET:.2f}x budget")


if __name__ == "__main__":
    main()
