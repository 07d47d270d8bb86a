"""Which Compute Engine quotas govern a stack, as Cloud Quotas quota IDs, and how to read a value.

Sources (seen 2026-11-30; no official quota-ID table was found, so the GPU IDs come from dumps of
real projects and are checked at run time: a quota the project does not report is a warning):
- Cloud Quotas "Quota terminology" https://cloud.google.com/docs/quotas/terminology: dimensions are
  region, zone or service-specific ones such as `gpu_family`; `CPUS-PER-VM-FAMILY-per-project-region`
  is the vCPU quota of one VM family in a region (dimension `vm_family`).
- Cloud Quotas "Implement common use cases" https://cloud.google.com/docs/quotas/implement-common-use-cases:
  QuotaInfo `CPUS-per-project-region`, metric compute.googleapis.com/cpus, dimensionsInfo with
  applicableLocations.
- "Obtain capacity" http://cloud.google.com/ai-hypercomputer/docs/obtain-capacity: flex-start and spot
  need *preemptible* quota for the GPU machine type; calendar-mode future reservations charge no quota.
- Compute Engine "Allocation quotas" https://docs.cloud.google.com/compute/resource-usage (as quoted
  verbatim in a third-party test, not re-read here): "To create A4X Max, A4X, A4, A3, G4, and G2 VMs,
  you only need to have the required ... GPU quotas ... You don't need to request CPU quotas." So the
  GPU nodes need GPU quota only; the CPU pool's vCPUs need CPU quota.
- GPU quota IDs: Cyclenerd/terraform-google-quota-limits tools/compute.csv @9a5ea5e (2026-07-15) lists
  metrics gpus_per_gpu_family, gpus_all_regions, preemptible_nvidia_{b200,h200,l4}_gpus, nvidia_l4_gpus
  and NO on-demand nvidia_b200/h200 metric (on-demand B200/H200 fall under the family quota); the
  quota IDs `GPUS-PER-GPU-FAMILY-per-project-region` (gpu_family=NVIDIA_B200/NVIDIA_H200),
  `PREEMPTIBLE-NVIDIA-{B200,H200,L4}-GPUS-per-project-region`, `NVIDIA-L4-GPUS-per-project-region` and
  `GPUS-ALL-REGIONS-per-project` appear in Cloud Quotas API dumps of live projects in public code
  (found by exact search; repositories not named by the index).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from catalog.capacity import FLEX_START, ON_DEMAND, RESERVATION, SPOT

SERVICE = "compute.googleapis.com"
PREEMPTIBLE = "preemptible"
STANDARD = "on-demand"
# Which quota pool a capacity type draws from. A reservation's quota is charged when the reservation
# is created (or not at all for calendar-mode future reservations), not when our nodes consume it.
POOL = {SPOT: PREEMPTIBLE, FLEX_START: PREEMPTIBLE, ON_DEMAND: STANDARD, RESERVATION: None}
REQUEST_URL = "https://console.cloud.google.com/iam-admin/quotas"


@dataclass(frozen=True)
class QuotaRef:
    """One Cloud Quotas quota and the dimension values (besides region) that select our slice."""

    quota_id: str
    dimensions: Mapping[str, str] = field(default_factory=dict)
    regional: bool = True  # False: a project-wide quota (applicableLocations ["global"])

    def describe(self, region: str) -> str:
        dims = dict(self.dimensions)
        if self.regional:
            dims["region"] = region
        inner = ", ".join(f"{k}={v}" for k, v in sorted(dims.items()))
        return f"{self.quota_id} ({inner})" if inner else self.quota_id


# (accelerator_type, pool) -> the regional GPU quota. Adding an accelerator is adding its rows.
GPU_QUOTAS: dict[tuple[str, str], QuotaRef] = {
    ("nvidia-b200", STANDARD): QuotaRef("GPUS-PER-GPU-FAMILY-per-project-region", {"gpu_family": "NVIDIA_B200"}),
    ("nvidia-b200", PREEMPTIBLE): QuotaRef("PREEMPTIBLE-NVIDIA-B200-GPUS-per-project-region"),
    ("nvidia-h200-141gb", STANDARD): QuotaRef("GPUS-PER-GPU-FAMILY-per-project-region",
                                              {"gpu_family": "NVIDIA_H200"}),
    ("nvidia-h200-141gb", PREEMPTIBLE): QuotaRef("PREEMPTIBLE-NVIDIA-H200-GPUS-per-project-region"),
    # L4 keeps a per-SKU on-demand quota (a live-project dump dated 2026-06-29 says so).
    ("nvidia-l4", STANDARD): QuotaRef("NVIDIA-L4-GPUS-per-project-region"),
    ("nvidia-l4", PREEMPTIBLE): QuotaRef("PREEMPTIBLE-NVIDIA-L4-GPUS-per-project-region"),
}
GPUS_ALL_REGIONS = QuotaRef("GPUS-ALL-REGIONS-per-project", regional=False)
# Quota IDs of Compute Engine's regional address and disk quotas as public code reads them through
# Cloud Quotas (found by exact search, repositories not named by the index): the NAT's reserved
# external addresses count as static and, once the NAT uses them, as in-use addresses; pd-balanced
# boot disks (GKE's default disk type) count toward SSD total GB; local SSDs toward local SSD GB.
STATIC_ADDRESSES = QuotaRef("STATIC-ADDRESSES-per-project-region")
IN_USE_ADDRESSES = QuotaRef("IN-USE-ADDRESSES-per-project-region")
SSD_TOTAL_GB = QuotaRef("SSD-TOTAL-GB-per-project-region")
LOCAL_SSD_GB = {STANDARD: QuotaRef("LOCAL-SSD-TOTAL-GB-per-project-region"),
                PREEMPTIBLE: QuotaRef("PREEMPTIBLE-LOCAL-SSD-GB-per-project-region")}
# Project-wide VPC and firewall-rule limits ("Cloud Quotas" quota IDs, same public sources).
NETWORKS = QuotaRef("NETWORKS-per-project", regional=False)
FIREWALLS = QuotaRef("FIREWALLS-per-project", regional=False)
# GKE's default node boot disk is pd-balanced (GKE docs "Configuring a custom boot disk": the default in
# 1.24 and later), which counts toward SSD total GB ("Balanced and SSD Persistent Disks have disk quotas
# ..."). The A4 and A3 Ultra machine series take Hyperdisk only (Compute Engine "GPU machine types":
# supported disk types), so their boot disks draw on another quota; G2 takes Persistent Disk.
PERSISTENT_DISK_BOOT_SERIES = ("g2-",)


def persistent_disk_boot(machine_type: str) -> bool:
    """Whether a GPU machine's node boot disk is a (pd-balanced) Persistent Disk under GKE's default."""
    return machine_type.startswith(PERSISTENT_DISK_BOOT_SERIES)


LOCAL_SSD_DISK_GB = 375  # Compute Engine "About Local SSD disks": each Local SSD disk is 375 GiB
CPUS_ALL_REGIONS = QuotaRef("CPUS-ALL-REGIONS-per-project", regional=False)
# The Hyperdisk Balanced boot disks of the A4 / A3 Ultra nodes: Compute Engine's regional quota
# HYPERDISK_BALANCED_TOTAL_GB, which cluster-toolkit's quota validator charges for hyperdisk-balanced
# boot disks (pkg/validators/quota.go @1047080 addDetailedDiskMetrics), metric
# compute.googleapis.com/hyperdisk_balanced_total_storage "Hyperdisk Balanced Capacity (GB)"
# (Cyclenerd/terraform-google-quota-limits tools/compute.csv @0e66e27b). The Cloud Quotas ID is spelled
# as the SSD and local SSD pairs above are (ssd_total_storage -> SSD-TOTAL-GB-per-project-region), not
# read from a live project: a project that reports no such quota turns the check into a warning.
HYPERDISK_BALANCED_GB = QuotaRef("HYPERDISK-BALANCED-TOTAL-GB-per-project-region")
GKE_DEFAULT_BOOT_DISK_GB = 100  # the GKE API's nodeConfig.diskSizeGb when none is sent


def gpu_quota(accelerator_type: str, capacity_kind: str) -> QuotaRef | None:
    """The regional GPU quota for an accelerator and capacity type; None when none is charged
    (reservation) or the catalog has no row for the accelerator."""
    pool = POOL.get(capacity_kind)
    return GPU_QUOTAS.get((accelerator_type, pool)) if pool else None


def cpu_quota(machine_type: str) -> QuotaRef:
    """The regional vCPU quota of a machine type's family, e.g. c2-standard-16 -> vm_family=C2."""
    return QuotaRef("CPUS-PER-VM-FAMILY-per-project-region", {"vm_family": machine_type.split("-")[0].upper()})


UNLIMITED = -1


def quota_value(infos: Sequence[Mapping], ref: QuotaRef, region: str) -> int | None:
    """The enforced value of `ref` in `region` from a QuotaInfo's dimensionsInfos, None if none applies.

    `infos`: [{"dimensions": {...}, "value": str | None, "locations": [...]}], in the API's order,
    "from more specific ones to less specific ones"; an info without a dimension key applies to
    the values no other info names (pulumi-gcp GetSQuotaInfoResult / DimensionsInfo docs). So the
    first info whose dimensions all agree with ours and whose locations include ours wins. A missing value is 0:
    proto3 JSON omits a zero int64 (live dumps show `"details": {}` for families without a grant).
    A negative value is read as unlimited.
    """
    wanted = dict(ref.dimensions)
    if ref.regional:
        wanted["region"] = region
    for info in infos:
        dims = info.get("dimensions") or {}
        if any(wanted.get(k) != v for k, v in dims.items()):
            continue
        locations = info.get("locations") or []
        if ref.regional and locations and region not in locations:
            continue
        raw = info.get("value")
        number = int(raw) if raw not in (None, "") else 0
        return UNLIMITED if number < 0 else number
    return None

