"""GPU capacity types, the rules that decide which combinations GKE accepts, and how often each is interrupted.

Sources: GoogleCloudPlatform/cluster-toolkit modules/compute/gke-node-pool/main.tf @01a7a3e preconditions
(flex-start excludes spot and reservation affinity; COMPACT placement needs a single zone); spot VMs
cannot consume reservations (Compute Engine reservations docs).
"""

from __future__ import annotations

from dataclasses import dataclass

from catalog.gke import AI_CLUSTER_DOC, Floor
from catalog.problems import Problem

SPOT, ON_DEMAND, RESERVATION, FLEX_START = "spot", "on-demand", "reservation", "flex-start"
CAPACITIES = (SPOT, ON_DEMAND, RESERVATION, FLEX_START)
# GKE version floors per capacity type (the others need nothing beyond the accelerator's).
GKE_FLOORS: dict[str, tuple[Floor, ...]] = {
    FLEX_START: (Floor("1.32.2-gke.1652000", "flex-start GPU nodes", AI_CLUSTER_DOC),),
}


@dataclass(frozen=True)
class Interruptions:
    """How often one GPU node of a capacity type is taken away (mean hours between interruptions), and why
    that figure: a documented one, or an ASSUMPTION where Google publishes none. It sets the save cadence
    (stacks.checkpoints); a measured figure replaces it here."""

    node_hours: float
    basis: str


GPU_HOST_MAINTENANCE_DOC = "https://docs.cloud.google.com/compute/docs/gpus/gpu-host-maintenance"
SPOT_HISTORY_DOC = "https://docs.cloud.google.com/compute/docs/instances/view-spot-preemption-price"
FLEX_START_DOC = "https://docs.cloud.google.com/compute/docs/instances/about-flex-start-vms"
# GPU VMs cannot live-migrate: each host maintenance event stops them, "typically once every two weeks"
# (GPU_HOST_MAINTENANCE_DOC). Spot VMs may be preempted "at any time"; Compute Engine publishes no rate, only
# a machine type's daily rate in a zone over the last 30 days (the advice.capacityHistory API, SPOT_HISTORY_DOC).
_MAINTENANCE = Interruptions(14 * 24, "GPU host maintenance, typically once every two weeks "
                                      f"({GPU_HOST_MAINTENANCE_DOC})")
INTERRUPTIONS: dict[str, Interruptions] = {
    SPOT: Interruptions(6.0, "ASSUMPTION: one preemption per node every 6 h; Compute Engine publishes no Spot "
                             f"preemption rate, only a zone's last 30 days ({SPOT_HISTORY_DOC})"),
    ON_DEMAND: _MAINTENANCE,
    RESERVATION: _MAINTENANCE,
    # Flex-start VMs "run uninterrupted for up to seven days" (FLEX_START_DOC); host maintenance is the bound kept.
    FLEX_START: _MAINTENANCE,
}
_NO_RESERVATION_WHY = {SPOT: "spot VMs cannot consume reservations",
                       FLEX_START: "flex-start capacity cannot consume reservations"}


@dataclass(frozen=True)
class Capacity:
    """How the GPU nodes are obtained: a capacity type and, for `reservation`, the reservation's name."""

    kind: str = SPOT
    reservation: str = ""

    def problems(self) -> list[Problem]:
        """Each broken rule, by field: `kind` or `reservation`."""
        found: list[Problem] = []
        if self.kind not in CAPACITIES:
            found.append(Problem("kind", "must be one of " + ", ".join(CAPACITIES)))
        elif self.kind == RESERVATION and not self.reservation:
            found.append(Problem("reservation", "must name a Compute Engine reservation when capacity=reservation"))
        elif self.reservation and self.kind != RESERVATION:
            why = _NO_RESERVATION_WHY.get(self.kind, "it is unused")
            found.append(Problem("reservation", f"is set but capacity={self.kind}: {why}; set capacity=reservation "
                                         "or unset reservation"))
        return found

    def offered_problem(self, offered: tuple[str, ...], machine_type: str, source: str) -> str | None:
        """None when the machine offers this capacity type, else what is allowed and where that is stated."""
        if self.kind in CAPACITIES and self.kind not in offered:
            return (f"{machine_type} is not offered as {self.kind}: use one of {', '.join(offered)} "
                    f"(source: {source})")
        return None

    @property
    def flex_start(self) -> bool:
        return self.kind == FLEX_START

    @property
    def gke_floors(self) -> tuple[Floor, ...]:
        return GKE_FLOORS.get(self.kind, ())

