"""What a stack costs per hour, by resource class, and what the configured run costs. Pure.

The hourly table comes from the stack's config and catalog.prices; the run estimate needs the
recipe's sizing (GPU-hours, bucket GB), which is passed in, so this module does not depend on it.
A part without a price source stays in the table as unknown: totals are then lower bounds.
"""

from __future__ import annotations

from dataclasses import dataclass

from catalog import prices
from catalog.capacity import ON_DEMAND
from stacks.config import StackConfig

GPU_NODES, CPU_NODES, CLUSTER_FEE, BUCKET = "GPU nodes", "CPU nodes", "cluster fee", "bucket"


@dataclass(frozen=True)
class Line:
    resource_class: str
    what: str  # e.g. "2 x a4-highgpu-8g (8x nvidia-b200), spot"
    usd_per_hour: float  # the priced part
    rows: tuple[prices.Price, ...]  # the price rows used (source, date, note)
    missing: tuple[str, ...] = ()  # what has no price source: usd_per_hour is then a lower bound
    note: str = ""

    @property
    def complete(self) -> bool:
        return not self.missing


@dataclass(frozen=True)
class HourlyTable:
    stack: str
    lines: tuple[Line, ...]
    bucket: prices.Price | None  # standard storage per GB-month where the bucket lives
    bucket_location: str = ""

    @property
    def bucket_usd_per_gb_month(self) -> float | None:
        return self.bucket.usd if self.bucket is not None else None

    @property
    def known_usd_per_hour(self) -> float:
        return sum(line.usd_per_hour for line in self.lines)

    @property
    def complete(self) -> bool:
        return all(line.complete for line in self.lines) and self.bucket_usd_per_gb_month is not None

    def line(self, resource_class: str) -> Line | None:
        return next((x for x in self.lines if x.resource_class == resource_class), None)


def _priced(count: int, parts: list[tuple[str, str | None, str]], region: str) -> tuple[float, list, list]:
    """Sum count x each (sku, capacity) part; return (priced usd/h, rows used, what has no price)."""
    total, rows, missing = 0.0, [], []
    for sku, capacity, label in parts:
        row = prices.find(sku, region, capacity) if capacity else None
        if row is None or row.usd is None:
            missing.append(f"{label} ({capacity or 'this capacity type'}) in {region}")
            if row is not None:
                rows.append(row)
            continue
        rows.append(row)
        total += count * row.usd
    return total, rows, missing


def hourly(cfg: StackConfig) -> HourlyTable:
    """The stack's price per hour once every node it asks for runs (GPU pool at gpuNodes, CPU pool at
    cpuNodesMin), by resource class. The bucket is priced per GB-month (see run_estimate)."""
    acc, region = cfg.accelerator, cfg.region
    column, capacity_note = prices.capacity_rate(cfg.capacity.kind)
    gpus = f"{acc.accelerator_type} x{acc.gpus_per_node}"
    gpu_parts = [(acc.machine_type, column, f"{acc.machine_type} host"),
                 (gpus, column, f"{acc.gpus_per_node}x {acc.accelerator_type}")]
    usd, rows, missing = _priced(cfg.gpu_nodes, gpu_parts, region)
    ssd = prices.find(prices.LOCAL_SSD, region)
    notes = [part for n in (capacity_note, *(r.note for r in rows)) if n for part in n.split("; ")]
    if cfg.cluster.autopilot:
        notes.append("Autopilot: priced as the underlying node (Accelerator class billing not confirmed)")
    lines = [Line(GPU_NODES, f"{cfg.gpu_nodes} x {acc.machine_type} ({acc.gpus_per_node}x {acc.accelerator_type}, "
                             f"{acc.local_ssds} bundled local SSDs), {cfg.capacity.kind}",
                  usd, tuple(rows) + ((ssd,) if ssd else ()), tuple(missing), "; ".join(dict.fromkeys(notes)))]

    cl = cfg.cluster
    if cl.autopilot:
        lines.append(Line(CPU_NODES, "Ray head pod and staging Job on Autopilot general-purpose capacity", 0.0, (),
                          ("Autopilot pod vCPU/memory prices",), "billed per pod request; no source in the table"))
    else:
        usd, rows, missing = _priced(cl.cpu_nodes_min, [(cl.cpu_machine_type, ON_DEMAND, cl.cpu_machine_type)], region)
        lines.append(Line(CPU_NODES, f"{cl.cpu_nodes_min} x {cl.cpu_machine_type}, on-demand "
                                     f"(autoscales up to {cl.cpu_nodes_max})", usd, tuple(rows), tuple(missing)))

    fee = prices.find(prices.CLUSTER_FEE, region)
    lines.append(Line(CLUSTER_FEE, "1 GKE cluster", fee.usd or 0.0 if fee else 0.0, (fee,) if fee else (),
                      () if fee else ("cluster management fee",), fee.note if fee else ""))
    bucket = prices.find(prices.BUCKET_STANDARD, cfg.bucket_location)
    return HourlyTable(cfg.stack, tuple(lines), bucket, cfg.bucket_location)


@dataclass(frozen=True)
class RunEstimate:
    wall_hours: float
    usd: float  # the priced part
    by_class: dict[str, float]
    complete: bool  # False: some part has no price source; usd is a lower bound


def run_estimate(table: HourlyTable, gpu_hours: float, bucket_gb: float, total_gpus: int) -> RunEstimate:
    """The cost of a run of `gpu_hours` GPU-hours on `total_gpus` GPUs that leaves `bucket_gb` in the bucket.

    Every node and the cluster fee bill for the run's wall time (gpu_hours / total_gpus); the
    bucket bills its size for that time, pro rata of a month. Node start-up and data staging before
    the first step are not included.
    """
    if total_gpus < 1:
        raise ValueError(f"total_gpus = {total_gpus}: must be >= 1")
    wall = gpu_hours / total_gpus
    by_class = {line.resource_class: line.usd_per_hour * wall for line in table.lines}
    rate = table.bucket_usd_per_gb_month
    by_class[BUCKET] = bucket_gb * (rate or 0.0) * wall / prices.HOURS_PER_MONTH
    return RunEstimate(wall, sum(by_class.values()), by_class, table.complete)


def summary(table: HourlyTable) -> dict:
    """The hourly table as a stack output: USD per hour by resource class (None: no price source)."""
    return {"tableDate": prices.TABLE_DATE, "complete": table.complete,
            "totalKnownUsdPerHour": round(table.known_usd_per_hour, 4),
            "usdPerHour": {line.resource_class: round(line.usd_per_hour, 4) for line in table.lines},
            "unpriced": [m for line in table.lines for m in line.missing],
            "bucketUsdPerGbMonth": table.bucket_usd_per_gb_month}


def _usd(value: float | None, complete: bool = True) -> str:
    if value is None or (not complete and value == 0):
        return "unknown"
    return f"${value:,.2f}" if complete else f">= ${value:,.2f}"


def render_hourly(table: HourlyTable) -> str:
    """The table as the plan and `pulumi up` print it."""
    out = [f"hourly price of stack {table.stack} (USD list prices, table of {prices.TABLE_DATE}):"]
    for line in table.lines:
        out.append(f"  {line.resource_class:<12} {_usd(line.usd_per_hour, line.complete):>14}/h  {line.what}")
        if line.missing:
            out.append(f"  {'':<12} {'':>16}  no price source: {', '.join(line.missing)}")
        if line.note:
            out.append(f"  {'':<12} {'':>16}  note: {line.note}")
    rate = table.bucket_usd_per_gb_month
    out.append(f"  {BUCKET:<12} {_usd(rate):>14}/GB-month (standard storage in {table.bucket_location})")
    total = _usd(table.known_usd_per_hour, table.complete) + "/h"
    out.append(f"  {'total':<12} {total:>16}" + ("" if table.complete else "  (lower bound: parts above are unpriced)"))
    rows = [r for line in table.lines for r in line.rows] + ([table.bucket] if table.bucket else [])
    sources = sorted({f"{r.source} (seen {r.seen})" for r in rows})
    out += ["  sources:"] + [f"    {s}" for s in sources]
    return "\n".join(out)


def render_run(estimate: RunEstimate, gpu_hours: float, bucket_gb: float) -> str:
    parts = ", ".join(f"{k} ${v:,.2f}" for k, v in estimate.by_class.items())
    bound = "" if estimate.complete else " (lower bound: some parts are unpriced)"
    return (f"estimated run cost: {_usd(estimate.usd, estimate.complete)}{bound} for {gpu_hours:,.1f} GPU-hours "
            f"({estimate.wall_hours:,.1f} h wall) and {bucket_gb:,.0f} GB in the bucket: {parts}")
