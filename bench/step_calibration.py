"""Measure the step-time model's training and weight-sync terms (recipe/sizing.py) on one GPU (issue #47).

    device   python bench/step_calibration.py --driver --jsonl $OUT/step.jsonl     (one case per process)
    merge    python -m bench.step_calibration --merge a.jsonl [b.jsonl] --out bench/step_calibration.json
    summary  python -m bench.step_calibration --summary bench/step_calibration.json  (pure Python)

Two kinds of case, each in a fresh process:

  pass     verl's FSDP2 update and old-log-prob passes as bench/memory_calibration.py run_case_fsdp2 builds
           them (fp32 master weights, bf16 compute, gradient checkpointing, fused cross-entropy, compiled
           entropy in the log-prob pass), on rows of GSM8K's mean 370 tokens at the token budgets the
           recipe derives (32256 update / 64512 log-prob per GPU on every shipped b200/h200 stack), or the
           largest that one GPU holds next to the model's AdamW state. CUDA-synchronised wall times of the
           steady state (the first step compiles and creates AdamW's state): the forward + backward of the
           micro-batches, the optimizer step apart (it shrinks with the shard, the passes do not).
  gather   the weight sync of verl 0.6.1 fsdp_workers.py rollout_mode: state_dict(), then per tensor
           `param.to(device).full_tensor()` and a copy into the rollout's bf16 weights (vLLM's load_weights
           casts and copies each), against one flat buffer gathered once and cast once; plus verl's
           aggressive_empty_cache (gc + empty_cache + synchronize), called twice per sync. One GPU has no
           peer, so this measures the per-tensor overhead (dispatch, launch, allocation), not the link:
           the bytes' time over NVLink / RDMA comes from the bus-bandwidth figures in recipe/sizing.py.

What one GPU cannot measure (NCCL between GPUs and nodes, vLLM's decode) is taken from published anchors
in recipe/sizing.py, labelled there.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script on the GPU machine: the checkout's root
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from catalog.models import MODELS  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
SEQ_LEN = 370  # GSM8K's mean prompt + response (catalog.datasets.GSM8K: 100 + 270)
H200_BF16_TFLOPS = 989.0  # catalog.accelerators h200 row (datasheet dense bf16): MFU is against this
# (model, passes, update tokens, log-prob tokens, optimizer). Budgets: recipe.tuning's 32256 / 64512 where one
# H200 holds them with the model's AdamW state; below that the largest the memory table measured (3B 24576,
# 7B 12288 with the fused AdamW: bench/memory_calibration_fsdp2.json), the log-prob pass alone at 64512.
PASS_CASES = [
    ("1.5B", "update,logprob", 32256, 32256, "foreach"),
    ("3B", "update,logprob", 24576, 24576, "foreach"),
    ("7B", "update,logprob", 12288, 12288, "fused"),
    ("1.5B", "logprob", 64512, 64512, "foreach"),
    ("3B", "logprob", 64512, 64512, "foreach"),
    ("7B", "logprob", 64512, 64512, "fused"),
]
GATHER_CASES = ("3B", "7B")


def spec_of(size: str):
    return MODELS[f"Qwen/Qwen2.5-{size.removesuffix('B')}B"]


# ---------------------------------------------------------------------------
# The gather case (runs on the GPU)
# ---------------------------------------------------------------------------
def run_gather(size: str, repeats: int = 3) -> dict:
    import gc

    import torch
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    from torch.distributed.tensor import DTensor
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from bench.memory_calibration import ARCH_KEYS, QWEN25_CONFIGS

    dev = torch.device("cuda")
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(29500 + os.getpid() % 1000))
    dist.init_process_group("nccl", rank=0, world_size=1)
    mesh = init_device_mesh("cuda", (1,), mesh_dim_names=("fsdp",))
    cfg = {k: QWEN25_CONFIGS[size][k] for k in ARCH_KEYS}
    hf = Qwen2Config(**cfg, rms_norm_eps=1e-6, hidden_act="silu", use_cache=False, attn_implementation="sdpa")
    with torch.device(dev):
        model = Qwen2ForCausalLM(hf).to(torch.float32)
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    layer_cls = type(model.model.layers[0])
    for m in list(model.modules()):
        if isinstance(m, layer_cls) or (isinstance(m, torch.nn.Embedding) and not cfg["tie_word_embeddings"]):
            fully_shard(m, mesh=mesh, mp_policy=mp)
    fully_shard(model, mesh=mesh, mp_policy=mp)

    def sync():
        torch.cuda.synchronize()

    sd = model.state_dict()
    shapes = {k: v.shape for k, v in sd.items()}
    total = sum(v.numel() for v in sd.values())
    dst_flat = torch.empty(total, dtype=torch.bfloat16, device=dev)  # the rollout's bf16 weights
    dst, off = {}, 0
    for k, v in sd.items():
        dst[k] = dst_flat[off:off + v.numel()].view(shapes[k])
        off += v.numel()
    res = dict(case="gather", model=size, n_tensors=len(sd), n_params=total, fp32_bytes=4 * total,
               gpu=torch.cuda.get_device_name(0), torch=torch.__version__, world_size=1)

    def state_dict_pass():
        return model.state_dict()

    def per_tensor_dtensor():  # rollout_mode's generator, consumed by update_weights one tensor at a time
        for k, p in model.state_dict().items():
            t = p.to(dev, non_blocking=True).full_tensor() if isinstance(p, DTensor) else p
            dst[k].copy_(t)

    def per_tensor_nccl():  # the same through an explicit NCCL all-gather per tensor (what full_tensor does at S > 1)
        for k, p in sd.items():
            local = p.to_local() if isinstance(p, DTensor) else p
            out = torch.empty(local.numel() * dist.get_world_size(), dtype=local.dtype, device=dev)
            dist.all_gather_into_tensor(out, local.reshape(-1))
            dst[k].copy_(out.view(shapes[k]))

    flat_in = torch.cat([(p.to_local() if isinstance(p, DTensor) else p).reshape(-1) for p in sd.values()])

    def flat():  # one buffer: one all-gather, one cast
        out = torch.empty(flat_in.numel() * dist.get_world_size(), dtype=flat_in.dtype, device=dev)
        dist.all_gather_into_tensor(out, flat_in)
        dst_flat.copy_(out)
        del out

    def empty_cache():  # verl utils/memory_utils.py aggressive_empty_cache(force_sync=True), one call
        gc.collect()
        torch.cuda.empty_cache()
        sync()

    for name, fn in (("state_dict", state_dict_pass), ("per_tensor_full_tensor", per_tensor_dtensor),
                     ("per_tensor_nccl", per_tensor_nccl), ("flat_buffer", flat), ("empty_cache", empty_cache)):
        fn()  # warm-up: allocator, NCCL communicator
        sync()
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            fn()
            sync()
            times.append(time.perf_counter() - t0)
        res[f"{name}_seconds"] = round(min(times), 5)
        res[f"{name}_seconds_all"] = [round(t, 5) for t in times]
    dist.destroy_process_group()
    return res


# ---------------------------------------------------------------------------
# Driver (runs on the GPU machine): one case per process
# ---------------------------------------------------------------------------
def driver(jsonl: str, budget_s: float, case_timeout_s: float) -> None:
    here, calib = os.path.abspath(__file__), str(ROOT / "bench" / "memory_calibration.py")
    env = {**os.environ, "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True", "PYTHONUNBUFFERED": "1"}
    cmds = []
    for size, passes, tu, tl, optim in PASS_CASES:
        ident = dict(case="pass", model=size, passes=passes, tokens=tu, logprob_tokens=tl, optim=optim)
        cmds.append((ident, [sys.executable, calib, "--path", "fsdp2", "--model", size, "--tokens", str(tu),
                             "--logprob-tokens", str(tl), "--optim", optim, "--entropy", "0", "--steps", "3",
                             "--seq-len", str(SEQ_LEN), "--passes", passes]))
    for size in GATHER_CASES:
        cmds.append((dict(case="gather", model=size), [sys.executable, here, "--gather", size]))
    t_start = time.time()
    for ident, cmd in cmds:
        left = budget_s - (time.time() - t_start)
        if left < 20:
            row = dict(ident, status="skipped_budget")
        else:
            t0 = time.time()
            try:
                p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=min(case_timeout_s, left))
                line = next((ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")), None)
                row = {**ident, **json.loads(line[len("RESULT "):])} if line else dict(
                    ident, status="failed", returncode=p.returncode, error=(p.stderr or p.stdout)[-1500:])
            except subprocess.TimeoutExpired:
                row = dict(ident, status="timeout")
            row["wall_s"] = round(time.time() - t0, 1)
        row.setdefault("status", "ok")
        with open(jsonl, "a") as f:
            f.write(json.dumps(row) + "\n")
        print(f"CASE {ident} {row['status']} wall={row.get('wall_s')} {row.get('error', '')[-400:]}", flush=True)


# ---------------------------------------------------------------------------
# Summary (pure Python)
# ---------------------------------------------------------------------------
def compute_params(spec) -> int:
    """Parameters that do matmul work per token: all but the input embedding's lookup (a tied head counts)."""
    return spec.params - (0 if spec.tied else spec.vocab * spec.hidden)


def attention_flops_per_token(spec, seq_len: int) -> float:
    """Forward QK^T and AV of causal attention within rows of seq_len: 2 matmuls x 2 FLOPs x seq_len / 2."""
    return 2 * seq_len * spec.hidden * spec.layers


def summarise(rows: list[dict]) -> list[dict]:
    out = []
    peak = H200_BF16_TFLOPS * 1e12
    for r in rows:
        if r.get("case") != "pass" or r.get("status") != "ok":
            continue
        spec = spec_of(r["model"])
        p, pc, attn = spec.params, compute_params(spec), attention_flops_per_token(spec, r.get("seq_len") or SEQ_LEN)
        row = dict(model=r["model"], passes=r["passes"])
        if "update" in r["passes"]:
            t = r["tokens_actual"] * r["micro_batches"]
            fb = min(r[f"update{k}_fwd_bwd_seconds"] for k in (2, 3) if f"update{k}_fwd_bwd_seconds" in r)
            opt = min(r[f"update{k}_optim_seconds"] for k in (2, 3) if f"update{k}_optim_seconds" in r)
            # recipe/sizing.py charges the update 8 P per token (forward, recomputed forward, backward)
            row.update(update_tokens=r["tokens_actual"], update_tokens_per_s=round(t / fb),
                       update_mfu_sizing=round(8 * p * t / fb / peak, 3),
                       update_mfu_hw=round((8 * pc + 4 * attn) * t / fb / peak, 3),
                       optim_seconds=opt, optim_seconds_per_gparam=round(opt / (p / 1e9), 4))
        t = r["logprob_tokens_actual"]
        lp = min(r[f"logprob{k}_seconds"] for k in (2, 3) if f"logprob{k}_seconds" in r)
        row.update(logprob_tokens=t, logprob_tokens_per_s=round(t / lp),
                   logprob_mfu_sizing=round(2 * p * t / lp / peak, 3),
                   logprob_mfu_hw=round((2 * pc + attn) * t / lp / peak, 3))
        out.append(row)
    for r in rows:
        if r.get("case") == "gather" and r.get("status") == "ok":
            n, nccl, flat = r["n_tensors"], r["per_tensor_nccl_seconds"], r["flat_buffer_seconds"]
            out.append(dict(model=r["model"], passes="gather", n_tensors=n, state_dict_s=r["state_dict_seconds"],
                            per_tensor_s=r["per_tensor_full_tensor_seconds"], per_tensor_nccl_s=nccl, flat_s=flat,
                            empty_cache_s=r["empty_cache_seconds"],
                            overhead_per_tensor_us=round(1e6 * (nccl - flat) / n, 1)))
    return out


def _line(xs: list[float], ys: list[float]) -> tuple[float, float]:
    """Least-squares intercept and slope."""
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum((x - mx) ** 2 for x in xs)
    return my - slope * mx, slope


def fitted(rows: list[dict]) -> dict:
    """The figures recipe/sizing.py takes from this table (tests/test_step_calibration.py checks they agree).

    The 7B update cases at three budgets give a line per micro-batch: a fixed part (FSDP2's per-unit
    launches, copies and host syncs, per decoder layer) and a per-token part, whose FLOPs give the
    marginal MFU; the fixed part per layer is then taken off the other models' single budget.
    """
    peak = H200_BF16_TFLOPS * 1e12
    ok = [r for r in rows if r.get("case") == "pass" and r.get("status") == "ok"]
    seven = sorted((r for r in ok if r["model"] == "7B" and "update" in r["passes"]), key=lambda r: r["tokens_actual"])
    xs = [r["tokens_actual"] for r in seven]
    upd = [min(r["update2_fwd_bwd_seconds"], r["update3_fwd_bwd_seconds"]) / r["micro_batches"] for r in seven]
    lp = [min(r["logprob2_seconds"], r["logprob3_seconds"]) for r in seven]
    layers = spec_of("7B").layers
    (u0, _), (l0, _) = _line(xs, upd), _line(xs, lp)
    out = {"update_fixed_s_per_layer": u0 / layers, "logprob_fixed_s_per_layer": l0 / layers,
           "update_mfu": {}, "logprob_mfu": {}, "optim_s_per_gparam": {}}
    for r in ok:
        spec = spec_of(r["model"])
        if "update" in r["passes"] and r["tokens_actual"] == max(
                x["tokens_actual"] for x in ok if x["model"] == r["model"] and "update" in x["passes"]):
            per_mb = min(r["update2_fwd_bwd_seconds"], r["update3_fwd_bwd_seconds"]) / r["micro_batches"]
            marginal = per_mb - out["update_fixed_s_per_layer"] * spec.layers
            out["update_mfu"][r["model"]] = round(8 * spec.params * r["tokens_actual"] / marginal / peak, 3)
            out["optim_s_per_gparam"][f"{r['model']} {r['optim']}"] = round(
                min(r["update2_optim_seconds"], r["update3_optim_seconds"]) / (spec.params / 1e9), 4)
        if r["passes"] == "logprob":
            t = min(r["logprob2_seconds"], r["logprob3_seconds"]) - out["logprob_fixed_s_per_layer"] * spec.layers
            out["logprob_mfu"][r["model"]] = round(2 * spec.params * r["logprob_tokens_actual"] / t / peak, 3)
    gathers = [r for r in rows if r.get("case") == "gather" and r.get("status") == "ok"]
    out["dispatch_s_per_tensor"] = {r["model"]: round((r["per_tensor_full_tensor_seconds"] - r["flat_buffer_seconds"])
                                                      / r["n_tensors"], 7) for r in gathers}
    out["empty_cache_s"] = {r["model"]: r["empty_cache_seconds"] for r in gathers}
    out["update_fixed_s_per_layer"] = round(out["update_fixed_s_per_layer"], 5)
    out["logprob_fixed_s_per_layer"] = round(out["logprob_fixed_s_per_layer"], 5)
    return out


def merge(paths: list[str], out: str) -> None:
    rows = [json.loads(line.removeprefix("RESULT ")) for p in paths for line in open(p) if line.strip()]
    for r in rows:  # a case run straight through memory_calibration.py (no driver ident) is a pass case
        r.setdefault("case", "pass" if r.get("path") == "fsdp2" else r.get("case"))
    first = next((r for r in rows if r.get("gpu")), {})
    table = dict(description=__doc__.split("\n\n")[0].strip(), gpu=first.get("gpu"), torch=first.get("torch"),
                 transformers=first.get("transformers"), date=time.strftime("%Y-%m-%d", time.gmtime()),
                 command="python bench/step_calibration.py --driver (bench/memory_calibration.py run_case_fsdp2, "
                         f"--seq-len {SEQ_LEN})", cases=rows)
    Path(out).write_text(json.dumps(table, indent=1) + "\n")


def main() -> int:
    ap = argparse.ArgumentParser(prog="bench/step_calibration.py", description=__doc__.splitlines()[0])
    ap.add_argument("--driver", action="store_true")
    ap.add_argument("--jsonl", default="step_calibration.jsonl")
    ap.add_argument("--budget-s", type=float, default=540.0)
    ap.add_argument("--case-timeout-s", type=float, default=240.0)
    ap.add_argument("--gather", choices=list(GATHER_CASES))
    ap.add_argument("--merge", nargs="+")
    ap.add_argument("--out", default=str(ROOT / "bench" / "step_calibration.json"))
    ap.add_argument("--summary")
    a = ap.parse_args()
    if a.gather:
        print("RESULT " + json.dumps(run_gather(a.gather)), flush=True)
    elif a.driver:
        driver(a.jsonl, a.budget_s, a.case_timeout_s)
    elif a.merge:
        merge(a.merge, a.out)
    elif a.summary:
        cases = json.loads(Path(a.summary).read_text())["cases"]
        for row in summarise(cases):
            print(json.dumps(row))
        print("fitted " + json.dumps(fitted(cases)))
    else:
        ap.error("one of --driver, --gather, --merge, --summary")
    return 0


if __name__ == "__main__":
    sys.exit(main())
