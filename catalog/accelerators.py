"""The accelerator table: the one place that maps b200/h200 to what GCP and NCCL need.

Values come from REFERENCE.md (cluster-toolkit gke-a4 / gke-a3-ultragpu examples and the
tutorial). Allocatable capacity is derived here with GKE's documented node reservations so
Ray worker requests fit on the node they are meant for.
"""

from __future__ import annotations

from dataclasses import dataclass

from catalog.versions import GIB_INSTALLER_REVISION

GiB = 1024**3
GPU_RESOURCE = "nvidia.com/gpu"  # the device plugin's resource, also the GPU nodes' taint key
INSTALLER_BASE = "https://raw.githubusercontent.com/GoogleCloudPlatform/container-engine-accelerators"


@dataclass(frozen=True)
class Accelerator:
    key: str
    machine_type: str
    accelerator_type: str
    gpus_per_node: int
    rdma_nics: int
    min_gke_version: str
    nccl_tuner_file: str
    vcpus: int
    memory_gb: int  # machine spec, decimal GB
    local_ssds: int  # local NVMe SSDs backing pods' ephemeral storage (checkpoints, /tmp, caches)
    # Per GPU, for the memory model (stacks.memory) and the step-time estimate (stacks.sizing).
    gpu_memory_gib: float  # what CUDA lets PyTorch allocate (torch.cuda total capacity)
    bf16_tflops: float  # dense bf16 tensor-core peak
    hbm_tbps: float  # HBM bandwidth, TB/s
    nvlink_gbps: float  # NVLink bandwidth per GPU (all links, one direction), GB/s
    network_gbps: float  # RDMA bandwidth per GPU between nodes, GB/s, as achieved (not line rate)
    # Capacity left for the GCS FUSE sidecar, the NCCL installer and GKE's own DaemonSets.
    daemon_cpu: float = 4.0
    daemon_memory_gib: int = 32

    @property
    def allocatable_cpu(self) -> float:
        return self.vcpus - gke_reserved_cpu(self.vcpus)

    @property
    def allocatable_memory_gib(self) -> float:
        total = self.memory_gb * 1e9 / GiB
        return total - gke_reserved_memory_gib(total) - 0.1  # 100Mi hard eviction threshold

    @property
    def worker_cpu(self) -> int:
        """Whole CPUs a Ray GPU worker pod can request next to the node's DaemonSets."""
        return int(self.allocatable_cpu - self.daemon_cpu)

    @property
    def worker_memory_gib(self) -> int:
        return int(self.allocatable_memory_gib - self.daemon_memory_gib)


def gke_reserved_cpu(vcpus: int) -> float:
    """GKE's CPU reservation: 6% of the 1st core, 1% of the 2nd, 0.5% of the next 2, 0.25% above 4."""
    tiers = ((1, 0.06), (1, 0.01), (2, 0.005), (float("inf"), 0.0025))
    return _tiered(vcpus, tiers)


def gke_reserved_memory_gib(memory_gib: float) -> float:
    """GKE's memory reservation: 25% of the first 4 GiB, 20% of the next 4, 10% of the next 8,
    6% of the next 112, 2% above 128 GiB."""
    tiers = ((4, 0.25), (4, 0.20), (8, 0.10), (112, 0.06), (float("inf"), 0.02))
    return _tiered(memory_gib, tiers)


def _tiered(amount: float, tiers: tuple[tuple[float, float], ...]) -> float:
    reserved, left = 0.0, amount
    for size, rate in tiers:
        take = min(left, size)
        reserved += take * rate
        left -= take
        if left <= 0:
            break
    return reserved


ACCELERATORS: dict[str, Accelerator] = {
    "b200": Accelerator(
        key="b200",
        machine_type="a4-highgpu-8g",
        accelerator_type="nvidia-b200",
        gpus_per_node=8,
        rdma_nics=8,
        min_gke_version="1.32.2-gke.1422000",
        nccl_tuner_file="/usr/local/gib/configs/tuner_config_a4.txtpb",
        vcpus=224,
        memory_gb=3968,
        local_ssds=32,
        # GCP A4: 8 x B200, 1,440 GB HBM3e (180 GB per GPU); read as decimal GB, a lower bound.
        gpu_memory_gib=180e9 / GiB,
        # NVIDIA HGX B200 datasheet: 2.25 PFLOPS dense BF16 (4.5 sparse), 8 TB/s HBM3e, NVLink 5 1.8 TB/s
        # (both directions: 900 GB/s each way).
        bf16_tflops=2250.0, hbm_tbps=8.0, nvlink_gbps=900.0,
        # 8 x 400 Gb/s RoCE NICs = one 50 GB/s NIC per GPU; ~45 GB/s achieved (issue #13's figure).
        network_gbps=45.0,
    ),
    "h200": Accelerator(
        key="h200",
        machine_type="a3-ultragpu-8g",
        accelerator_type="nvidia-h200-141gb",
        gpus_per_node=8,
        rdma_nics=8,
        min_gke_version="1.31.4-gke.1183000",
        nccl_tuner_file="/usr/local/gib/configs/tuner_config_a3u.txtpb",
        vcpus=224,
        memory_gb=2952,
        local_ssds=32,
        # Measured on an H200 in this project: torch "total capacity of 139.80 GiB" (bench/memory_calibration.json).
        gpu_memory_gib=139.8,
        # NVIDIA H200 SXM datasheet: 1,979 TFLOPS BF16 with sparsity (989 dense), 4.8 TB/s, NVLink 900 GB/s
        # (both directions: 450 GB/s each way).
        bf16_tflops=989.0, hbm_tbps=4.8, nvlink_gbps=450.0,
        network_gbps=45.0,  # A3 Ultra: 8 x 400 Gb/s RoCE NICs, one per GPU, as for A4
    ),
}

# gIB (GPUDirect over RDMA) paths on the node, mounted read-only into GPU pods on Standard.
GIB_HOST_DIR = "/home/kubernetes/bin/gib"
GIB_MOUNT = "/usr/local/gib"
NVIDIA_HOST_DIR = "/home/kubernetes/bin/nvidia"
NVIDIA_MOUNT = "/usr/local/nvidia"


def foreign_accelerator_in_name(name: str, key: str) -> str | None:
    """A name that spells another accelerator (the tutorial's b200-ray-cluster on H200) misleads operators."""
    other = [k for k in ACCELERATORS if k != key and k in name]
    return f"{name!r} names accelerator {other[0]} but the stack runs {key}" if other else None


def installer_url(autopilot: bool, revision: str = GIB_INSTALLER_REVISION) -> str:
    """The NCCL RDMA (gIB) installer DaemonSet for a cluster mode (container-engine-accelerators gpudirect-rdma/)."""
    variant = "nccl-rdma-installer-autopilot.yaml" if autopilot else "nccl-rdma-installer.yaml"
    return f"{INSTALLER_BASE}/{revision}/gpudirect-rdma/{variant}"


def nccl_env(acc: Accelerator) -> dict[str, str]:
    """NCCL settings for gIB on this accelerator (REFERENCE.md / container-engine-accelerators).

    NCCL_NET=gIB makes NCCL fail at init when the RDMA plugin is missing instead of silently
    falling back to TCP sockets, which would train at a fraction of the speed.
    """
    return {
        "NCCL_NET": "gIB",
        "NCCL_NET_PLUGIN": f"{GIB_MOUNT}/lib64/libnccl-net_internal.so",
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
        "LD_LIBRARY_PATH": f"{NVIDIA_MOUNT}/lib64:{GIB_MOUNT}/lib64",
        "GLOO_SOCKET_IFNAME": "eth0",
    }
