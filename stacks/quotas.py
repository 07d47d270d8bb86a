"""Quota preflight (stage 2): the project's Compute Engine quotas against what the stack asks for.

`needs(cfg)` (pure) lists every quota that governs the stack with the amount it needs;
`quota_problems(needs, infos)` (pure) compares them with what Cloud Quotas reported; `check(cfg, apis)`
reads the quotas once the APIs are enabled and returns the problems for `preflight.gate`.

Why not `gcp.cloudquota.get_s_quota_info_output`: a failed output-form invoke (no permission on
Cloud Quotas) rejects an Output that the SDK tracks until the program exits, and pulumi's
`wait_for_rpcs` re-raises it there (pulumi/runtime/stack.py), so the whole update would crash even
if nothing used the result. The same invoke awaited inside an apply can be caught and turned into a
warning. The apply runs only once every ProjectApis service has an id, i.e. is enabled; at preview
on an empty project those ids are unknown and the check resolves unknown (gate() then shows the
cluster's gated inputs as unknown).
"""

from __future__ import annotations

import importlib.metadata
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import pulumi
import pulumi_gcp as gcp

from catalog import naming, quotas
from catalog.gcsfuse import HEAD_SIDECAR, staging_sidecar
from catalog.problems import Problem
from catalog.quotas import QuotaRef
from components.apis import ProjectApis
from components.data_prep import DataPrepArgs
from components.network import NAT_ADDRESSES
from stacks import derived
from stacks.config import StackConfig
from stacks.keys import full

# The SDK's own token for gcp.cloudquota.get_s_quota_info (pulumi_gcp/cloudquota/get_s_quota_info.py).
GET_QUOTA_INFO = "gcp:cloudquota/getSQuotaInfo:getSQuotaInfo"
# quotaInfos.get needs cloudquotas.quotas.get (Cloud Quotas REST reference); "To view quotas: Quota
# Viewer (roles/servicemanagement.quotaViewer)" (https://docs.cloud.google.com/docs/quotas/view-manage).
READ_ROLE = "roles/servicemanagement.quotaViewer"


@dataclass(frozen=True)
class QuotaNeed:
    ref: QuotaRef
    needed: int
    key: str  # the config key that changes the need
    why: str
    # False: a shortfall is a warning. For quotas whose application to these machines no source we
    # read settles (bundled local SSDs of A4/A3 Ultra/G2, which "only need ... GPU quotas").
    fatal: bool = True


def needs(cfg: StackConfig) -> list[QuotaNeed]:
    """Every quota the stack draws on, with the amount the stack can ask for at most."""
    acc, kind = cfg.accelerator, cfg.capacity.kind
    gpus = cfg.total_gpus
    shape = f"{cfg.gpu_nodes} GPU nodes x {acc.gpus_per_node} {acc.accelerator_type}"
    found: list[QuotaNeed] = []
    regional = quotas.gpu_quota(acc.accelerator_type, kind)
    if regional is not None:
        pool = quotas.POOL[kind]
        found.append(QuotaNeed(regional, gpus, "gpuNodes", f"{shape}, capacity={kind} draws {pool} quota"))
    if quotas.POOL.get(kind):
        found.append(QuotaNeed(quotas.GPUS_ALL_REGIONS, gpus, "gpuNodes", f"{shape}, counted in every region"))
    cl = cfg.cluster
    if cl.autopilot:  # A4/A3/G2 GPU nodes need no CPU quota; the nodes Autopilot starts for the CPU pods do
        found.append(_autopilot_cpu_need(cfg))
    else:
        vcpus = (naming.machine_vcpus(cl.cpu_machine_type) or 0) * cl.cpu_nodes_max
        why = f"{cl.cpu_nodes_max} x {cl.cpu_machine_type} (cpuNodesMax), on-demand"
        found.append(QuotaNeed(quotas.cpu_quota(cl.cpu_machine_type), vcpus, "cpuNodesMax", why))
        found.append(QuotaNeed(quotas.CPUS_ALL_REGIONS, vcpus, "cpuNodesMax", why + ", counted in every region"))
        boot = derived.of(cfg).cpu_boot_disk_gb
        disk = cl.cpu_nodes_max * boot
        why = f"{cl.cpu_nodes_max} CPU nodes x {boot} GB pd-balanced boot disk"
        # One need for the quota: the GPU pool's Persistent Disk boot disks draw on it too.
        if acc.boot_disk_gb and quotas.persistent_disk_boot(acc.machine_type):
            disk += cfg.gpu_nodes * acc.boot_disk_gb
            why += f" + {cfg.gpu_nodes} GPU nodes (gpuNodes) x {acc.boot_disk_gb} GB pd-balanced boot disk"
        found.append(QuotaNeed(quotas.SSD_TOTAL_GB, disk, "cpuNodesMax", why))
    if not quotas.persistent_disk_boot(acc.machine_type):  # Hyperdisk boot disks, in both modes
        boot = acc.boot_disk_gb or quotas.GKE_DEFAULT_BOOT_DISK_GB
        found.append(QuotaNeed(quotas.HYPERDISK_BALANCED_GB, cfg.gpu_nodes * boot, "gpuNodes",
                               f"{cfg.gpu_nodes} GPU nodes x {boot} GB Hyperdisk Balanced boot disk "
                               f"({acc.machine_type} boots from Hyperdisk only)"))
    # The VPCs (cluster, and with RDMA the gVNIC and RoCE ones) and the gVNIC firewall rule; the limit is
    # for the whole project, so VPCs and rules it already has count against it too.
    rdma = bool(cfg.network.rdma_cidrs)
    vpcs = 3 if rdma else 1
    found.append(QuotaNeed(quotas.NETWORKS, vpcs, "rdmaCidrs",
                           f"{vpcs} VPC networks (plus those the project already has)"))
    if rdma:
        found.append(QuotaNeed(quotas.FIREWALLS, 1, "gvnicCidr",
                               "1 firewall rule on the gVNIC VPC (plus the project's and GKE's own)"))
    # The region's Cloud NAT reserves its external addresses (components.network).
    nat = NAT_ADDRESSES
    found.append(QuotaNeed(quotas.STATIC_ADDRESSES, nat, "gcp:region", f"{nat} reserved addresses of the Cloud NAT"))
    found.append(QuotaNeed(quotas.IN_USE_ADDRESSES, nat, "gcp:region", f"{nat} addresses the Cloud NAT uses"))
    if acc.local_ssds and quotas.POOL.get(kind):
        gb = cfg.gpu_nodes * acc.local_ssds * quotas.LOCAL_SSD_DISK_GB
        found.append(QuotaNeed(quotas.LOCAL_SSD_GB[quotas.POOL[kind]], gb, "gpuNodes",
                               f"{cfg.gpu_nodes} nodes x {acc.local_ssds} local SSDs x {quotas.LOCAL_SSD_DISK_GB} GB "
                               f"bundled with {acc.machine_type}", fatal=False))
    return found


def _autopilot_cpu_need(cfg: StackConfig) -> QuotaNeed:
    """The vCPUs of the nodes Autopilot starts for the Ray head and the staging Job, each with its GCS FUSE
    sidecar: at least their requests (Performance puts each pod on a node of its own, of a machine family
    it picks, so the family quota cannot be named here; every family counts in CPUS-ALL-REGIONS)."""
    d = derived.of(cfg)
    head = cfg.cluster.head_cpu + HEAD_SIDECAR.cpu
    staging = float(DataPrepArgs.cpu_request) + staging_sidecar(d.staging).cpu
    return QuotaNeed(quotas.CPUS_ALL_REGIONS, math.ceil(head + staging), "rayHeadCpu",
                     f"Autopilot nodes for the Ray head ({head:g} vCPUs with its GCS FUSE sidecar, rayHeadCpu) and "
                     f"the staging Job ({staging:g}), at least, counted in every region")


def quota_problems(cfg: StackConfig, wanted: Sequence[QuotaNeed], infos: Mapping[str, object]) -> list[Problem]:
    """Each quota below what the stack needs, named by the key to lower (a quota that could not be read: a
    warning). `infos`: quota_id -> list of {"dimensions", "value", "locations"} or the error text of the read."""
    out: list[Problem] = []
    for need in wanted:
        name = need.ref.describe(cfg.region)
        info = infos.get(need.ref.quota_id)
        if isinstance(info, str) or info is None:
            out.append(Problem("gcp:project", f"could not read quota {name} ({info or 'not read'}); not checked: "
                               f"grant {READ_ROLE} on {cfg.project} to check it", fatal=False))
            continue
        value = quotas.quota_value(info, need.ref, cfg.region)
        if value is None:
            out.append(Problem("gcp:project", f"quota {name} has no value for this project; not checked",
                               fatal=False))
        elif value != quotas.UNLIMITED and value < need.needed:
            out.append(Problem(full(need.key), f"quota {name} is {value}, the stack needs {need.needed} ({need.why}): "
                               f"request more at {quotas.REQUEST_URL}?project={cfg.project} or lower {need.key}"
                               + ("" if need.fatal else "; a warning only: Compute Engine may not charge it "
                                  "for SSDs bundled with the machine"), fatal=need.fatal))
    return out


def _plain(result: gcp.cloudquota.GetSQuotaInfoResult) -> list[dict]:
    """The SDK result's dimensionsInfos as plain dicts for catalog.quotas.quota_value."""
    rows = []
    for d in result.dimensions_infos or []:
        details = list(d.details or [])
        rows.append({"dimensions": dict(d.dimensions or {}),
                     "value": details[0].value if details else None,
                     "locations": list(d.applicable_locations or [])})
    return rows


async def _read(project: str, quota_id: str) -> list[dict] | str:
    """One QuotaInfo, or the error text when it cannot be read (no permission, unknown quota)."""
    try:
        result = await pulumi.runtime.invoke_async(
            GET_QUOTA_INFO, {"parent": f"projects/{project}", "service": quotas.SERVICE, "quotaId": quota_id},
            opts=pulumi.InvokeOptions(version=importlib.metadata.version("pulumi_gcp")),
            typ=gcp.cloudquota.GetSQuotaInfoResult)
        return _plain(result)
    except Exception as err:  # noqa: BLE001 - any failed read is a warning, never a crash
        return str(err).splitlines()[0] if str(err) else type(err).__name__


def check(cfg: StackConfig, apis: ProjectApis) -> pulumi.Output[list[Problem]]:
    """The quota problems, resolved after every ProjectApis service is enabled."""
    wanted = needs(cfg)

    async def run(_: object) -> list[Problem]:
        infos: dict[str, object] = {}
        for quota_id in dict.fromkeys(n.ref.quota_id for n in wanted):
            infos[quota_id] = await _read(cfg.project, quota_id)
        return quota_problems(cfg, wanted, infos)

    return pulumi.Output.all(*[s.id for s in apis.services]).apply(run)
