"""Offline plan: what a stack would create, with no credentials, Pulumi CLI or network.

    python -m tools.plan --stack b200 [--config Pulumi.b200.yaml] [--out DIR] [--preview] [--quotas FILE]

Runs the real program under Pulumi mocks and writes DIR/plan.json (every registration with
its inputs, secrets replaced by "[secret]"; "memory": the per-GPU memory breakdown of the GRPO
run, "sizing": steps, checkpoints, bucket space, GPU-hours and the estimated step time;
"job": the Ray job's command, typed (recipe.job_spec: the supervisor's options, the trainer's overrides);
"placement": where each process of the run lands and which mount serves each path it uses,
tools.placement, whose problems fail the plan; "warnings"),
DIR/manifests/*.yaml (the Kubernetes objects) and DIR/graph.mmd (components and
their dependencies), then prints the stack's hourly price by resource class and the estimated
cost of the configured run (from the sizing).
The stack file is read as the Pulumi CLI reads it (tools.stack_file: yaml.v3's scalars, Pulumi.yaml's
declared types and defaults merged in). The shell's PULUMI_CONFIG, PULUMI_CONFIG_<KEY>
and PULUMI_CONFIG_SECRET_KEYS are ignored (and the plan says so): it follows the stack file. A bad stack name, stack
file, config (a run that would not fit in GPU memory included) or output folder: exit 2 with the
key or argument named, nothing written. The plan only clears a folder holding its own marker.
The mocks answer the GKE version lookup with sample channel data (tools.engine_versions); with
--preview the plan is `pulumi preview` on an empty project, where that lookup waits for the APIs
this run enables, so the version shows as resolved at deploy time.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import hashlib
import json
import re
import shutil
import sys
from collections.abc import Collection
from pathlib import Path
from typing import Any

import yaml

from catalog.problems import ConfigError, Problem
from stacks import config as stack_config
from stacks import cross_keys
from tools import quota_source, stack_file
from tools.plan_graph import ROOT as ROOT_PARENT
from tools.plan_graph import PlanGraph

ROOT = Path(__file__).resolve().parent.parent
SECURE_PLACEHOLDER = stack_file.SECURE_PLACEHOLDER
PLAN_ROOT = ROOT / "build" / "plan"
MARKER = ".verl-gke-plan"  # the plan only ever clears a folder that holds this file
MARKER_TEXT = "Written by `python -m tools.plan`; its next run into this folder replaces the content.\n"
# libyaml's emitter when PyYAML has it: the same YAML as SafeDumper's (folded at other points), ten times faster.
_DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
# Inputs worth a glance in the printed tree.
_TREE_KEYS = ("name", "location", "region", "ipCidrRange", "mtu", "networkProfile", "machineType",
              "enableAutopilot", "nodeLocations", "minMasterVersion", "accountId", "role", "kind", "file",
              "entrypoint")


def stack_of(path: Path) -> str:
    """The stack a `Pulumi.<stack>.yaml` file belongs to (for the CLI's messages)."""
    name = Path(path).name
    return name[len("Pulumi."):-len(".yaml")] if name.startswith("Pulumi.") and name.endswith(".yaml") else name


def read_stack_file(path: Path, stack: str | None = None) -> tuple[dict[str, str], list[str]]:
    """Stack YAML -> (config as the Pulumi CLI hands it to the program, its secret keys): tools.stack_file,
    whose agreement with the real CLI tests/test_cli_loading.py checks. `secure:` values cannot be decrypted
    offline: they are SECURE_PLACEHOLDER. What the CLI refuses: StackFileError."""
    reading = stack_file.read(path, stack or stack_of(path))
    return dict(reading.values), list(reading.secret_keys)


def build_plan(stack: str, raw: dict[str, str], secret_keys: list[str], preview: bool = False,
               quota_values: quota_source.QuotaSource = quota_source.SAMPLE) -> dict[str, Any]:
    from stacks import quotas as quota_check
    from stacks.compose import program
    from tools import mocking

    # The gate first: bad config exits 2 before the program (and the mocks) ever start.
    cfg = gate(raw, stack, secret_keys, quota_values)
    wanted = quota_check.needs(cfg)
    run = mocking.run(lambda: program(allow_placeholder_project=True), raw, stack, secret_keys,
                      project=stack_config.PROJECT, preview=preview,
                      quotas=quota_values.mock_answers(wanted))
    resources = []
    for r in sorted(run.resources, key=lambda r: r.urn):  # registration order is async: sort for stable diffs
        depends = list(dict.fromkeys(r.depends_on + [u for urns in r.property_dependencies.values() for u in urns]))
        resources.append({
            "urn": r.urn, "type": r.type, "name": r.name, "custom": r.custom, "parent": r.parent,
            "dependsOn": depends, "provider": r.provider, "protect": r.protect,
            "retainOnDelete": r.retain_on_delete, "deletedWith": r.deleted_with, "aliases": r.aliases,
            "ignoreChanges": r.ignore_changes,
            **({"replaceOnChanges": r.replace_on_changes} if r.replace_on_changes else {}),
            "inputs": r.inputs,
        })
    outputs = {k: (mocking.SECRET if k in run.secret_outputs else v) for k, v in run.outputs.items()}
    plan = {"project": stack_config.PROJECT, "stack": stack, "resources": resources, "outputs": outputs,
            **run_figures(cfg), "job": job_spec(cfg)}
    plan["warnings"] = [*plan.get("warnings", []), *quota_values.warnings(cfg.region, wanted),
                        *program_messages(run.logs, cfg.warnings)]
    # A secret handed over with its value (as `pulumi up` hands it; the k8s tier plans with stand-in values) is
    # scrubbed by value wherever it ended up; the gate refuses one typed in plain text in a stack file.
    secrets = {*secret_keys, *(k.full for k in stack_config.KEYS if k.secret)}
    return scrub(plan, [raw[k] for k in secrets if raw.get(k) and raw[k] != SECURE_PLACEHOLDER])


def job_spec(cfg: stack_config.StackConfig) -> dict[str, Any] | None:
    """The Ray job's command as the spec the RayJob's entrypoint is rendered from (None with submitJob off)."""
    from stacks import derived

    job = derived.of(cfg).job
    return job.spec.as_dict() if job else None


def program_messages(logs: list[tuple[str, str]], printed: tuple[str, ...]) -> list[str]:
    """What the program logged at warning or error level (pulumi.log: what `pulumi up` shows) beyond the
    config's warnings, which the plan prints itself: the mocks record the log instead of printing it, so a
    lookup's non-fatal preflight finding or an error would otherwise never reach the reader."""
    out: list[str] = []
    for level, message in logs:
        if level in ("warning", "error", "critical") and message not in printed:
            text = message if level == "warning" else f"{level}: {message}"
            if text not in out:
                out.append(text)
    return out


def gate(raw: dict[str, str], stack: str, secret_keys: Collection[str] = (),
         quota_values: quota_source.QuotaSource = quota_source.SAMPLE) -> stack_config.StackConfig:
    """The config gate (stacks.config.load: every key, every component's rules) plus the quota
    preflight against `quota_values` (the plan's sample project, or --quotas FILE; the mocks answer the same):
    a stack that `pulumi up` would stop at the quota check stops here too, with exit 2 and every problem,
    before the program runs."""
    from stacks import quotas

    cfg = stack_config.load(raw, stack, allow_placeholder_project=True, secret_keys=secret_keys)
    wanted = quota_values.checked(quotas.needs(cfg))
    found = quotas.quota_problems(cfg, wanted, quota_values.infos(wanted))
    fatal = [dataclasses.replace(p, allowed=f"{p.allowed} ({quota_values.label})") for p in found if p.fatal]
    fatal += quota_values.hint() if fatal else []
    fatal += gke_version_problems(cfg)
    if fatal:
        raise ConfigError(fatal)
    return cfg


def gke_version_problems(cfg: stack_config.StackConfig) -> list[Problem]:
    """The program's own GKE version check (preflight.resolve_gke_version) on the versions the plan's
    mocks answer (tools/engine_versions.py CURRENT): a pin GKE does not offer, or a minor the channel
    lacks, stops here with exit 2 instead of failing inside the program."""
    from stacks import derived, keys, preflight
    from tools import engine_versions

    cl = cfg.cluster
    found = engine_versions.lookup(engine_versions.CURRENT, derived.of(cfg).gke_version_prefix)
    resolved = preflight.resolve_gke_version(
        found, channel=cl.release_channel, pin=cl.gke_version, floors=cl.floors, location=cfg.cluster_location,
        pin_key=keys.full("gkeVersion"), channel_key=keys.full("releaseChannel"))
    return [dataclasses.replace(p, allowed=f"{p.allowed} (the plan's sample GKE versions, tools/engine_versions.py)")
            for p in resolved.problems if p.fatal]


def run_figures(cfg: stack_config.StackConfig) -> dict[str, Any]:
    """The GRPO run's memory breakdown (recipe.memory) and sizing (recipe.sizing); empty for an
    uncatalogued model."""
    from catalog.models import model_spec
    from recipe import grpo, sizing

    spec = model_spec(cfg.model)
    # The data the run trains on: GSM8K's figures or what stacks.dataset read from the stack's files.
    dataset = {**cfg.data.as_dict(), "notes": list(cfg.task_notes)}
    if cfg.task is not None and cfg.task.reward is not None:  # the plan never runs it: say what does
        from stacks.dataset import check_command
        dataset["notes"].append(f"reward smoke test (your code, run contained): {check_command(cfg.stack)} "
                                "(with the plan's --config, if it had one)")
    if spec is None:
        return {"memory": None, "sizing": None, "dataset": dataset, "warnings": list(cfg.warnings)}
    g = cfg.grpo
    mem = grpo.memory_breakdown(g, spec, cfg.accelerator, cfg.total_gpus, data=cfg.data).as_dict()
    mem["settings"] = {"tensor_parallel_size": g.tensor_parallel_size, "ppo_max_token_len_per_gpu":
                       g.ppo_max_token_len_per_gpu, "log_prob_max_token_len_per_gpu": g.log_prob_max_token_len_per_gpu,
                       "use_dynamic_bsz": g.use_dynamic_bsz, "fsdp_size": g.fsdp_size,
                       "gpu_memory_utilization": g.gpu_memory_utilization}
    # Each layout the recipe weighed (recipe.tuning), derived in full; `chosen` is the one in the command.
    layouts = [dataclasses.asdict(o) for o in g.layout_options]
    return {"memory": mem, "layouts": layouts, "sizing": sizing.run_sizing(cfg).as_dict(), "dataset": dataset,
            "checkpoints": checkpoint_figures(cfg), "warnings": list(cfg.warnings)}


def checkpoint_figures(cfg: stack_config.StackConfig) -> dict[str, Any]:
    """The run's checkpoint folder, one save's time and share of the run, the barrier's timeout, and how
    to remove the folders of superseded runs (stacks.checkpoints)."""
    import posixpath

    from catalog.gcsfuse import CHECKPOINT_DIR
    from catalog.paths import CHECKPOINT_MOUNT
    from stacks import checkpoints, derived

    t = checkpoints.stack_save_time(cfg)
    folder = derived.of(cfg).paths.checkpoint_dir
    parent, run = posixpath.split(folder)
    prefix = f"{CHECKPOINT_DIR}/{posixpath.relpath(parent, CHECKPOINT_MOUNT)}/"
    return {"folder": folder, "run": run, "saveSeconds": round(t.seconds, 1), "saves": t.saves,
            "saveShare": round(t.share, 3), "ncclTimeoutS": t.nccl_timeout_s,
            "writeGBpsPerNode": checkpoints.WRITE_GBPS_PER_NODE,
            "cadence": checkpoints.stack_cadence(cfg).as_dict(), "capacity": cfg.capacity.kind,
            "cleanup": (f'gcloud storage ls "gs://$(pulumi stack output bucket)/{prefix}" | grep -v "/{run}/$" '
                        "| xargs -r gcloud storage rm -r")}


def report(plan: dict[str, Any]) -> str:
    """The memory breakdown and the sizing, as printed under the tree."""
    m, z = plan.get("memory"), plan.get("sizing")
    if not m or not z:
        return "memory / sizing: the model is not in catalog/models.py"
    st = m["settings"]
    ext = "  [extrapolated beyond the 7B calibration]" if m["extrapolated"] else ""
    lines = [
        f"GPU memory per GPU (GiB of {m['gpu_gib']}; {m['torch_budget']} for PyTorch){ext}",
        f"  shards      over {m['shard']} GPUs (fsdp_size {st['fsdp_size']}): weights {m['actor_weights']}  "
        f"grads {m['actor_grads']}  Adam {m['adam_state']}  optimizer step {m['optimizer_step']}  "
        f"FSDP buffers {m['fsdp_gather']}  (reference on the host, as verl 0.6.1 keeps it)",
        f"  update      {m['update_peak']} peak at {st['ppo_max_token_len_per_gpu']} tokens: activations "
        f"{m['train_activations']} + logits {m['train_logits']} + eager entropy {m['train_entropy']}  "
        f"{'fits' if m['update_fits'] else 'DOES NOT FIT'}",
        f"  log-prob    {m['logprob_peak']} peak at {st['log_prob_max_token_len_per_gpu']} tokens: logits "
        f"{m['logprob_logits']} + eager entropy {m['logprob_entropy']} + units {m['logprob_units']}  "
        f"{'fits' if m['logprob_fits'] else 'DOES NOT FIT'}",
        f"  rollout     resident {m['rollout_resident']} + vLLM pool {m['vllm_pool']} "
        f"(gpu_memory_utilization {st['gpu_memory_utilization']}, TP {st['tensor_parallel_size']}): weights "
        f"{m['vllm_weights']} + activations {m['vllm_activations']} + KV cache {m['kv_cache']}  "
        f"{'fits' if m['rollout_fits'] else 'DOES NOT FIT'}",
        f"  KV cache    {m['kv_tokens']:,} tokens per replica ({m['kv_bytes_per_token']:,} B/token/GPU) for "
        f"{m['kv_tokens_needed']:,} needed  {'holds the batch' if m['kv_holds_batch'] else 'TOO SMALL: preemption'}",
        *_layout_lines(plan.get("layouts") or []),
        *_dataset_lines(plan.get("dataset")),
        "Run sizing",
        f"  steps       {_steps(z)} ({z['updates_per_step']} updates each); "
        f"{z['rollout_sequences_per_step']} sequences, ~{z['rollout_tokens_per_step']:,} tokens per step "
        f"(max {z['rollout_tokens_per_step_max']:,})",
        f"  checkpoints {z['checkpoint_gb']} GB each, {z['checkpoints_saved']} saved, {z['checkpoints_kept']} kept; "
        f"bucket {z['bucket_gb']} GB (model {z['model_gb']})",
        *([f"  saves       {c['saves']} x ~{c['saveSeconds']} s at {c['writeGBpsPerNode']} GB/s per node = "
           f"{c['saveShare']:.0%} of the run (kept under 10 %); nccl_timeout {c['ncclTimeoutS']} s",
           *_cadence_lines(c),
           f"  run folder  {c['folder']} (a changed run starts in a new one)",
           f"  superseded  {c['cleanup']}"] if (c := plan.get("checkpoints")) else []),
        f"  ESTIMATE    {z['est_step_seconds_low']} / {z['est_step_seconds']} / {z['est_step_seconds_high']} s per "
        f"step (low / expected / high); expected {z['est_step_breakdown']}",
        f"  ESTIMATE    {z['validations']} validations x {z['est_validation_seconds']} s; training "
        f"{z['est_run_hours_low']} / {z['est_run_hours']} / {z['est_run_hours_high']} h on {z['gpus']} GPUs = "
        f"{z['gpu_hours']} GPU-hours expected (the whole run, start-up to scale-down: the run estimate below)",
    ]
    return "\n".join(lines)  # the warnings: printed once, last (main)


def _cadence_lines(c: dict[str, Any]) -> list[str]:
    """How often the run saves, why, and the work one preemption costs (stacks.checkpoints.cadence)."""
    k = c["cadence"]
    every = (f"every {k['save_freq']} steps" if k["save_freq"] > 0 else "never") + \
        (" (derived: Young's optimum for the save time and the interruption rate)" if k["derived"] else
         f" ({stack_config.KEYS_BY_NAME['grpoSaveFreq'].full})")
    return [f"  cadence     {every}, {k['contents']} checkpoints ({stack_config.KEYS_BY_NAME['grpoSaveContents'].full}"
            f"); {c['capacity']}: a GPU node of the run lost every ~{k['group_interruption_hours']} h "
            f"({k['basis']})",
            f"  ESTIMATE    {k['expected_interruptions']} interruptions expected in the run; each redoes "
            f"~{k['lost_minutes']} min of training (half of the {k['interval_minutes']} min between saves)"]


def _steps(z: dict[str, Any]) -> str:
    """Steps per epoch x epochs, and the cap that ends the run sooner (grpoTotalTrainingSteps) when one does."""
    epochs = f"{z['steps_per_epoch']} per epoch x {z['total_epochs']} = "
    if z.get("steps_cap"):
        key = stack_config.KEYS_BY_NAME["grpoTotalTrainingSteps"].full
        return epochs + f"{z['steps_per_epoch'] * z['total_epochs']}, capped at {z['total_steps']} by {key}"
    return epochs + str(z["total_steps"])


# A secret this long is found inside longer text too; a shorter one (`hfToken: '-'`) only as a whole value:
# replacing every `-` in the plan would mangle it and redact nothing.
MIN_EMBEDDED_SECRET = cross_keys.SECRET_IN_TEXT_MIN  # the gate looks for secrets in overrides by the same rule


def _layout_lines(layouts: list[dict[str, Any]]) -> list[str]:
    if len(layouts) < 2:
        return []
    lines = ["Layouts weighed (actor.fsdp_config.fsdp_size; ESTIMATE expected step times, FSDP collectives "
             "overlapped as FSDP2 prefetches)"]
    for o in layouts:
        lines.append(
            f"  {'->' if o['chosen'] else '  '} {o['name']:<10} fsdp_size {o['fsdp_size']:>3}: "
            f"step {o['step_seconds']} s, "
            f"update peak {o['update_peak_gib']} GiB, log-prob peak {o['logprob_peak_gib']} GiB, budgets "
            f"{o['ppo_max_token_len_per_gpu']}/{o['log_prob_max_token_len_per_gpu']}, TP {o['tensor_parallel_size']}, "
            f"checkpoint {o['checkpoint_gb']} GB, collectives {o['collective_s']} s per update micro-batch "
            f"({o['internode_share']:.3g} of the shard group's bytes on the NICs"
            f"{', the replica all-reduce all on them' if o['name'].startswith('HSDP') else ''})  "
            f"{'fits' if o['fits'] else 'DOES NOT FIT'}")
    return lines


def _dataset_lines(d: dict[str, Any] | None) -> list[str]:
    if not d:
        return []
    return [f"Dataset {d['name']}: {d['train_rows']:,} training rows ({d['dropped_rows']:,} dropped as overlong), "
            f"{d['val_rows']:,} validation rows; mean prompt {d['mean_prompt_tokens']} / response "
            f"{d['mean_response_tokens']} tokens ({d['lengths_basis']})", *(f"  {n}" for n in d.get("notes", []))]


def scrub(value: Any, secrets: list[str]) -> Any:
    """Replace secrets by value in the plan's structured data: a string equal to a secret, or (for a
    secret of MIN_EMBEDDED_SECRET characters or more) every occurrence inside a string."""
    secrets = [s for s in secrets if s]
    if not secrets:
        return value
    if isinstance(value, dict):
        return {k: scrub(v, secrets) for k, v in value.items()}
    if isinstance(value, list):
        return [scrub(v, secrets) for v in value]
    if isinstance(value, str):
        if value in secrets:
            return "[secret]"
        for s in sorted(secrets, key=len, reverse=True):
            if len(s) >= MIN_EMBEDDED_SECRET:
                value = value.replace(s, "[secret]")
    return value


def manifests(plan: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Kubernetes objects the stack would apply, keyed by a file name."""
    out: dict[str, dict[str, Any]] = {}
    for r in plan["resources"]:
        inputs = r["inputs"]
        if not r["type"].startswith("kubernetes:") or "kind" not in inputs:
            continue
        meta = inputs.get("metadata") or {}
        obj_name = meta.get("name") or f"{r['name']} (auto-named)"
        fname = re.sub(r"[^a-z0-9.-]+", "-", f"{inputs['kind']}-{meta.get('namespace', '')}-{obj_name}".lower())
        out[re.sub(r"-+", "-", fname).strip("-") + ".yaml"] = inputs
    return out


def mermaid(plan: dict[str, Any]) -> str:
    """Top-level components and the dependencies between them (edges point dependency -> user)."""
    graph = PlanGraph(plan)
    by_urn = graph.resources

    def shown(urn: str) -> bool:
        return not by_urn[urn]["type"].startswith("pulumi:providers:")

    nodes: dict[str, str] = {}
    edges: set[tuple[str, str]] = set()
    for urn, r in by_urn.items():
        t = graph.top(urn)
        if not shown(t):
            continue
        nodes[t] = by_urn[t]["name"]
        for dep in r["dependsOn"]:
            d = graph.top(dep) if dep in by_urn else None
            if d and d != t and shown(d):
                edges.add((d, t))
    ids = {urn: re.sub(r"\W", "_", name) for urn, name in nodes.items()}
    lines = ["flowchart LR"]
    for urn, name in nodes.items():
        lines.append(f'  {ids[urn]}["{name}<br/><small>{by_urn[urn]["type"]}</small>"]')
    for d, t in sorted(edges):
        if d in ids:
            lines.append(f"  {ids[d]} --> {ids[t]}")
    return "\n".join(lines) + "\n"


def tree(plan: dict[str, Any]) -> str:
    graph = PlanGraph(plan)
    lines = [f"{plan['project']} / {plan['stack']}: {len(plan['resources'])} resources"]
    outputs = plan["outputs"]
    for label, key in (("GKE version", "gkeVersion"), ("node service account", "nodeServiceAccount")):
        if key in outputs:
            lines.append(f"{label}: {outputs[key] if outputs[key] is not None else '[unknown]'}")

    def walk(parent: str, depth: int) -> None:
        for r in sorted((graph.resources[u] for u in graph.children.get(parent, [])), key=lambda r: r["name"]):
            shown = {k: r["inputs"][k] for k in _TREE_KEYS if k in r["inputs"] and k != "name"}
            name = r["inputs"].get("name") or (r["inputs"].get("metadata") or {}).get("name") or ""
            detail = " ".join(f"{k}={json.dumps(v)}" for k, v in shown.items())
            flags = "".join(f" [{f}]" for f, on in (("retain", r["retainOnDelete"]), ("protect", r["protect"]))
                            if on)
            lines.append(f"{'  ' * depth}{'+' if r['custom'] else '*'} {r['name']} ({r['type']})"
                         f"{' ' + json.dumps(name) if name else ''}{flags} {detail}".rstrip())
            walk(r["urn"], depth + 1)

    walk(ROOT_PARENT, 1)
    lines.append("outputs:")
    lines += [f"  {k}: {json.dumps(v)}" for k, v in plan["outputs"].items()]
    return "\n".join(lines)


class UsageError(Exception):
    """A bad invocation: exit 2 with this message, before anything is read, run or written."""


def folder_name(stack: str) -> str:
    """The default output folder's name for a stack: never `.`, `..` or anything a path resolves.

    A name with characters other than [A-Za-z0-9_-] gets them replaced and a hash of the real name
    appended, so two stacks never share a folder (`a.b` and `a_b` differ).
    """
    safe = re.sub(r"[^A-Za-z0-9_-]", "_", stack)
    return safe if safe == stack else f"{safe}-{hashlib.sha256(stack.encode()).hexdigest()[:8]}"


def default_out(stack: str) -> Path:
    return PLAN_ROOT / folder_name(stack)


def check_stack_name(stack: str) -> None:
    """Pulumi's own rule for a stack name (tokens.ParseStackName); the plan takes the plain name."""
    if "/" in stack:
        raise UsageError(f"--stack {stack!r}: give the stack's own name; an organization/project "
                         "qualified name has no meaning offline")
    try:
        stack_file.validate_stack_name(stack)
    except ValueError as err:
        raise UsageError(f"--stack {stack!r}: {err}") from None


def stack_names() -> list[str]:
    """The stacks that have a stack file next to Pulumi.yaml."""
    return sorted(stack_of(p) for p in ROOT.glob("Pulumi.*.yaml"))


def stack_path(stack: str, config: Path | None = None) -> Path:
    """The stack file to read: `config`, else Pulumi.<stack>.yaml next to Pulumi.yaml. UsageError names a
    missing file and, for the default one, the stacks that do have a file (read_stack_file would take a
    missing file for an empty one and blame the first required key)."""
    check_stack_name(stack)  # the name becomes a file name: never `../x`
    if config is not None:
        if problem := _file_problem(config):
            raise UsageError(f"--config {config}: {problem}")
        return config
    path = ROOT / f"Pulumi.{stack}.yaml"
    if (problem := _file_problem(path)) == NO_FILE:
        here = ", ".join(stack_names()) or "none"
        raise UsageError(f"{path.name}: no such stack file, so no stack {stack!r} here (stacks with a file: {here}); "
                         "name one with --stack, or give the stack's file with --config")
    if problem:
        raise UsageError(f"{path.name}: {problem}")
    return path


NO_FILE = "no such stack file"


def _file_problem(path: Path) -> str | None:
    """stack_file's rule on what may be read as a stack file, by stat (never an open, which a FIFO blocks)."""
    try:
        return stack_file.kind_problem(path.stat())
    except FileNotFoundError:
        return NO_FILE
    except OSError as err:
        return f"cannot be read ({err.strerror or err})"


def check_out(out: Path) -> None:
    """The output folder must be new, empty, or one the plan wrote before (it holds our marker).

    Anything else (a file, a symlink, a folder with other content, the project or a folder holding
    it) is refused, so the plan never deletes or overwrites what it did not write.
    """
    if out.is_symlink():
        raise UsageError(f"--out {out}: is a symbolic link; name a real folder")
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out {out}: exists and is not a folder")
    resolved = out.resolve()
    if resolved == ROOT or resolved in ROOT.parents:
        raise UsageError(f"--out {out}: is the project or a folder holding it; name a folder of its own")
    if out.is_dir() and any(out.iterdir()) and not _ours(out):
        raise UsageError(f"--out {out}: exists, is not empty and holds no {MARKER} marker (the plan did "
                         "not write it); name a new or empty folder")


def _ours(out: Path) -> bool:
    marker = out / MARKER
    return marker.is_file() and not marker.is_symlink()


def price_report(cfg: stack_config.StackConfig, run: dict[str, Any] | None = None) -> str:
    """The hourly price table, then the whole run's estimate (run_estimate's text) when there is one."""
    from catalog.models import model_spec
    from stacks import cost

    table = cost.render_hourly(cost.hourly(cfg))
    if model_spec(cfg.model) is None:  # no size figures: the hourly price still holds
        return "\n".join([table, f"run estimate: {cfg.model} is not in catalog/models.py"])
    return "\n".join([table, run["text"]]) if run is not None else table


# --- ESTIMATE: the whole run's hours and dollars (issue #47) --------------------------------------------------
def run_estimate(cfg: stack_config.StackConfig, plan: dict[str, Any]) -> dict[str, Any] | None:
    """The run from `pulumi up` to the last GPU node gone, low / expected / high: the critical path at the
    staging figure's range, then stacks.run_time's phases, priced by stacks.cost. None for an uncatalogued
    model. Keys: json (for plan.json: runEstimate), text (printed), warnings."""
    from catalog import phases
    from catalog.models import model_spec
    from recipe import sizing
    from stacks import cost, derived, run_time
    from tools import critical_path as cp

    spec = model_spec(cfg.model)
    if spec is None:
        return None
    weights = derived.of(cfg).weights_gb
    crits = {c: cp.compute(plan, weights, rate) for c, rate in zip(sizing.CASES, phases.DOWNLOAD_MB_PER_S_RANGE,
                                                                     strict=True)}
    z = sizing.run_sizing(cfg)
    tl = run_time.timeline(z, spec, cfg.gpu_nodes, first_step_min={c: k.total for c, k in crits.items()},
                           gpu_start_min=crits["expected"].gpu_start, merge=cfg.job.merge_model)
    est = cost.run_estimate(cost.hourly(cfg), tl, z.bucket_gb, cfg.gpu_nodes)
    figures = sizing.figures_table() + [{"name": f.name, "fast": f.fast, "expected": f.expected, "slow": f.slow,
                                         "unit": f.unit, "basis": f.basis, "source": f.source}
                                        for f in run_time.FIGURES]
    figures.append({"name": "staging download", "fast": phases.DOWNLOAD_MB_PER_S_RANGE[0],
                    "expected": phases.DOWNLOAD_MB_PER_S_RANGE[1], "slow": phases.DOWNLOAD_MB_PER_S_RANGE[2],
                    "unit": "MB/s", "basis": "published", "source": phases.DOWNLOAD_SOURCE})
    json_part = {**est.as_dict(), **tl.as_dict(), "figures": figures,
                 "note": "ESTIMATE: a model (recipe/sizing.py, stacks/run_time.py), not a measurement of this run; "
                         "bench/published_runs.md compares it with published verl runs"}
    text = "\n".join([cost.render_run(est, tl), figures_text(figures)])
    return {"json": json_part, "text": text, "warnings": run_time.warnings(z, tl, cfg.data.lengths_basis)}


def figures_text(figures: list[dict[str, Any]]) -> str:
    """The step and run model's constants with their basis and source, under the ESTIMATE lines."""
    lines = ["ESTIMATE constants (fast / expected / slow; basis: source):"]
    for f in figures:
        values = (", ".join(f"{k.rsplit('-', 1)[-1]} {v}" for k, v in f["values"].items()) if "values" in f
                  else f"{f['fast']:g} / {f['expected']:g} / {f['slow']:g}")
        lines.append(f"  {f['name']}: {values} {f['unit']} ({f['basis']}: {f['source']})")
    return "\n".join(lines)


def pod_templates(plan: dict[str, Any]) -> list[tuple[str, dict]]:
    """(label, pod template) of every pod the stack registers: Jobs, the RayCluster's head and workers."""
    pods: list[tuple[str, dict]] = []
    for r in plan["resources"]:
        inputs = r["inputs"]
        if r["type"] == "kubernetes:batch/v1:Job":
            pods.append((f"Job {r['name']}", inputs["spec"]["template"]))
        elif r["type"].startswith("kubernetes:") and inputs.get("kind") == "RayCluster":
            spec = inputs["spec"]
            pods.append((f"RayCluster {r['name']} head", spec["headGroupSpec"]["template"]))
            for group in spec.get("workerGroupSpecs") or []:
                pods.append((f"RayCluster {r['name']} {group['groupName']}", group["template"]))
    return pods


def admission_rows(plan: dict[str, Any], mode: str) -> list[dict[str, Any]]:
    """Per pod: what Autopilot (or Standard) does with it once the GCS FUSE webhook has run, and its
    disk budget (the sum of its ephemeral-storage limits, sidecar included)."""
    from catalog import autopilot

    rows = []
    for label, template in pod_templates(plan):
        v = autopilot.verdict(template, mode == "autopilot")
        rows.append({"stack": plan["stack"], "mode": mode, "pod": label, "class": v.compute_class,
                     "admitted": v.admitted, "ephemeralRequestGiB": round(v.ephemeral_request_gib, 2),
                     "diskBudgetGiB": None if v.ephemeral_limit_gib is None else round(v.ephemeral_limit_gib, 2),
                     "problems": v.problems})
    return rows


def critical_path(cfg: stack_config.StackConfig, plan: dict[str, Any]):
    """The deploy's critical path from the plan's graph (tools.critical_path)."""
    from stacks import derived
    from tools import critical_path as cp

    return cp.compute(plan, derived.of(cfg).weights_gb)


def storage_summary(cfg: stack_config.StackConfig) -> dict[str, Any]:
    """The staging disk budget the staging Job gets (stacks.derived, from the model's largest file)."""
    from stacks import derived

    b = derived.of(cfg).staging
    return {"model": cfg.model, "largestFileGiB": round(b.largest_file_gib, 2), "parallelFiles": b.parallel_files,
            "sidecarBufferGiB": b.buffer_gib, "stageContainerGiB": b.container_gib, "stagingPodGiB": b.pod_gib}


def other_mode(raw: dict[str, str], mode: str) -> dict[str, str]:
    key = stack_config.KEYS_BY_NAME["clusterMode"].full
    return {**raw, key: "standard" if mode == "autopilot" else "autopilot"}


def node_fit_rows(plan: dict[str, Any]) -> list[dict[str, Any]]:
    """Standard: each pod against the allocatable CPU, memory and ephemeral storage of its pool's node."""
    from tools import node_fit

    return [{"pod": f.pod, "node": f.node, "need": {k: round(v, 2) for k, v in f.need.items()},
             "allocatable": {k: round(v, 2) for k, v in f.have.items()}, "fits": not f.problems,
             "problems": f.problems} for f in node_fit.fits(plan, pod_templates(plan))]


def admission(plan: dict[str, Any]) -> list[dict]:
    """The table for the stack's own cluster mode: the other mode's pods are another stack's (another
    plan's), never a verdict on this one."""
    return admission_rows(plan, plan["outputs"].get("clusterMode", "standard"))


def other_mode_line(plan: dict[str, Any]) -> str:
    """The other cluster mode's row of the admission table: not applicable, and why."""
    from catalog.accelerators import ACCELERATORS

    mode = plan["outputs"].get("clusterMode", "standard")
    other = "standard" if mode == "autopilot" else "autopilot"
    accelerator = ACCELERATORS.get(plan["outputs"].get("accelerator", ""))
    if other == "autopilot" and accelerator is not None and not accelerator.autopilot:
        why = f"accelerator {accelerator.key} has no Autopilot worker size in catalog/accelerators.py"
    else:
        why = f"plan a copy with {stack_config.KEYS_BY_NAME['clusterMode'].full}: {other} to see its pods there"
    return f"  {other:<9} not applicable: this stack is {mode} ({why})"


def admission_text(rows: list[dict], storage: dict[str, Any], other_mode: str = "") -> str:
    lines = [f"staging disk budget ({storage['model']}): {storage['parallelFiles']} files at once x "
             f"{storage['largestFileGiB']} GiB largest file -> sidecar buffer {storage['sidecarBufferGiB']} GiB + "
             f"stage container {storage['stageContainerGiB']} GiB = {storage['stagingPodGiB']} GiB",
             "admission (pod x cluster mode; ephemeral storage with the GCS FUSE sidecar):"]
    for r in rows:
        budget = "unbounded" if r.get("diskBudgetGiB") is None else f"{r['diskBudgetGiB']:g} GiB"
        verdict = "admitted" if r["admitted"] else "REFUSED: " + "; ".join(r["problems"])
        lines.append(f"  {r['mode']:<9} {r['pod']:<34} {r.get('class', '-'):<20} "
                     f"request {r.get('ephemeralRequestGiB', 0):>6g} GiB  disk budget {budget:>9}  {verdict}")
    return "\n".join([*lines, other_mode] if other_mode else lines)


def write(plan: dict[str, Any], out: Path) -> None:
    """Write the plan into `out` (checked by check_out): clear what an earlier plan wrote, then write."""
    check_out(out)
    out.mkdir(parents=True, exist_ok=True)
    if _ours(out):
        for child in out.iterdir():  # the folder itself stays; only our earlier content goes
            if child.is_dir() and not child.is_symlink():
                shutil.rmtree(child)
            else:
                child.unlink()
    (out / MARKER).write_text(MARKER_TEXT)
    files = {"plan.json": json.dumps(plan, indent=2) + "\n", "graph.mmd": mermaid(plan)}
    files |= {f"manifests/{name}": yaml.dump(obj, Dumper=_DUMPER, sort_keys=False)
              for name, obj in manifests(plan).items()}
    (out / "manifests").mkdir()
    inside = out.resolve()
    for rel, text in files.items():
        target = out / rel
        if target.resolve().parent not in (inside, inside / "manifests"):  # names are sanitized; be sure
            raise UsageError(f"refusing to write {target}: outside {out}")
        target.write_text(text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.plan", description=__doc__.splitlines()[0])
    parser.add_argument("--stack", required=True, help="stack name, e.g. b200 (Pulumi's stack name rules)")
    parser.add_argument("--config", type=Path, help="stack file (default: Pulumi.<stack>.yaml)")
    parser.add_argument("--out", type=Path,
                        help="output folder: new, empty or an earlier plan's (default: build/plan/<stack>)")
    parser.add_argument("--quiet", action="store_true",
                        help="do not print the resource tree (memory, sizing, admission, critical path and price "
                        "still print)")
    parser.add_argument("--preview", action="store_true",
                        help="plan as `pulumi preview` on an empty project (lookups not yet possible stay unknown)")
    parser.add_argument("--quotas", type=Path, metavar="FILE",
                        help=f"check the quotas saved by `{quota_source.GCLOUD} > FILE` (default: the plan's "
                        "sample project's, tools/mocking.py)")
    args = parser.parse_args(argv)
    path = args.config or Path(f"Pulumi.{args.stack}.yaml")  # named in messages until resolved
    try:
        path = stack_path(args.stack, args.config)
        out = args.out or default_out(args.stack)
        check_out(out)
        raw, secret_keys = read_stack_file(path, args.stack)
        quota_values = quota_source.from_file(args.quotas) if args.quotas else quota_source.SAMPLE
        from tools.mocking import shell_config_vars
        if ignored := shell_config_vars():  # names only: their values may be secrets
            print(f"note: ignoring {', '.join(ignored)} from the shell: the plan follows {path.name} "
                  "(`pulumi up` sets these itself from the stack)", file=sys.stderr)
        plan = build_plan(args.stack, raw, secret_keys, preview=args.preview, quota_values=quota_values)
        plan["admission"] = admission(plan)
        plan["nodeFit"] = node_fit_rows(plan)
        if unfit := [p for row in plan["nodeFit"] for p in row["problems"]]:
            raise UsageError(f"stack {args.stack!r}: a pod does not fit its node and would stay Pending:\n  "
                             + "\n  ".join(unfit))
        from tools import placement
        rows, placement_problems = placement.table(plan)
        plan["placement"] = placement.as_json(rows, placement_problems)
        if placement_problems:
            print(placement.text(rows, placement_problems), file=sys.stderr)
            raise UsageError(f"stack {args.stack!r}: a process would not find what it needs where it runs:\n  "
                             + "\n  ".join(placement_problems))
        cfg = stack_config.load(raw, args.stack, allow_placeholder_project=True,  # passed the gate in build_plan
                                secret_keys=secret_keys)
        plan["storage"] = storage_summary(cfg)
        crit = critical_path(cfg, plan)
        plan["criticalPath"] = {"minutes": round(crit.total, 2), "floorMinutes": round(crit.floor, 2),
                                "ratio": round(crit.ratio, 3), "floor": crit.floor_why,
                                "steps": [{"name": s.name, "start": round(s.start, 2), "finish": round(s.finish, 2),
                                           "phases": s.why} for s in crit.steps]}
        run = run_estimate(cfg, plan)  # the whole run's ESTIMATE, low / expected / high (issue #47)
        if run is not None:
            plan["runEstimate"] = run["json"]
            plan["warnings"] = [*plan.get("warnings", []), *run["warnings"]]
        prices = price_report(cfg, run)  # everything is computed before the first file is written
        from stacks.quotas import needs
        quota_report = quota_values.report(cfg.region, needs(cfg))
        write(plan, out)
    except (UsageError, quota_source.QuotaFileError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except stack_file.StackFileError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except ConfigError as err:  # the gate's, or a program check the gate does not mirror: exit 2, no traceback
        print(f"error: {path.name}: {err}", file=sys.stderr)
        return 2
    except OSError as err:
        print(f"error: {err.filename or path}: {err.strerror or err}", file=sys.stderr)
        return 2
    if not args.quiet:
        print(tree(plan))
    print(report(plan))  # what the README says to read before paying: --quiet keeps it
    print(admission_text(plan["admission"], plan["storage"], other_mode_line(plan)))
    for row in plan["nodeFit"]:
        need, have = row["need"], row["allocatable"]
        print(f"  fits      {row['pod']:<34} on {row['node']}: CPU {need['cpu']:g}/{have['cpu']:g}, memory "
              f"{need['memory']:g}/{have['memory']:g} GiB, ephemeral {need['ephemeral-storage']:g}/"
              f"{have['ephemeral-storage']:g} GiB")
    from tools import placement
    print(placement.text([placement.Row(**r) for r in plan["placement"]["rows"]], plan["placement"]["problems"]))
    from tools.critical_path import text as critical_path_text
    print(critical_path_text(crit))
    print(quota_report)
    print(prices)
    for warning in plan.get("warnings") or []:
        print(warning if warning.startswith(("error: ", "critical: ")) else f"warning: {warning}", file=sys.stderr)
    print(f"wrote {out}/plan.json, {out}/manifests/, {out}/graph.mmd", file=sys.stderr)
    return 0


if __name__ == "__main__":
    # One short process whose objects live to its end (the SDKs' modules, the composed stack): the cyclic
    # collector's full passes over them free nothing and cost about a quarter of the command's CPU (b200:
    # 4.3 -> 3.2 CPU-seconds, peak memory 179 MiB either way, measured with farm-bench side by side).
    gc.disable()
    sys.exit(main())
