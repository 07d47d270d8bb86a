"""What a stack costs per hour, by resource class, and what the configured run costs. Pure.

The hourly table comes from the stack's config and catalog.prices; the run estimate prices the whole
run's timeline (stacks.run_time: start-up, staging, training, validation, saves, the merge, the
scale-down), low / expected / high. A part without a price source stays in the table as unknown
("unpriced" in the run estimate): totals are then lower bounds. The `hourlyPrice` output is the list
price table alone.
"""

from __future__ import annotations

from dataclasses import dataclass

from catalog import prices
from catalog.capacity import ON_DEMAND
from stacks.config import StackConfig
from stacks.run_time import by_range

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
    """The whole run's cost (stacks.run_time.Timeline) by case (fast / expected / slow = low / expected / high)."""

    wall_hours: dict[str, float]
    gpu_node_hours: dict[str, float]
    usd: dict[str, float]  # the priced part, by case
    by_class: dict[str, dict[str, float | None]]  # resource class -> case -> USD; None: no price source at all
    complete: bool  # False: some part has no price source; usd is a lower bound
    unpriced: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, object]:
        """For plan.json (runEstimate): low / expected / high; a class with no price source is null."""
        return {"wallHours": by_range(self.wall_hours), "gpuNodeHours": by_range(self.gpu_node_hours),
                "usd": by_range(self.usd), "byClass": {k: by_range(v) for k, v in self.by_class.items()},
                "lowerBound": not self.complete, "unpriced": list(self.unpriced), "tableDate": prices.TABLE_DATE}


def run_estimate(table: HourlyTable, timeline, bucket_gb: float, gpu_nodes: int) -> RunEstimate:
    """The cost of the run the timeline describes, leaving `bucket_gb` in the bucket.

    GPU nodes bill their node-hours (a node per phase it runs: stacks.run_time) at the GPU line's price per
    node; the CPU nodes and the cluster fee bill the wall time; the bucket bills its size for that time, pro
    rata of a month. A class with no price source at all is None ("unpriced"), one priced in part a lower bound.
    """
    if gpu_nodes < 1:
        raise ValueError(f"gpu_nodes = {gpu_nodes}: must be >= 1")
    cases = tuple(timeline.wall_hours)
    by_class: dict[str, dict[str, float | None]] = {}
    for line in table.lines:
        unpriced = line.missing and not line.usd_per_hour
        hours = timeline.gpu_node_hours if line.resource_class == GPU_NODES else timeline.wall_hours
        rate = line.usd_per_hour / gpu_nodes if line.resource_class == GPU_NODES else line.usd_per_hour
        by_class[line.resource_class] = {c: None if unpriced else rate * hours[c] for c in cases}
    rate = table.bucket_usd_per_gb_month
    by_class[BUCKET] = {c: None if rate is None else bucket_gb * rate * timeline.wall_hours[c] / prices.HOURS_PER_MONTH
                        for c in cases}
    usd = {c: sum(v[c] or 0.0 for v in by_class.values()) for c in cases}
    missing = tuple(m for line in table.lines for m in line.missing) + (() if rate is not None else ("bucket",))
    return RunEstimate(dict(timeline.wall_hours), dict(timeline.gpu_node_hours), usd, by_class, table.complete,
                       missing)


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


def _span(values: dict[str, float | None], fmt, complete: bool = True) -> str:
    if any(v is None for v in values.values()):
        return "unpriced"
    return " / ".join(fmt(v, complete) for v in values.values())


def render_run(estimate: RunEstimate, timeline) -> str:
    """The run estimate as the plan prints it: low / expected / high, by phase and by resource class."""
    hours = lambda v, _=True: f"{v:,.2f} h"  # noqa: E731
    usd = lambda v, complete=True: _usd(v, complete)  # noqa: E731
    bound = "" if estimate.complete else " (lower bound: some parts are unpriced)"
    out = [f"estimated run (ESTIMATE, low / expected / high): {_span(estimate.wall_hours, hours)} wall, "
           f"{_span(estimate.gpu_node_hours, hours)} of GPU nodes",
           f"  cost {_span(estimate.usd, usd, estimate.complete)}{bound}"]
    for name, values in estimate.by_class.items():
        out.append(f"    {name:<12} {_span(values, usd)}")
    out.append("  phases (wall time):")
    for p in timeline.phases:
        out.append(f"    {p.name:<52} {_span({c: 60 * v for c, v in p.hours.items()}, lambda v, _=True: f'{v:,.1f}')}"
                   f" min  ({p.source})")
    if estimate.unpriced:
        out.append(f"  unpriced: {', '.join(estimate.unpriced)}")
    out.append("  the cluster fee, CPU nodes and bucket keep billing after the run until `pulumi destroy`")
    return "\n".join(out)
