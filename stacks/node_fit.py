"""The gate's node-fit rule: on Standard, each pod the stack registers (the Ray head, the GPU workers, the
staging Job) fits what its node pool's node leaves to pods, or the config is refused, naming the key that
changes it; a pod that does not fit stays Pending until jobReadyTimeoutMinutes ends.

The pods are sized from the templates the components render from the same args compose gives them
(stacks.component_rules), the nodes from the pools those args describe; the model is catalog.node_fit's,
which the offline plan's table (tools.node_fit) shows. `cfg` is a stacks.config.StackConfig.
"""

from __future__ import annotations

from catalog import naming
from catalog.node_fit import NodeShape, node_shape, pod_requests, short
from catalog.problems import Problem, named
from components.cluster import CPU_POOL_NAME, GPU_POOL_NAME, GkeClusterArgs
from components.data_prep import DataPrepArgs, sized_template
from components.ray_cluster import RayCluster, RayClusterArgs
from stacks import component_rules
from stacks.keys import full


def _fix(key: str, machine_key: str) -> str:
    return f"lower {named(full(key))} or use a larger {named(full(machine_key))}"


def problems(cfg) -> list[Problem]:
    """Every pod that would not fit its Standard node (none on Autopilot, which sizes nodes to pods)."""
    cl, acc = cfg.cluster, cfg.accelerator
    if cl.autopilot:
        return []
    args = {type(a): a for a in component_rules.gate_args(cfg)}
    ray, stage, pool = args[RayClusterArgs], args[DataPrepArgs], args[GkeClusterArgs].cpu_pool
    cpu = node_shape(CPU_POOL_NAME, pool.machine_type, pool.boot_disk_gb, 0)
    gpu = node_shape(GPU_POOL_NAME, acc.machine_type, acc.boot_disk_gb, acc.local_ssds)
    found: list[Problem] = []
    # (pod, template, node, {resource: (the key that changes it, its value, what to do)})
    # A head that asks for the whole machine or more: the machine is what to change; otherwise the request.
    head_cpu_key = "cpuMachineType" if (naming.machine_vcpus(cl.cpu_machine_type) or 0) <= cl.head_cpu else "rayHeadCpu"
    head_fix = {"cpu": (head_cpu_key, getattr(cl, "head_cpu" if head_cpu_key == "rayHeadCpu" else "cpu_machine_type"),
                        _fix("rayHeadCpu", "cpuMachineType")),
                "memory": ("rayHeadMemoryGib", cl.head_memory_gib, _fix("rayHeadMemoryGib", "cpuMachineType")),
                "ephemeral-storage": ("cpuMachineType", cl.cpu_machine_type, "the CPU pool's boot disk is sized "
                                      "for the head (catalog.nodes.cpu_boot_disk_gb): report this")}
    machine = ("cpuMachineType", cl.cpu_machine_type, f"use a larger {named(full('cpuMachineType'))}")
    stage_fix = {"cpu": machine, "memory": machine,
                 "ephemeral-storage": ("model", cfg.model, "its largest file sizes the staging disk: use a smaller "
                                       "model")}
    worker = ("accelerator", acc.key, "the accelerator's worker size (catalog/accelerators.py) does not fit its "
              "node: report this")
    pods: list[tuple[str, dict, NodeShape | None, dict]] = [
        ("the Ray head", RayCluster.head_group(ray)["template"], cpu, head_fix),
        ("a Ray GPU worker", RayCluster.worker_group(ray)["template"], gpu, dict.fromkeys(head_fix, worker)),
        ("the staging Job's pod", sized_template(stage), cpu, stage_fix)]
    for label, template, node, fixes in pods:
        if node is None:  # a machine type the catalog cannot size: its own row says what is allowed
            continue
        need, _gpu = pod_requests(template)
        for resource, text in short(label, need, node).items():
            key, value, fix = fixes[resource]
            found.append(Problem(full(key), f"{text}; it would stay Pending: {fix}", value))
    return found

