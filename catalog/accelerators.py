"""The accelerator table: the one place that maps b200, h200 and l4 to what GCP, NCCL and the models need.

Each row's values name their source next to them: GoogleCloudPlatform/cluster-toolkit examples/gke-a4 and
examples/gke-a3-ultragpu (@1047080: machine and accelerator types, RDMA NICs), container-engine-accelerators
(@992db81: gIB paths, NCCL settings), vendor datasheets and this project's measurements (GPU memory, FLOPS
and bandwidth, for the memory model and the step-time estimate). Allocatable capacity is derived here with
GKE's documented node reservations so Ray worker requests fit on the node they are meant for. What varies
per machine and decides whether GKE accepts a request (consumption options, driver, Autopilot worker size)
is a field of the row; tests/data/reference/ holds the same facts as extracted from Google's references for
the parity test.
"""

from __future__ import annotations

from dataclasses import dataclass

from catalog.capacity import FLEX_START, ON_DEMAND, RESERVATION, SPOT
from catalog.gke import AI_CLUSTER_DOC, Floor
from catalog.nodes import allocatable
from catalog.versions import GIB_INSTALLER_REVISION

GiB = 1024**3
GPU_RESOURCE = "nvidia.com/gpu"  # the device plugin's resource, also the GPU nodes' taint key
INSTALLER_BASE = "https://raw.githubusercontent.com/GoogleCloudPlatform/container-engine-accelerators"

# Google's consumption-option table for A4 and A3 Ultra ("Create a custom AI-optimized GKE cluster
# which uses A4 or A3 Ultra", and AI Hypercomputer "Consumption options"): reservation, flex-start
# and spot; on-demand is not offered for these machines.
A4_A3U_CONSUMPTION = (RESERVATION, FLEX_START, SPOT)
A4_A3U_CONSUMPTION_SOURCE = ("Google's consumption-option table for A4 and A3 Ultra (GKE 'Create a custom "
                             "AI-optimized GKE cluster which uses A4 or A3 Ultra')")

# gIB (GPUDirect over RDMA) paths on the node, mounted read-only into GPU pods in both modes:
# container-engine-accelerators @992db81 gpudirect-rdma/nccl-test-a4-autopilot.yaml (Autopilot) and
# the Standard samples. The NCCL RDMA installer DaemonSet fills them.
GIB_HOST_DIR = "/home/kubernetes/bin/gib"
GIB_MOUNT = "/usr/local/gib"
NVIDIA_HOST_DIR = "/home/kubernetes/bin/nvidia"
NVIDIA_MOUNT = "/usr/local/nvidia"


@dataclass(frozen=True)
class HostDir:
    """A node directory a GPU pod mounts read-only (volume name, path on the node, path in the pod)."""

    volume: str
    host_path: str
    mount_path: str


GIB_HOST_DIRS = (HostDir("nvidia", NVIDIA_HOST_DIR, NVIDIA_MOUNT), HostDir("gib", GIB_HOST_DIR, GIB_MOUNT))


@dataclass(frozen=True)
class Accelerator:
    key: str
    series: str  # Compute Engine's name for the machine series, as users search for it (A4, A3 Ultra, G2)
    machine_type: str
    accelerator_type: str
    gpus_per_node: int
    rdma_nics: int
    # GKE version floors for this machine as the stack uses it (RDMA, driver DEFAULT); never a pin.
    gke_floors: tuple[Floor, ...]
    nccl_tuner_file: str
    vcpus: int
    memory_gb: int  # machine spec, decimal GB
    local_ssds: int  # local NVMe SSDs backing pods' ephemeral storage (checkpoints, /tmp, caches)
    # Per GPU, for the memory model (recipe.memory) and the step-time estimate (recipe.sizing).
    gpu_memory_gib: float  # what CUDA lets PyTorch allocate (torch.cuda total capacity)
    bf16_tflops: float  # dense bf16 tensor-core peak
    hbm_tbps: float  # HBM bandwidth, TB/s
    nvlink_gbps: float  # NVLink bandwidth per GPU (all links, one direction), GB/s
    network_gbps: float  # RDMA bandwidth per GPU between nodes, GB/s, as achieved (not line rate)
    # GKE's gpu_driver_installation_config.gpu_driver_version for the Standard pool (DEFAULT or LATEST);
    # on Autopilot the same choice is the node selector cloud.google.com/gke-gpu-driver-version.
    gpu_driver: str = "DEFAULT"
    gpu_driver_source: str = "cluster-toolkit gke-node-pool default (DEFAULT), as the A4/A3U blueprints use"
    # Consumption options Google offers for the machine; config.load refuses any other (naming the source).
    consumption: tuple[str, ...] = A4_A3U_CONSUMPTION
    consumption_source: str = A4_A3U_CONSUMPTION_SOURCE
    # Autopilot Ray worker request (= limit). Google's Autopilot verl sample (AIHypercomputerSamples
    # gpu/tuning/verl_rl_autopilot ray-cluster worker @6f0d9b35) runs these machines with 180 CPU /
    # 2000Gi: Autopilot places its own DaemonSets (device plugin, gIB installer, logging, multi-network)
    # on the node and rejects a pod that does not fit next to them, so the worker leaves them room.
    autopilot_worker_cpu: int = 180
    autopilot_worker_memory_gib: int = 2000
    host_dirs: tuple[HostDir, ...] = GIB_HOST_DIRS
    # Capacity left for the GCS FUSE sidecar, the NCCL installer and GKE's own DaemonSets (Standard).
    daemon_cpu: float = 4.0
    daemon_memory_gib: int = 32
    # Whether the stack applies the NCCL RDMA (gIB) installer DaemonSet on this machine's nodes.
    nccl_installer: bool = True
    # Whether the stack's Autopilot worker size above has a source for this machine; config refuses
    # clusterMode=autopilot otherwise.
    autopilot: bool = True
    # GPU pool boot disk (GB); None = GKE's default. Machines without local SSDs keep ephemeral storage
    # (/tmp, Ray spill, the GCS FUSE caches) on it, so it must hold the worker's ephemeral request.
    boot_disk_gb: int | None = None
    # The Ray GPU worker's ephemeral-storage request (GiB); None = components.ray_cluster's default,
    # sized for the 8-GPU nodes' local SSDs.
    worker_ephemeral_gib: int | None = None

    @property
    def rdma(self) -> bool:
        """Whether the machine has RDMA NICs: the RoCE VPC, network objects and gIB settings follow."""
        return self.rdma_nics > 0

    @property
    def allocatable_cpu(self) -> float:
        return allocatable(self.vcpus, self.memory_gb * 1e9 / GiB)[0]

    @property
    def allocatable_memory_gib(self) -> float:
        return allocatable(self.vcpus, self.memory_gb * 1e9 / GiB)[1]

    @property
    def worker_cpu(self) -> int:
        """Whole CPUs a Ray GPU worker pod can request next to the node's DaemonSets (Standard)."""
        return int(self.allocatable_cpu - self.daemon_cpu)

    @property
    def worker_memory_gib(self) -> int:
        return int(self.allocatable_memory_gib - self.daemon_memory_gib)

    def worker_size(self, autopilot: bool) -> tuple[int, int]:
        """(CPU, memory GiB) a Ray GPU worker requests in a cluster mode."""
        if autopilot:
            return self.autopilot_worker_cpu, self.autopilot_worker_memory_gib
        return self.worker_cpu, self.worker_memory_gib


ACCELERATORS: dict[str, Accelerator] = {
    "b200": Accelerator(
        key="b200",
        series="A4",
        machine_type="a4-highgpu-8g",
        accelerator_type="nvidia-b200",
        gpus_per_node=8,
        rdma_nics=8,
        # The tutorial's 1.32.2-gke.1422000 is below what Google documents for A4 with RDMA.
        gke_floors=(Floor("1.32.2-gke.1475000", "A4 (B200) with GPUDirect RDMA", AI_CLUSTER_DOC),),
        nccl_tuner_file="/usr/local/gib/configs/tuner_config_a4.txtpb",
        vcpus=224,
        memory_gb=3968,
        local_ssds=32,
        # What CUDA reports for one B200: "Total Global Memory: 178.35 GB" (pytorch/ao#4002, a B200's
        # device query; the GiB figure nvidia-smi's 183359 MiB, NVIDIA/TensorRT-LLM#10278, also gives
        # after the same ~0.4 % driver reserve as the H200's 143771 MiB -> 139.80 GiB measured here).
        gpu_memory_gib=178.35,
        # NVIDIA HGX B200 datasheet: 2.25 PFLOPS dense BF16 (4.5 sparse), 8 TB/s HBM3e, NVLink 5 1.8 TB/s
        # (both directions: 900 GB/s each way).
        bf16_tflops=2250.0, hbm_tbps=8.0, nvlink_gbps=900.0,
        # 8 x 400 Gb/s RoCE NICs = one 50 GB/s NIC per GPU; ~45 GB/s achieved (issue #13's figure).
        network_gbps=45.0,
        # DEFAULT: B200 runs only on R570+ drivers, so GKE's default for A4 already is an R570 driver.
    ),
    "h200": Accelerator(
        key="h200",
        series="A3 Ultra",
        machine_type="a3-ultragpu-8g",
        accelerator_type="nvidia-h200-141gb",
        gpus_per_node=8,
        rdma_nics=8,
        # The tutorial's 1.31.4-gke.1183000 is below the floor for the DEFAULT driver our GPU pool installs.
        gke_floors=(Floor("1.31.5-gke.1169000", "A3 Ultra (H200) with the DEFAULT GPU driver", AI_CLUSTER_DOC),),
        nccl_tuner_file="/usr/local/gib/configs/tuner_config_a3u.txtpb",
        vcpus=224,
        memory_gb=2952,
        local_ssds=32,
        # Measured on an H200 in this project: torch total_memory 150109880320 B = 139.80 GiB, nvidia-smi
        # 143771 MiB (bench/memory_calibration_fsdp2.json gpu_total_bytes).
        gpu_memory_gib=139.8,
        # NVIDIA H200 SXM datasheet: 1,979 TFLOPS BF16 with sparsity (989 dense), 4.8 TB/s, NVLink 900 GB/s
        # (both directions: 450 GB/s each way).
        bf16_tflops=989.0, hbm_tbps=4.8, nvlink_gbps=450.0,
        network_gbps=45.0,  # A3 Ultra: 8 x 400 Gb/s RoCE NICs, one per GPU, as for A4
        # DEFAULT installs R550 on A3 Ultra; the image is built for CUDA 12.8, whose minimum Linux driver
        # is 570.26 (NVIDIA CUDA 12.8 release notes, table 3) and whose PTX JIT needs that driver.
        # LATEST is the R570 production branch (COS gpu_driver_versions policy, board-overlays
        # af3ca4ea^: "LATEST ... 570.133.20 Production Branch").
        gpu_driver="LATEST",
        gpu_driver_source="CUDA 12.8 needs driver >= 570.26 (NVIDIA CUDA 12.8 release notes); "
                          "DEFAULT is R550 on A3 Ultra, LATEST is R570 (COS driver policy)",
    ),
    "l4": Accelerator(
        key="l4",
        series="G2",
        # G2 table ("Accelerator-optimized machine family", G2 machine types,
        # https://docs.cloud.google.com/compute/docs/accelerator-optimized-machines): g2-standard-24 has
        # 2 NVIDIA L4 GPUs, 24 vCPUs, 96 GB; the vCPU/memory figures match SkyPilot's catalog row
        # (catalogs/v8/gcp/vms.csv @006059e0: g2-standard-24,24.0,96.0). The smallest G2 with 2 GPUs:
        # two GPUs exercise the multi-GPU path (NCCL, FSDP sharding, vLLM per GPU) on one node.
        machine_type="g2-standard-24",
        accelerator_type="nvidia-l4",
        gpus_per_node=2,
        # G2 has no RDMA NICs: no RoCE VPC, network objects, gIB plugin or installer; NCCL uses the
        # GPUs' PCIe path within the node (the smoke stack runs one node).
        rdma_nics=0,
        # No machine-specific floor read for G2 without RDMA: the general floors (capacity type, GCS
        # FUSE options) apply.
        gke_floors=(),
        nccl_tuner_file="",
        vcpus=24,
        memory_gb=96,
        local_ssds=0,  # no local SSD asked for: ephemeral storage lives on the boot disk below
        # NVIDIA L4 datasheet: 24 GB GDDR6 (read as decimal GB: a lower bound), 300 GB/s, 121 TFLOPS
        # dense BF16 (242 with sparsity), PCIe Gen4 x16 (64 GB/s both directions, no NVLink).
        gpu_memory_gib=24e9 / GiB,
        bf16_tflops=121.0, hbm_tbps=0.3, nvlink_gbps=32.0,
        # Only a multi-node l4 stack moves data between nodes (the smoke stack is one node). G2 has no
        # RDMA; no source was read for its TCP throughput, so the step estimate assumes a pessimistic
        # 1 GB/s per GPU there.
        network_gbps=1.0,
        # The image is built for CUDA 12.8, whose minimum Linux driver is 570.26 (NVIDIA CUDA 12.8
        # release notes); LATEST is the R570 branch (COS driver policy), DEFAULT is not known to be.
        gpu_driver="LATEST",
        gpu_driver_source="CUDA 12.8 needs driver >= 570.26 (NVIDIA CUDA 12.8 release notes); "
                          "LATEST is R570 (COS driver policy)",
        # Spot and on-demand: the Cloud Billing catalog prices both for g2-standard-24 and nvidia-l4
        # (SkyPilot's scrape, catalogs/v8/gcp/vms.csv @006059e0: Price and SpotPrice columns), and
        # Compute Engine's provisioning models (standard, spot) apply to any VM
        # (https://cloud.google.com/compute/docs/instances/provisioning-models). Reservations and
        # flex-start are left out until a G2 source is read.
        consumption=(ON_DEMAND, SPOT),
        consumption_source="on-demand and spot prices for g2-standard-24 / nvidia-l4 in the Cloud Billing "
                           "catalog (SkyPilot catalogs/v8/gcp/vms.csv); Compute Engine provisioning models",
        host_dirs=(),
        # Assumption: GKE's DaemonSets on a 24-vCPU node (logging, device plugin, GCS FUSE node driver;
        # no gIB installer) fit in 2 CPU / 16 GiB next to the worker and its GCS FUSE sidecar.
        daemon_cpu=2.0,
        daemon_memory_gib=16,
        nccl_installer=False,
        autopilot=False,  # no source for an Autopilot 2xL4 worker size: the smoke stack is Standard
        # A 200 GB boot disk leaves ~94 GiB to pods (GKE's reservation and eviction threshold,
        # catalog.nodes.boot_disk_allocatable_gib), less GKE's DaemonSets: the worker asks 64 GiB (/tmp,
        # Ray spill, the datasets cache, one 16 GiB file cache: the checkpoint mount has none) + the
        # sidecar's 10 GiB. Lowering the request keeps the pool: a bigger boot disk would replace it.
        boot_disk_gb=200,
        worker_ephemeral_gib=64,
    ),
}


def foreign_accelerator_problem(name: str, key: str) -> str | None:
    """A name that spells another accelerator (the tutorial's b200-ray-cluster on H200) misleads operators."""
    other = [k for k in ACCELERATORS if k != key and k in name]
    return f"{name!r} names accelerator {other[0]} but the stack runs {key}" if other else None


def installer_url(autopilot: bool, revision: str = GIB_INSTALLER_REVISION) -> str:
    """The NCCL RDMA (gIB) installer DaemonSet for a cluster mode (container-engine-accelerators gpudirect-rdma/)."""
    variant = "nccl-rdma-installer-autopilot.yaml" if autopilot else "nccl-rdma-installer.yaml"
    return f"{INSTALLER_BASE}/{revision}/gpudirect-rdma/{variant}"


def nccl_env(acc: Accelerator) -> dict[str, str]:
    """NCCL's network selection and tuning for gIB, as one recipe has it, the same in both cluster modes:
    the pods of container-engine-accelerators @992db81 gpudirect-rdma/nccl-test-a4.yaml (Standard) and
    nccl-test-a4-autopilot.yaml (Autopilot) put /usr/local/nvidia/lib64 on LD_LIBRARY_PATH (recipe.grpo
    library_path_env) and source /usr/local/gib/scripts/set_nccl_env.sh, whose exports cluster-toolkit
    @1047080 transcribes (examples/machine-learning/a3-ultragpu-8g/nemo-framework/Dockerfile: "Set the
    following to match what is in /usr/local/gib/scripts/set_nccl_env.sh", NCCL_NET=gIB first; its GKE
    NCCL jobsets export NCCL_NET=gIB the same way). NCCL then loads gIB by its default plugin name,
    libnccl-net.so, from the gIB lib64 both installers copy into /usr/local/nvidia/lib64. No
    NCCL_NET_PLUGIN: the recipe sets none, and the launchers that point it at libnccl-net_internal.so
    unset NCCL_NET (inferred: that library registers under another name than gIB, a mismatch NCCL
    reports only at init; the NCCL check below catches it). The modes differ in NCCL itself: the
    Autopilot installer runs `container_entry.sh install --install-nccl` and so also puts gIB's own
    libnccl.so there, the Standard one (after 2da1c92f) does not.

    NCCL_NET=gIB makes NCCL fail at init when the plugin is missing ("Failed to initialize any NET
    plugin", tests/data/nccl/) instead of silently falling back to TCP sockets, which would train at a
    fraction of the speed; the job's NCCL check (components/scripts/nccl_check.py) runs that init on two
    nodes before the trainer. A machine without RDMA NICs gets none: NCCL's defaults (PCIe within the
    node, sockets between nodes) apply. LD_LIBRARY_PATH is not here: it extends the image's value.
    """
    if not acc.rdma:
        return {}
    return {
        "NCCL_NET": "gIB",
        "NCCL_CROSS_NIC": "0",
        "NCCL_NET_GDR_LEVEL": "PIX",
        "NCCL_P2P_NET_CHUNKSIZE": "131072",
        "NCCL_NVLS_CHUNKSIZE": "524288",
        "NCCL_IB_ADAPTIVE_ROUTING": "1",
        "NCCL_IB_QPS_PER_CONNECTION": "4",
        "NCCL_IB_TC": "52",
        "NCCL_IB_FIFO_TC": "84",
        "NCCL_TUNER_CONFIG_PATH": acc.nccl_tuner_file,
        "NCCL_DEBUG": "WARN",
        # NCCL's bootstrap and socket traffic on the pod network and the gVNIC, never an RDMA NIC: as
        # Google's A4 recipes set it (AI-Hypercomputer/gpu-recipes @c2e6a21a training/a4/llama3-1-70b/
        # nemo-pretraining-gke/16node-bf16-seq8192-gbs512-gcs/templates/workload-job.yaml).
        "NCCL_SOCKET_IFNAME": "eth0,eth1",
        "GLOO_SOCKET_IFNAME": "eth0",
    }
