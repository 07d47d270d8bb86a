"""The dated price table: one row per SKU, region and capacity type, each with its source.

USD list prices. A price we have no source for is a row with `usd=None` and the reason, never a
guess: the cost report then shows that part as unknown and the total as a lower bound.

Where the machine prices come from: SkyPilot's GCP catalog (a scrape of the Cloud Billing
catalog), which splits an accelerator VM into a host row (vCPU + memory, by machine type) and a
GPU row (by GPU model and count): a VM is the sum of the two. Spot prices there are a snapshot:
Google changes spot prices up to once a day (https://cloud.google.com/spot-vms/pricing). The
catalog is indicative only: its A4 host row is 0.0 and some GPU rows look inconsistent (H200 in
europe-west1: spot above on-demand); both are kept as found and flagged in the row's note.
"""

from __future__ import annotations

from dataclasses import dataclass

from catalog.capacity import FLEX_START, ON_DEMAND, RESERVATION, SPOT

TABLE_DATE = "2026-11-30"  # when every row below was read; the README shows it next to the figures
HOURS_PER_MONTH = 730  # 365 * 24 / 12: turns a per-GB-month storage price into a per-hour one

SKYPILOT = ("skypilot-org/skypilot-catalog catalogs/v8/gcp/vms.csv "
            "@006059e0f18acb1341e22a27751e9f80df6ba92f")
GKE_PRICING = "https://cloud.google.com/kubernetes-engine/pricing"
GCS_PRICING = "https://cloud.google.com/storage/pricing"
ACCEL_MACHINES = "https://docs.cloud.google.com/compute/docs/accelerator-optimized-machines"

SPOT_NOTE = "spot: Compute Engine may preempt the VM at any time; price changes up to daily"
FLEX_NOTE = ("flex-start: capacity for at most 7 days (Dynamic Workload Scheduler), then the VM is "
             "stopped; no flex-start price source in the table")

HOUR, GB_MONTH = "hour", "GB-month"


@dataclass(frozen=True)
class Price:
    sku: str  # machine type, "<accelerator_type> x<count>", or a service SKU below
    region: str  # "*" for every region
    capacity: str  # on-demand | spot | "*" (not capacity-dependent)
    usd: float | None  # per `unit`; None: no source
    unit: str
    source: str
    seen: str = TABLE_DATE
    note: str = ""


CLUSTER_FEE, BUCKET_STANDARD, LOCAL_SSD = "gke-cluster-management", "gcs-standard-storage", "local-ssd-bundled"


def _vm(sku: str, region: str, on_demand: float | None, spot: float | None, note: str = "") -> list[Price]:
    return [Price(sku, region, ON_DEMAND, on_demand, HOUR, SKYPILOT, note=note),
            Price(sku, region, SPOT, spot, HOUR, SKYPILOT, note="; ".join(n for n in (note, SPOT_NOTE) if n))]


_A4_HOST = ("SkyPilot lists the a4-highgpu-8g host at 0.0 and prices A4 through its 8x B200 row alone; "
            "whether that row covers vCPU and memory is not confirmed, so the host stays unpriced")
_H200_EW1 = "source row has spot above on-demand (inconsistent in the scrape); indicative only"

ROWS: tuple[Price, ...] = (
    # GPU node hosts (vCPU + memory + bundled local SSD, by machine type)
    *_vm("a4-highgpu-8g", "us-central1", None, None, _A4_HOST),
    *_vm("a3-ultragpu-8g", "us-central1", 12.266, 3.74713),
    *_vm("a3-ultragpu-8g", "europe-west1", 13.50609, 3.08825),
    # GPUs (by accelerator type and count per VM)
    *_vm("nvidia-b200 x8", "us-central1", 90.216, 32.6064),
    *_vm("nvidia-h200-141gb x8", "us-central1", 74.49392, 37.2472),
    *_vm("nvidia-h200-141gb x8", "europe-west1", 36.60258, 41.0128, _H200_EW1),
    *_vm("nvidia-l4 x2", "us-central1", 1.12008, 0.4462),
    *_vm("nvidia-l4 x2", "europe-west1", 1.23332, 0.4812),
    # G2 host (vCPU + memory; no local SSD asked for): g2-standard-24,24.0,96.0 rows, us-central1-a/b/c
    # and europe-west1-b/c (same price in every zone of a region).
    *_vm("g2-standard-24", "us-central1", 0.88075, 0.35242),
    *_vm("g2-standard-24", "europe-west1", 0.9698, 0.31776),
    # CPU pool machines (always on-demand)
    *_vm("c2-standard-16", "us-central1", 0.83523, 0.27187),
    *_vm("c2-standard-16", "europe-west1", 0.9188, 0.34118),
    *_vm("e2-standard-4", "us-central1", 0.13402, 0.05879),
    *_vm("e2-standard-8", "us-central1", 0.26805, 0.11758),
    *_vm("e2-standard-8", "europe-west1", 0.29486, 0.11792),
    # Services
    Price(CLUSTER_FEE, "*", "*", 0.10, HOUR, GKE_PRICING,
          note="per cluster, every mode; a $74.40/month credit per billing account covers one zonal or "
               "Autopilot cluster (not a regional Standard one)"),
    Price(BUCKET_STANDARD, "us-central1", "*", 0.020, GB_MONTH, GCS_PRICING),
    Price(BUCKET_STANDARD, "europe-west1", "*", 0.020, GB_MONTH, GCS_PRICING),
    Price(LOCAL_SSD, "*", "*", 0.0, HOUR, ACCEL_MACHINES,
          note="accelerator-optimized machines are billed for their bundled Local SSD in the machine price"),
)


def find(sku: str, region: str, capacity: str = "*") -> Price | None:
    """The row for a SKU in a region at a capacity type; region/capacity "*" rows match any."""
    for row in ROWS:
        if row.sku == sku and row.region in (region, "*") and row.capacity in (capacity, "*"):
            return row
    return None


def capacity_rate(kind: str) -> tuple[str | None, str]:
    """Which price column a GPU capacity type pays, and the note that goes next to it.

    A reservation bills its VMs at on-demand rates whether or not they run (Compute Engine
    reservations overview, not re-read here); flex-start has its own SKU we have no source for.
    """
    if kind == SPOT:
        return SPOT, ""  # the spot rows carry SPOT_NOTE
    if kind == FLEX_START:
        return None, FLEX_NOTE
    if kind == RESERVATION:
        return ON_DEMAND, "reservation: billed at on-demand rates (less any commitment) while it exists"
    return ON_DEMAND, ""
