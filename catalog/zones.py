"""Where each accelerator's machine type is offered, per zone, and the CPU machines' memory.

Source: skypilot-org/skypilot-catalog catalogs/v8/gcp/vms.csv @006059e0f18acb1341e22a27751e9f80df6ba92f
(the catalog the price table already reads; rows a3-ultragpu-8g, a4-highgpu-8g, g2-standard-24 and the
CPU machine rows, columns InstanceType, vCPUs, MemoryGiB, AvailabilityZone; read 2026-12-01). It is
built from Compute Engine's machine-type listing per zone. Google adds zones: a zone newer than this
table is accepted when the stack names it in `zoneOffersAccelerator` (stacks.keys), the one override.
"""

from __future__ import annotations

TABLE = ("skypilot-org/skypilot-catalog catalogs/v8/gcp/vms.csv @006059e0f18acb1341e22a27751e9f80df6ba92f "
         "(read 2026-12-01)")

_A4 = ("asia-northeast1-b asia-southeast1-b europe-north1-b europe-west4-b us-central1-b us-east1-b us-east4-b "
       "us-south1-b us-west2-c us-west3-b us-west3-c")
_A3_ULTRA = ("asia-south1-b asia-south2-c europe-west1-b europe-west4-a us-central1-b us-east4-b us-east5-a "
             "us-south1-b us-west1-c")
_G2_24 = ("asia-east1-a asia-east1-b asia-east1-c asia-northeast1-a asia-northeast1-b asia-northeast1-c "
          "asia-northeast3-a asia-northeast3-b asia-south1-a asia-south1-b asia-south1-c asia-southeast1-a "
          "asia-southeast1-b asia-southeast1-c europe-west1-b europe-west1-c europe-west2-a europe-west2-b "
          "europe-west3-a europe-west3-b europe-west4-a europe-west4-b europe-west4-c europe-west6-b europe-west6-c "
          "me-central2-a me-central2-c northamerica-northeast1-b northamerica-northeast1-c northamerica-northeast2-a "
          "northamerica-northeast2-b us-central1-a us-central1-b us-central1-c us-east1-b us-east1-c us-east1-d "
          "us-east4-a us-east4-c us-west1-a us-west1-b us-west1-c us-west4-a us-west4-c")
# machine type -> the zones that offer it
ZONES: dict[str, frozenset[str]] = {
    "a4-highgpu-8g": frozenset(_A4.split()),
    "a3-ultragpu-8g": frozenset(_A3_ULTRA.split()),
    "g2-standard-24": frozenset(_G2_24.split()),
}

# GiB of memory per vCPU of a predefined CPU machine type's series and class, from the same rows
# (c2-standard-16: 16 vCPUs, 64 GiB; e2-standard-8: 8, 32; n1-highcpu-16: 16, 14.4). Others: unknown.
MEMORY_PER_VCPU_GIB: dict[str, float] = {
    "c2-standard": 4.0, "e2-standard": 4.0, "g2-standard": 4.0, "n1-highcpu": 0.9,
}


def offered_problem(machine_type: str, zone: str, override: str = "") -> str | None:
    """Why `zone` cannot run `machine_type` per the table; None when it can, the machine has no row, or
    the stack vouches for the zone (override == zone)."""
    zones = ZONES.get(machine_type)
    if zones is None or zone in zones or (override and override == zone):
        return None
    region = zone.rsplit("-", 1)[0]
    near = sorted(z for z in zones if z.startswith(region + "-")) or sorted(zones)
    return (f"offers no {machine_type} per {TABLE}: use one of {', '.join(near)}; if {zone} is newer than "
            f"the table and offers it, set zoneOffersAccelerator to {zone}")


def memory_gib(machine_type: str, vcpus: int) -> float | None:
    """Memory of a predefined CPU machine type, None when the series is not in the table."""
    series = "-".join(machine_type.split("-")[:2])
    per = MEMORY_PER_VCPU_GIB.get(series)
    return None if per is None else per * vcpus
