"""Calibrate the per-GPU memory model (recipe/memory.py) on verl's own FSDP2 training path.

verl's path (the default, --path fsdp2; run_case_fsdp2 says which verl v0.6.1 code each piece follows):

  driver     PYTORCH_CUDA_ALLOC_CONF is set by the driver; on the GPU machine:
             python memory_calibration.py --driver --models 0.5B,1.5B,3B --out t1.json --jsonl t1.jsonl
             (one case per process: FSDP2 fully_shard on one rank, bf16 params / fp32 reduce, packed
             rows, log-prob and entropy as verl computes them, zero_grad() as verl calls it)
  merge      python -m bench.memory_calibration --merge t1.jsonl ... --out bench/memory_calibration_fsdp2.json
  fit check  python -m bench.memory_calibration --fit --json bench/memory_calibration_fsdp2.json
             (every case within -5 % / +15 % of its reserved peak; bench/memory_calibration_fit.txt)

Issue #48, one 8-GPU host (keep NVLink multicast off: the driver sets NCCL_NVLS_ENABLE=0 and its
PyTorch / NVSHMEM twins for every case, .library/device/KINDS.md), one torchrun per case, a call each:

  x8         python bench/memory_calibration.py --driver --nproc 8 --models 14B --jsonl $OUT/x8.jsonl
             python bench/memory_calibration.py --driver --nproc 8 --models 32B --jsonl $OUT/x8.jsonl
             (CASES_X8: the recipe's 32256 / 64512 budgets and 40960 / 81920, entropy compiled and eager,
             rows of 370 tokens; the model built on the meta device and materialised shard by shard)
  compare    venv/bin/python -m bench.compare_x8 x8.jsonl   (recipe/memory.py and recipe/sizing.py)
  dry run    driver_torchrun(..., nproc=1, 7B, optim="fused") on one GPU: bench/x8_dryrun.json

The first table (--path plain, bench/memory_calibration.json, bench/memory_calibration_plain_fit.txt)
measured a plain fp32 loop with an fp32 log-softmax; its modes are kept to reproduce it:

  one case   python bench/memory_calibration.py --model 7B --tokens 8192 [--optim foreach|fused]
             Builds Qwen2.5-<model> from its published config with RANDOM weights
             (nothing downloaded) directly on the GPU in fp32, then runs two training
             steps (bf16 autocast, gradient checkpointing, sdpa, AdamW) on one packed
             row of T tokens and prints ONE JSON line (prefix "RESULT ").

  driver     python bench/memory_calibration.py --driver --out bench/memory_calibration.json
             Runs every case of CASES in a fresh subprocess (one case per process),
             records OOM / failures instead of crashing, writes the table.

  fit        python bench/memory_calibration.py --fit [--json bench/memory_calibration.json]
             Fits the memory-model constants to the measured peaks and prints residuals.
             Pure Python, no torch needed.

World size 1 (unsharded). The memory model divides the static terms by world size itself.
"""

# ruff: noqa: N803, N806  (A, B, P, T, L, V: the memory formula's symbols)

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script (`python bench/memory_calibration.py`): the checkout's root
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from catalog.models import MODELS  # noqa: E402 - after the path line above

GiB = 1024**3

# The models' published configs: catalog/models.py holds the one table (Hugging Face config.json of
# Qwen/Qwen2.5-<size>-Instruct, each row citing the copy read); the two fields the memory model does not
# need are the same in all six published files: max_position_embeddings 32768 (the 32B base,
# Qwen/Qwen2.5-32B, has 131072 and nothing else different), rope_theta 1e6; rms_norm_eps 1e-6, hidden_act
# silu, sliding window off. vocab_size is 151936 up to 3B and 152064 from 7B (the embedding is padded),
# both as published. Run from a checkout: this file reads catalog/models.py.
CALIBRATED = ("0.5B", "1.5B", "3B", "7B", "14B", "32B")
SAME_IN_ALL = dict(max_position_embeddings=32768, rope_theta=1000000.0)


def qwen25_config(size: str) -> dict:
    """Qwen2.5-<size>-Instruct's config.json fields the benchmark builds the model from (catalog's row)."""
    spec = MODELS[f"Qwen/Qwen2.5-{size.removesuffix('B')}B-Instruct"]
    return dict(hidden_size=spec.hidden, intermediate_size=spec.intermediate, num_hidden_layers=spec.layers,
                num_attention_heads=spec.attention_heads, num_key_value_heads=spec.kv_heads, vocab_size=spec.vocab,
                tie_word_embeddings=spec.tied, **SAME_IN_ALL, source=spec.source)


QWEN25_CONFIGS = {size: qwen25_config(size) for size in CALIBRATED}
ARCH_KEYS = ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
             "num_key_value_heads", "vocab_size", "tie_word_embeddings",
             "max_position_embeddings", "rope_theta")

# (model, tokens, optimizer impl). Ordered small -> large so a time-out loses the least.
CASES = [
    ("0.5B", 2048, "foreach"), ("0.5B", 8192, "foreach"), ("0.5B", 16384, "foreach"), ("0.5B", 32768, "foreach"),
    ("1.5B", 2048, "foreach"), ("1.5B", 8192, "foreach"), ("1.5B", 16384, "foreach"), ("1.5B", 32768, "foreach"),
    ("1.5B", 8192, "fused"),
    ("3B", 2048, "foreach"), ("3B", 8192, "foreach"), ("3B", 16384, "foreach"),
    ("7B", 2048, "foreach"), ("7B", 8192, "foreach"), ("7B", 16384, "foreach"),
    ("7B", 8192, "fused"),
    # Second run (7B only fits with the fused optimizer on one 140 GiB GPU): two more token budgets.
    ("7B", 2048, "fused"), ("7B", 16384, "fused"),
]
# verl's path (run_case_fsdp2): (model, tokens, entropy, optimizer, entropy compiled). 7B runs the fused
# AdamW: 16 bytes/param of state plus foreach's 4-byte transient does not fit 140 GiB on one GPU; the
# foreach transient is measured on the smaller models. Three or more token budgets per model.
CASES_FSDP2 = [
    (m, t, e, "fused" if m == "7B" else "foreach", True)
    for m, budgets in (("0.5B", (4096, 16384, 32768)), ("1.5B", (4096, 16384, 32768)),
                       ("3B", (4096, 12288, 24576)), ("7B", (2048, 4096, 8192, 12288)))
    for t in budgets for e in (False, True)
] + [(m, t, True, "fused" if m == "7B" else "foreach", False)  # actor.use_torch_compile=false: eager entropy
       for m, t in (("0.5B", 8192), ("0.5B", 32768), ("1.5B", 16384), ("3B", 12288), ("7B", 4096))]

# Issue #48, one 8-GPU host under torchrun (driver_torchrun): (model, update tokens, log-prob tokens, entropy
# compiled). The budgets the b200/h200 recipes derive for 14B and 32B (recipe.tuning: 32256 update / 64512
# log-prob per GPU) and one above; rows of GSM8K's mean 370 tokens (100 prompt + 270 response); entropy on
# in the update (the eager case is actor.use_torch_compile=false) as the memory model's worst case.
X8_SEQ_LEN = 370
CASES_X8 = [(m, tu, tl, compiled) for m in ("14B", "32B") for tu, tl in ((32256, 64512), (40960, 81920))
            for compiled in (True, False)]
# NVLink multicast stays off on the shared 8-GPU hosts (the device notes, KINDS.md): a program that uses it
# can put the host's GPUs out of service. Every torchrun case gets these, whatever the caller's environment.
NO_MULTICAST_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}


def param_count(cfg: dict) -> int:
    """Exact parameter count of a Qwen2 decoder from its config (q/k/v have bias)."""
    h, i, L, V = cfg["hidden_size"], cfg["intermediate_size"], cfg["num_hidden_layers"], cfg["vocab_size"]
    hd = h // cfg["num_attention_heads"]
    kv = cfg["num_key_value_heads"] * hd
    attn = h * h + h + 2 * (h * kv + kv) + h * h  # q(+b), k(+b), v(+b), o
    mlp = 3 * h * i
    norms = 2 * h
    per_layer = attn + mlp + norms
    emb = V * h
    head = 0 if cfg["tie_word_embeddings"] else V * h
    return L * per_layer + emb + head + h  # + final norm


# ---------------------------------------------------------------------------
# One case (runs on the GPU)
# ---------------------------------------------------------------------------
def run_case(model_name: str, tokens: int, optim_impl: str, steps: int = 2, tiny: bool = False) -> dict:
    import torch
    import transformers
    from transformers import Qwen2Config, Qwen2ForCausalLM

    cfg = {k: QWEN25_CONFIGS[model_name][k] for k in ARCH_KEYS}
    if tiny:  # logic test on CPU: same code path, toy dimensions
        cfg.update(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                   num_key_value_heads=2, vocab_size=1000)
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    cuda = dev.type == "cuda"
    res = dict(model=model_name, tokens=tokens, optim=optim_impl, world_size=1, status="ok",
               torch=torch.__version__, transformers=transformers.__version__,
               hidden_size=cfg["hidden_size"], num_hidden_layers=cfg["num_hidden_layers"],
               intermediate_size=cfg["intermediate_size"], vocab_size=cfg["vocab_size"],
               tie_word_embeddings=cfg["tie_word_embeddings"])
    if cuda:
        res["gpu"] = torch.cuda.get_device_name(0)

    def alloc():
        return torch.cuda.memory_allocated() if cuda else 0

    def peak():
        return torch.cuda.max_memory_allocated() if cuda else 0

    def reserved_peak():
        return torch.cuda.max_memory_reserved() if cuda else 0

    def reset():
        if cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()

    hf_cfg = Qwen2Config(**cfg, rms_norm_eps=1e-6, hidden_act="silu", use_cache=False,
                         use_sliding_window=False, attn_implementation="sdpa")
    hf_cfg._attn_implementation = "sdpa"
    torch.manual_seed(0)
    base = alloc()
    try:
        with torch.device(dev):
            model = Qwen2ForCausalLM(hf_cfg).to(torch.float32)
        model.config.use_cache = False
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        model.train()
        res["attn_implementation"] = getattr(model.config, "_attn_implementation", None)
        params = list(model.parameters())  # deduplicated: a tied embedding counts once
        n_params = sum(p.numel() for p in params)
        res["n_params"] = n_params
        res["n_params_formula"] = param_count(cfg)
        res["param_bytes"] = sum(p.numel() * p.element_size() for p in params)
        res["alloc_after_build"] = alloc() - base

        kw = dict(lr=1e-6, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2)
        if optim_impl == "fused":
            kw["fused"] = True
        elif optim_impl == "foreach":
            kw["foreach"] = True if cuda else None
        opt = torch.optim.AdamW(params, **kw)

        g = torch.Generator(device="cpu").manual_seed(1)
        ids = torch.randint(0, cfg["vocab_size"], (1, tokens + 1), generator=g).to(dev)
        input_ids, labels = ids[:, :-1], ids[:, 1:]
        position_ids = torch.arange(tokens, device=dev).unsqueeze(0)

        for step in range(1, steps + 1):
            s = {}
            opt.zero_grad(set_to_none=True)
            s["alloc_start"] = alloc() - base
            reset()
            t0 = time.time()
            with torch.autocast(dev.type, dtype=torch.bfloat16):
                out = model(input_ids=input_ids, position_ids=position_ids, use_cache=False)
                logits = out.logits  # (1, T, V), bf16 from the autocast lm_head
            # verl-like log-prob: fp32 log_softmax over the vocab, gather the labels
            logp = torch.log_softmax(logits.float(), dim=-1)
            tok_logp = logp.gather(-1, labels.unsqueeze(-1)).squeeze(-1)
            loss = -tok_logp.mean()
            s["logits_dtype"] = str(logits.dtype)
            s["alloc_after_fwd"] = alloc() - base
            s["peak_fwd"] = peak() - base
            del out, logits, logp, tok_logp
            reset()
            loss.backward()
            s["alloc_after_bwd"] = alloc() - base
            s["peak_bwd"] = peak() - base
            reset()
            opt.step()
            s["alloc_after_step"] = alloc() - base
            s["peak_optim"] = peak() - base
            if cuda:
                torch.cuda.synchronize()
            s["seconds"] = round(time.time() - t0, 3)
            s["peak"] = max(s["peak_fwd"], s["peak_bwd"], s["peak_optim"])
            s["peak_reserved"] = reserved_peak()
            s["loss"] = float(loss.detach())
            del loss
            if step == 1:
                res["grad_bytes"] = sum(p.grad.numel() * p.grad.element_size() for p in params if p.grad is not None)
                res["optim_state_bytes"] = sum(t.numel() * t.element_size() for st in opt.state.values()
                                               for t in st.values() if torch.is_tensor(t))
            res[f"step{step}"] = s
        res["peak_allocated"] = max(res[f"step{k}"]["peak"] for k in range(1, steps + 1))
        res["peak_reserved"] = max(res[f"step{k}"]["peak_reserved"] for k in range(1, steps + 1))
    except torch.cuda.OutOfMemoryError as e:  # record, never crash the driver
        res["status"] = "OOM"
        res["error"] = str(e).splitlines()[0][:300]
        res["peak_allocated_at_oom"] = peak() - base
        res["alloc_at_oom"] = alloc() - base
    return res


# ---------------------------------------------------------------------------
# verl's own training path, re-implemented (runs on the GPU, one rank)
# ---------------------------------------------------------------------------
# What each piece follows, in verl v0.6.1 (d62da4950573d7a4b7ef2362337952e7ab59e78d):
#   model      fp32 (fsdp_workers.py _build_model_optimizer: "create model in fp32" for the actor),
#              gradient checkpointing with use_reentrant=False (same function), sdpa in place of
#              flash_attention_2 (flash-attn is not on the calibration GPU; both are O(T) in memory).
#   sharding   fully_shard on every decoder layer and on the embedding when untied, then the root
#              (utils/fsdp_utils.py apply_fsdp2), MixedPrecisionPolicy(param_dtype=bf16,
#              reduce_dtype=fp32, cast_forward_inputs=True), reshard_after_forward=True (fsdp_workers.py
#              fsdp2 branch, engine/fsdp.yaml default); world size 1.
#   rows       one packed row of T tokens per micro-batch, as use_remove_padding makes it
#              (dp_actor.py _forward_micro_batch: unpad_input -> (1, total_nnz)); positions run 0..T-1
#              so sdpa takes its causal kernel: flash-attn varlen over the packed sequences keeps the
#              same O(T) memory, while packed position_ids would make transformers build a T x T mask.
#   log-prob   bf16 logits (1, T, V) divided by the temperature in place, then flash-attn's
#              cross_entropy_loss with inplace_backward = not calculate_entropy (torch_functional.py
#              logprobs_from_logits); where flash-attn is missing, _FlashCrossEntropy below keeps its
#              memory behaviour (fp32 lse per token, bf16 gradient written into the logits in place).
#   entropy    torch.compile(entropy_from_logits, dynamic=True) on the logits when entropy_coeff != 0
#              in the update, always in the old-log-prob pass (fsdp_workers.py compute_log_prob:
#              calculate_entropy=True); actor.use_torch_compile defaults to true (actor.yaml).
#   update     zero_grad() before each mini-batch and after the update (dp_actor.py update_policy),
#              MICRO_BATCHES micro-batches accumulate gradients, clip_grad_norm_, AdamW step
#              (torch.optim.AdamW with torch's default implementation choice, fused for 7B: see CASES).
#   allocator  PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True, as verl sets it for training
#              (fsdp_workers.py trainer mode: set_expandable_segments(True)).
MICRO_BATCHES = 2  # per optimizer step: the second one runs with the first one's gradients live
ENTROPY_COEFF = 0.001
KL_COEF = 0.001


def _flash_cross_entropy():
    """flash-attn's triton cross_entropy_loss if present, else a torch twin with its memory footprint."""
    import torch

    try:  # verl's logprobs_from_logits_flash_attn
        from flash_attn.ops.triton.cross_entropy import cross_entropy_loss

        def ce(logits, labels, inplace_backward):
            return cross_entropy_loss(logits, labels, inplace_backward=inplace_backward)[0], "flash_attn"
        return ce
    except Exception:  # noqa: BLE001 - any import failure means: use the twin
        pass
    rows = 256  # rows per chunk: the fp32 transient of a chunk stays small, as in the triton kernel

    class _FlashCrossEntropy(torch.autograd.Function):
        @staticmethod
        def forward(ctx, logits, labels, inplace_backward):
            lse = torch.empty(logits.shape[0], dtype=torch.float32, device=logits.device)
            for s in range(0, logits.shape[0], rows):
                lse[s:s + rows] = torch.logsumexp(logits[s:s + rows].float(), dim=-1)
            loss = lse - logits.gather(1, labels.unsqueeze(1)).squeeze(1).float()
            ctx.save_for_backward(logits, lse, labels)
            ctx.inplace_backward = inplace_backward
            return loss

        @staticmethod
        def backward(ctx, grad_loss):
            logits, lse, labels = ctx.saved_tensors
            grad = logits if ctx.inplace_backward else torch.empty_like(logits)
            for s in range(0, logits.shape[0], rows):
                p = torch.exp(logits[s:s + rows].float() - lse[s:s + rows, None])
                idx = torch.arange(p.shape[0], device=p.device)
                p[idx, labels[s:s + rows]] -= 1.0
                grad[s:s + rows] = (p * grad_loss[s:s + rows, None]).to(grad.dtype)
            return grad, None, None

    def ce(logits, labels, inplace_backward):
        return _FlashCrossEntropy.apply(logits, labels, inplace_backward), "torch twin of flash_attn cross_entropy"
    return ce


def entropy_from_logits(logits):
    """verl/utils/torch_functional.py entropy_from_logits (v0.6.1), the function verl compiles."""
    import torch

    pd = torch.nn.functional.softmax(logits, dim=-1)
    return torch.logsumexp(logits, dim=-1) - torch.sum(pd * logits, dim=-1)


def _dist_setup(torch, dist, cuda: bool) -> tuple[int, int, object, bool]:
    """(rank, world, device, launched): torchrun's env:// rendezvous when torchrun started the process
    (issue #48's 8-GPU runs, and their one-GPU dry run), else one rank of its own (the table's world 1)."""
    if "TORCHELASTIC_RUN_ID" in os.environ or int(os.environ.get("WORLD_SIZE", "1")) > 1:
        local = int(os.environ.get("LOCAL_RANK", "0"))
        if cuda:
            torch.cuda.set_device(local)
        dist.init_process_group("nccl" if cuda else "gloo")
        dev = torch.device("cuda", local) if cuda else torch.device("cpu")
        return dist.get_rank(), dist.get_world_size(), dev, True
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(29500 + os.getpid() % 1000))
    dist.init_process_group("nccl" if cuda else "gloo", rank=0, world_size=1)
    return 0, 1, torch.device("cuda" if cuda else "cpu"), False


def run_case_fsdp2(model_name: str, tokens: int, entropy: bool, optim_impl: str, steps: int = 2,
                   tiny: bool = False, compile_entropy: bool = True, seq_len: int = 0,
                   passes: str = "update,logprob", logprob_tokens: int = 0) -> dict:
    """One case on verl's FSDP2 path; peaks in bytes, phase times in seconds (CUDA-synchronised).

    seq_len 0: one packed row of `tokens` (the memory table's shape, positions 0..T-1); seq_len n:
    T // n rows of n tokens, attention within each row, as flash-attn's varlen kernel sees the packed
    GSM8K sequences of a micro-batch (the step-time measurements: attention FLOPs of real rows).
    passes: "update,logprob" (the table's order: update, old-log-prob, further updates) or "logprob"
    alone (no optimizer: the forward-only pass at budgets whose AdamW state would not fit one GPU).
    Under torchrun (any world size) the model is built on the meta device, sharded, then materialised
    shard by shard with random weights; peaks and times are the maximum over the ranks.
    """
    import time as _time

    import torch
    import torch.distributed as dist
    import transformers
    from torch.distributed.device_mesh import init_device_mesh
    from transformers import Qwen2Config, Qwen2ForCausalLM

    try:
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    except ImportError:  # torch < 2.6
        from torch.distributed._composable.fsdp import MixedPrecisionPolicy, fully_shard

    cfg = {k: QWEN25_CONFIGS[model_name][k] for k in ARCH_KEYS}
    if tiny:
        cfg.update(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                   num_key_value_heads=2, vocab_size=1000)
    cuda = torch.cuda.is_available()
    rank, world, dev, launched = _dist_setup(torch, dist, cuda)
    mesh = init_device_mesh(dev.type, (world,), mesh_dim_names=("fsdp",))
    do_update = "update" in passes.split(",")
    logprob_tokens = logprob_tokens or tokens  # the forward-only pass's own budget (log_prob_max_token_len_per_gpu)

    def shape(t: int) -> tuple[int, int]:
        return (1, t) if seq_len <= 0 else (max(1, t // seq_len), seq_len)

    rows, row_len = shape(tokens)
    res = dict(path="fsdp2", model=model_name, tokens=tokens, entropy=entropy, optim=optim_impl, world_size=world,
               micro_batches=MICRO_BATCHES, status="ok", torch=torch.__version__,
               transformers=transformers.__version__, alloc_conf=os.environ.get("PYTORCH_CUDA_ALLOC_CONF"),
               hidden_size=cfg["hidden_size"], num_hidden_layers=cfg["num_hidden_layers"],
               intermediate_size=cfg["intermediate_size"], vocab_size=cfg["vocab_size"],
               tie_word_embeddings=cfg["tie_word_embeddings"], entropy_compiled=compile_entropy,
               seq_len=seq_len, rows=rows, tokens_actual=rows * row_len, passes=passes,
               logprob_tokens=logprob_tokens, logprob_tokens_actual=shape(logprob_tokens)[0] * shape(logprob_tokens)[1],
               nvls=os.environ.get("NCCL_NVLS_ENABLE"), rank_seen=rank)
    if cuda:
        res["gpu"] = torch.cuda.get_device_name(dev)
        res["gpu_total_bytes"] = torch.cuda.get_device_properties(dev).total_memory

    def sync():
        if cuda:
            torch.cuda.synchronize(dev)

    def mark():
        if cuda:
            sync()
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats(dev)

    def peaks(prefix: str) -> None:
        if cuda:
            sync()
            res[prefix + "_peak_allocated"] = torch.cuda.max_memory_allocated(dev)
            res[prefix + "_peak_reserved"] = torch.cuda.max_memory_reserved(dev)

    hf_cfg = Qwen2Config(**cfg, rms_norm_eps=1e-6, hidden_act="silu", use_cache=False, use_sliding_window=False,
                         attn_implementation="sdpa")
    hf_cfg._attn_implementation = "sdpa"
    torch.manual_seed(0)
    ce = _flash_cross_entropy()
    ent_fn = torch.compile(entropy_from_logits, dynamic=True) if compile_entropy else entropy_from_logits
    try:
        if launched:  # 14B/32B in fp32 do not fit one GPU unsharded: shard first, then allocate the shards
            with torch.device("meta"):
                model = Qwen2ForCausalLM(hf_cfg).to(torch.float32)
        else:
            with torch.device(dev):
                model = Qwen2ForCausalLM(hf_cfg).to(torch.float32)
        model.config.use_cache = False
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        res["n_params"] = sum(p.numel() for p in model.parameters())
        mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32, cast_forward_inputs=True)
        kw = dict(mesh=mesh, mp_policy=mp, reshard_after_forward=True)
        layer_cls = type(model.model.layers[0])
        for m in list(model.modules()):
            if isinstance(m, layer_cls) or (isinstance(m, torch.nn.Embedding) and not cfg["tie_word_embeddings"]):
                fully_shard(m, **kw)
        fully_shard(model, **kw)
        if launched:
            model.to_empty(device=dev)
            with torch.no_grad():
                for name, p in model.named_parameters():
                    local = p.to_local() if hasattr(p, "to_local") else p
                    local.fill_(1.0) if name.endswith("norm.weight") else local.normal_(0.0, 0.02)
            rotary = model.model.rotary_emb  # its inv_freq buffer is computed in __init__: rebuild it for real
            model.model.rotary_emb = type(rotary)(config=hf_cfg, device=dev)
        opt = None
        if do_update:
            okw = dict(lr=1e-6, betas=(0.9, 0.999), weight_decay=1e-2)
            if optim_impl == "fused":
                okw["fused"] = True
            opt = torch.optim.AdamW(model.parameters(), **okw)
        res["alloc_static_bytes"] = torch.cuda.memory_allocated(dev) if cuda else 0

        g = torch.Generator(device="cpu").manual_seed(1)

        def batch(t: int = tokens):
            n, length = shape(t)
            ids = torch.randint(0, cfg["vocab_size"], (n, length), generator=g).to(dev)
            labels = torch.roll(ids, shifts=-1, dims=1).reshape(-1)  # input_ids_rmpad_rolled
            pos = torch.arange(length, device=dev).unsqueeze(0).expand(n, length)
            return ids, labels, pos

        def forward(ids, labels, pos, calc_entropy: bool):
            with torch.autocast(device_type=dev.type, dtype=torch.bfloat16):
                out = model(input_ids=ids, attention_mask=None, position_ids=pos, use_cache=False)
                logits = out.logits.view(-1, out.logits.shape[-1])
                logits.div_(1.0)  # temperature, in place as verl does
                nll, impl = ce(logits, labels, not calc_entropy)
                res["logprob_impl"] = impl
                res["logits_dtype"] = str(logits.dtype)
                ent = ent_fn(logits) if calc_entropy else None
            return -nll, ent

        def update_step(step: int) -> None:
            model.train()
            opt.zero_grad()
            t0 = _time.perf_counter()
            for _ in range(MICRO_BATCHES):
                ids, labels, pos = batch()
                log_prob, ent = forward(ids, labels, pos, entropy)
                old = log_prob.detach()
                adv = torch.randn_like(old)
                ratio = torch.exp(log_prob - old)
                pg = torch.maximum(-adv * ratio, -adv * torch.clamp(ratio, 0.8, 1.28)).mean()
                kl = (torch.exp(old - log_prob) - (old - log_prob) - 1).mean()  # low_var_kl against a "ref"
                loss = pg + KL_COEF * kl
                if ent is not None:
                    loss = loss - ENTROPY_COEFF * ent.mean()
                (loss / MICRO_BATCHES).backward()
                del log_prob, ent, loss, ratio, pg, kl
            sync()
            t1 = _time.perf_counter()
            torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
            opt.step()
            opt.zero_grad()
            sync()
            res[f"update{step}_fwd_bwd_seconds"] = round(t1 - t0, 4)
            res[f"update{step}_optim_seconds"] = round(_time.perf_counter() - t1, 4)

        def logprob_pass() -> None:
            model.eval()
            with torch.no_grad():
                ids, labels, pos = batch(logprob_tokens)
                forward(ids, labels, pos, True)  # compute_log_prob: calculate_entropy=True

        def timed(fn, *a) -> float:
            sync()
            t0 = _time.perf_counter()
            fn(*a)
            sync()
            return round(_time.perf_counter() - t0, 4)

        if do_update:
            mark()
            res["update1_seconds"] = timed(update_step, 1)  # the first step creates AdamW's state
            peaks("update1")
        mark()
        res["logprob_seconds"] = timed(logprob_pass)  # the first pass compiles the entropy
        peaks("logprob")
        for step in range(2, steps + 1):
            if do_update:
                mark()
                res[f"update{step}_seconds"] = timed(update_step, step)
                peaks(f"update{step}")
            res[f"logprob{step}_seconds"] = timed(logprob_pass)  # steady state: timing only
        if do_update:
            res["optim_state_bytes"] = sum(t.numel() * t.element_size() for st in opt.state.values()
                                           for t in st.values() if torch.is_tensor(t) and t.dim() > 0)
            res["peak_allocated"] = max(res[f"update{k}_peak_allocated"] for k in range(1, steps + 1)) if cuda else 0
            res["peak_reserved"] = max(res[f"update{k}_peak_reserved"] for k in range(1, steps + 1)) if cuda else 0
    except torch.cuda.OutOfMemoryError as e:
        res["status"] = "OOM"
        res["error"] = str(e).splitlines()[0][:400]
        if cuda:
            res["peak_allocated_at_oom"] = torch.cuda.max_memory_allocated(dev)
            res["peak_reserved_at_oom"] = torch.cuda.max_memory_reserved(dev)
    if world > 1:  # the slowest rank's time and the largest rank's peak: what the run waits for / runs out of
        every: list = [None] * world
        dist.all_gather_object(every, res)
        for k, v in list(res.items()):
            if isinstance(v, (int, float)) and not isinstance(v, bool) and (
                    k.endswith("_seconds") or "_peak_" in k or k.startswith("peak_")):
                res[k] = max(r.get(k, v) for r in every)
        bad = [r for r in every if r.get("status") != "ok"]
        if bad and res["status"] == "ok":
            res.update(status=bad[0]["status"], error=f"rank {bad[0].get('rank_seen')}: {bad[0].get('error', '')}")
    res["rank"] = rank
    dist.destroy_process_group()
    return res


# ---------------------------------------------------------------------------
# Driver: one subprocess per case
# ---------------------------------------------------------------------------
def _case_cmd(case: tuple, path: str, tiny: bool) -> tuple[list[str], dict]:
    here = os.path.abspath(__file__)
    if path == "plain":
        model_name, tokens, optim_impl = case
        ident = dict(path="plain", model=model_name, tokens=tokens, optim=optim_impl)
        args = ["--model", model_name, "--tokens", str(tokens), "--optim", optim_impl]
    else:
        model_name, tokens, entropy, optim_impl, compiled = case
        ident = dict(path="fsdp2", model=model_name, tokens=tokens, entropy=entropy, optim=optim_impl,
                     entropy_compiled=compiled)
        args = ["--path", "fsdp2", "--model", model_name, "--tokens", str(tokens), "--optim", optim_impl,
                "--entropy", str(int(entropy))] + ([] if compiled else ["--eager-entropy"])
    return [sys.executable, here, *args] + (["--tiny"] if tiny else []), ident


def torchrun_cmd(nproc: int, model: str, tokens: int, logprob_tokens: int, compiled: bool, steps: int = 3,
                 seq_len: int = X8_SEQ_LEN, models_tiny: bool = False, optim: str = "foreach") -> list[str]:
    """One case as `torchrun --nproc_per_node=N` runs it (issue #48): entropy on, foreach AdamW (verl's default;
    the one-GPU dry run of 7B needs the fused one, as the memory table's 7B cases)."""
    args = ["--path", "fsdp2", "--model", model, "--tokens", str(tokens), "--logprob-tokens", str(logprob_tokens),
            "--optim", optim, "--entropy", "1", "--steps", str(steps), "--seq-len", str(seq_len)]
    args += [] if compiled else ["--eager-entropy"]
    args += ["--tiny"] if models_tiny else []
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}",
            os.path.abspath(__file__), *args]


def driver_torchrun(jsonl_path: str, nproc: int, cases: list[tuple], budget_s: float, case_timeout_s: float,
                    tiny: bool = False, optim: str = "foreach") -> list[dict]:
    """Each case in its own torchrun (one case per process group); rank 0's RESULT line appended to the JSONL.
    A case that fails, runs out of memory or outlasts its timeout is recorded as such, never raised."""
    env = {**os.environ, "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True", **NO_MULTICAST_ENV}
    rows, t_start = [], time.time()
    for model, tu, tl, compiled in cases:
        ident = dict(path="fsdp2", model=model, tokens=tu, logprob_tokens=tl, entropy=True,
                     entropy_compiled=compiled, world_size=nproc, seq_len=X8_SEQ_LEN, optim=optim)
        left = budget_s - (time.time() - t_start)
        if left < 30:
            row = dict(ident, status="skipped_budget")
        else:
            t0 = time.time()
            try:
                p = subprocess.run(torchrun_cmd(nproc, model, tu, tl, compiled, models_tiny=tiny, optim=optim), env=env,
                                   capture_output=True, text=True, timeout=min(case_timeout_s, left))
                line = next((ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")), None)
                tail = (p.stderr or p.stdout)[-1500:]
                row = json.loads(line[len("RESULT "):]) if line else dict(
                    ident, status="OOM" if "out of memory" in tail.lower() else "failed", returncode=p.returncode,
                    error=tail)
            except subprocess.TimeoutExpired:
                row = dict(ident, status="timeout")
            row["wall_s"] = round(time.time() - t0, 1)
        rows.append(row)
        with open(jsonl_path, "a") as f:
            f.write(json.dumps(row) + "\n")
        upd, lp = row.get("update2_peak_reserved", 0) / GiB, row.get("logprob_peak_reserved", 0) / GiB
        print(f"CASE {ident} {row['status']} wall={row.get('wall_s')} reserved update={upd:.2f} logprob={lp:.2f} GiB "
              f"update2={row.get('update2_seconds')} s logprob2={row.get('logprob2_seconds')} s", flush=True)
    return rows


def driver(out_path: str, budget_s: float, per_case_timeout: float, jsonl_path: str | None, tiny: bool,
           path: str = "fsdp2", models: list[str] | None = None, eager_only: bool = False,
           tokens_min: int = 0) -> None:
    rows = []
    t_start = time.time()
    cases = CASES if path == "plain" else [c for c in CASES_FSDP2 if not eager_only or not c[4]]
    env = dict(os.environ)
    if path == "fsdp2":  # verl turns expandable segments on for training (fsdp_workers.py trainer mode)
        env["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"
    for case in cases:
        cmd, ident = _case_cmd(case, path, tiny)
        if (models and ident["model"] not in models) or (tiny and ident["tokens"] > 4096) \
                or ident["tokens"] < tokens_min:
            continue
        elapsed = time.time() - t_start
        if elapsed > budget_s:
            rows.append(dict(ident, status="skipped_budget"))
            print(f"SKIP {ident}: budget spent", flush=True)
            continue
        t0 = time.time()
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, env=env,
                               timeout=min(per_case_timeout, max(30.0, budget_s + 60 - elapsed)))
            line = next((ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")), None)
            if line is not None:
                row = json.loads(line[len("RESULT "):])
            else:
                tail = (p.stderr or p.stdout)[-1500:]
                status = "OOM" if "OutOfMemory" in tail or "out of memory" in tail else "failed"
                row = dict(ident, status=status, returncode=p.returncode, error=tail)
        except subprocess.TimeoutExpired:
            row = dict(ident, status="timeout")
        row["wall_s"] = round(time.time() - t0, 1)
        rows.append(row)
        if jsonl_path:
            with open(jsonl_path, "a") as f:
                f.write(json.dumps(row) + "\n")
        pk, pr = row.get("peak_allocated"), row.get("peak_reserved")
        lp = row.get("logprob_peak_allocated")
        print(f"CASE {ident} {row['status']:<6} alloc={pk / GiB if pk else float('nan'):7.2f} "
              f"reserved={pr / GiB if pr else float('nan'):7.2f} logprob={lp / GiB if lp else float('nan'):7.2f} "
              f"GiB wall={row['wall_s']}s {row.get('error', '')[-300:] if row['status'] != 'ok' else ''}",
              flush=True)
    if path == "plain":
        description = ("Per-GPU peak memory of one verl-style FSDP actor step, world size 1, "
                       "fp32 master weights, bf16 autocast, grad checkpointing, sdpa, AdamW, "
                       "one packed row of T tokens, fp32 log_softmax+gather loss. Bytes.")
    else:
        description = ("Per-GPU peaks (bytes) of verl v0.6.1's FSDP2 actor on one rank: update step "
                       f"({MICRO_BATCHES} packed micro-batches of T tokens, entropy on/off) and the "
                       "forward-only old-log-prob pass (entropy always), see run_case_fsdp2.")
    table = dict(description=description, configs=QWEN25_CONFIGS,
                 command=" ".join([os.path.basename(sys.executable)] + sys.argv),
                 env={"PYTORCH_CUDA_ALLOC_CONF": env.get("PYTORCH_CUDA_ALLOC_CONF")},
                 date=time.strftime("%Y-%m-%d", time.gmtime()), cases=rows)
    with open(out_path, "w") as f:
        json.dump(table, f, indent=1)
    print(f"wrote {out_path} ({len(rows)} cases, {time.time() - t_start:.0f}s)", flush=True)


# ---------------------------------------------------------------------------
# Memory model and fit (pure Python)
# ---------------------------------------------------------------------------
STATIC_BYTES_PER_PARAM = 4 + 4 + 8  # fp32 weights + fp32 grads + Adam m and v
NO_GRAD_BYTES_PER_PARAM = 4 + 8      # weights + Adam, before backward has allocated grads

# Constants fitted on the H200 run of 2026-11-30 (torch 2.11.0+cu130, transformers 5.17.0);
# `--fit` recomputes them from the JSON.
FITTED = dict(optim_tmp={"foreach": 4.0, "fused": 0.0}, a=4.63, c=12.18)


def predict_peak_bytes(n_params: int, tokens: int, hidden: int, layers: int, vocab: int,
                       k: dict | None = None, optim: str = "foreach", world_size: int = 1) -> float:
    """Per-GPU peak bytes of one training step = max of two phases.

    end of backward / optimizer step (all grads live, optimizer transient):
        A = n_params * (16 + optim_tmp) / world_size
            16 = fp32 weights 4 + fp32 grads 4 + Adam m,v 8; optim_tmp = 4 for the
            torch foreach AdamW (one fp32 sqrt(v) buffer), 0 for fused.
    start of backward (logits gradient, grads not yet allocated):
        B = n_params * 12 / world_size
            + a * T * hidden * layers   (checkpointed residual stream, fp32: a ~ 4)
            + c * T * vocab             (bf16 logits, fp32 log_softmax, fp32/bf16 grads: c ~ 12)
    T = tokens in the micro-batch on this GPU (activations and logits are not sharded).
    """
    k = k or FITTED
    A = n_params * (STATIC_BYTES_PER_PARAM + k["optim_tmp"][optim]) / world_size
    B = (n_params * NO_GRAD_BYTES_PER_PARAM / world_size
         + k["a"] * tokens * hidden * layers + k["c"] * tokens * vocab)
    return max(A, B)


def _lstsq(X, y, w):
    """Weighted least squares via normal equations (tiny systems)."""
    n = len(X[0])
    A = [[sum(w[r] * X[r][i] * X[r][j] for r in range(len(X))) for j in range(n)] for i in range(n)]
    bvec = [sum(w[r] * X[r][i] * y[r] for r in range(len(X))) for i in range(n)]
    for col in range(n):  # Gauss-Jordan with partial pivoting
        piv = max(range(col, n), key=lambda r: abs(A[r][col]))
        A[col], A[piv] = A[piv], A[col]
        bvec[col], bvec[piv] = bvec[piv], bvec[col]
        for r in range(n):
            if r != col and A[col][col] != 0:
                f = A[r][col] / A[col][col]
                A[r] = [A[r][j] - f * A[col][j] for j in range(n)]
                bvec[r] -= f * bvec[col]
    return [bvec[i] / A[i][i] for i in range(n)]


def oom_demand(row: dict) -> float | None:
    """GiB PyTorch wanted when it ran out: allocated + the failed request (from torch's OOM message)."""
    import re

    err = row.get("error") or ""
    tried = re.search(r"Tried to allocate ([0-9.]+) GiB", err)
    allocated = re.search(r"([0-9.]+) GiB is allocated by PyTorch", err)
    if not (tried and allocated):
        return None
    return float(tried.group(1)) + float(allocated.group(1))


def fit(json_path: str, capacity_gib: float = 139.8) -> dict:
    with open(json_path) as f:
        table = json.load(f)
    rows = [r for r in table["cases"] if r.get("status") == "ok"]
    if not rows:
        print("no ok rows")
        return {}
    # optimizer transient, measured: peak of the optimizer step minus what was live before it
    tmp = {"foreach": 0.0, "fused": 0.0}
    for r in rows:
        s = r.get("step2", r["step1"])
        bpp = (s["peak_optim"] - s["alloc_after_bwd"]) / r["n_params"]
        tmp[r["optim"]] = max(tmp[r["optim"]], round(bpp, 1))
    # a, c from the cases whose backward peak is clearly the logits phase (B)
    Brows = [r for r in rows if r.get("step2", r["step1"])["peak_bwd"]
             - r.get("step2", r["step1"])["alloc_after_bwd"] > 2 * GiB]
    X = [[r["tokens"] * r["hidden_size"] * r["num_hidden_layers"], r["tokens"] * r["vocab_size"]] for r in Brows]
    y = [r.get("step2", r["step1"])["peak_bwd"] - NO_GRAD_BYTES_PER_PARAM * r["n_params"] for r in Brows]
    w = [1.0 / r.get("step2", r["step1"])["peak_bwd"] ** 2 for r in Brows]
    a, c = _lstsq(X, y, w)
    k = dict(optim_tmp=tmp, a=a, c=c)
    print(f"optimizer transient bytes/param: {tmp}")
    print(f"fit on {len(Brows)} logits-phase cases: a={a:.3f} B/(token*hidden*layer), c={c:.3f} B/(token*vocab)")
    print(f"{'model':>5} {'T':>6} {'optim':<7} {'A_GiB':>7} {'B_GiB':>7} {'pred':>7} {'meas':>7} {'resid':>7}")
    worst = 0.0
    for r in table["cases"]:
        cfg = QWEN25_CONFIGS[r["model"]]
        P = r.get("n_params") or param_count(cfg)
        T, h, L, V = r["tokens"], cfg["hidden_size"], cfg["num_hidden_layers"], cfg["vocab_size"]
        A = P * (STATIC_BYTES_PER_PARAM + tmp[r["optim"]])
        B = P * NO_GRAD_BYTES_PER_PARAM + a * T * h * L + c * T * V
        pred = predict_peak_bytes(P, T, h, L, V, k, r["optim"])
        if r.get("status") == "ok":
            meas = r["peak_allocated"]
            rel = pred / meas - 1
            worst = max(worst, abs(rel))
            tail = f"{meas / GiB:7.2f} {rel * 100:+6.1f}%"
        elif (demand := oom_demand(r)) is not None and pred / GiB <= capacity_gib:
            # Out of memory with the prediction below capacity: the allocator had the bytes reserved
            # but fragmented. The failed request plus what was allocated is a lower bound on the peak.
            rel = pred / GiB / demand - 1
            worst = max(worst, abs(rel))
            tail = f"{demand:7.2f} {rel * 100:+6.1f}% (OOM by fragmentation: demand at failure is a lower bound)"
        else:
            verdict = "agrees" if pred / GiB > capacity_gib else "DISAGREES"
            tail = f"{r.get('status'):>7} (pred > {capacity_gib} GiB capacity: {verdict})"
        print(f"{r['model']:>5} {T:>6} {r['optim']:<7} {A / GiB:7.2f} {B / GiB:7.2f} {pred / GiB:7.2f} {tail}")
    print(f"worst |residual| over measured peaks = {worst * 100:.1f}%  "
          f"({'PASS' if worst <= 0.15 else 'FAIL'} at +-15%)")
    return dict(k, worst=worst)


def fit_fsdp2(json_path: str) -> dict:
    """Check recipe.memory against the FSDP2 table: every case within -5 % / +15 % of its RESERVED peak.

    The reserved peak is what the caching allocator takes from the GPU, so it is what runs out; the
    allocated peak is printed next to it. Run from the repository root: python -m bench.memory_calibration
    --fit --json bench/memory_calibration_fsdp2.json
    """
    from catalog.models import MODELS
    from recipe import memory

    with open(json_path) as f:
        table = json.load(f)
    print(f"{table.get('gpu')}, torch {table.get('torch')}, transformers {table.get('transformers')}, "
          f"{table.get('date')}; fit checked on the reserved peak (GiB)")
    print(f"{'model':>5} {'T':>6} {'entropy':<12} {'optim':<7} | {'upd alloc':>9} {'reserved':>8} {'model':>7} "
          f"{'resid':>6} | {'lp alloc':>8} {'reserved':>8} {'model':>7} {'resid':>6}")
    lo, hi = 0.0, 0.0
    for r in table["cases"]:
        if r.get("status") != "ok":
            print(f"{r['model']:>5} {r['tokens']:>6} {r.get('status')}")
            continue
        spec = MODELS[f"Qwen/Qwen2.5-{r['model'][:-1]}B"]
        eager = not r["entropy_compiled"]
        step = memory.OPTIMIZER_STEP_BYTES if r["optim"] == "foreach" else 0.0
        upd = memory.update_peak_bytes(spec, r["tokens"], 1, optimizer_step=step, entropy_eager=eager and r["entropy"])
        lp = memory.logprob_peak_bytes(spec, r["tokens"], 1, entropy_eager=eager)
        ru, rl = upd / r["update2_peak_reserved"] - 1, lp / r["logprob_peak_reserved"] - 1
        lo, hi = min(lo, ru, rl), max(hi, ru, rl)
        ent = ("on" if r["entropy"] else "off") + (" eager" if eager else "")
        print(f"{r['model']:>5} {r['tokens']:>6} {ent:<12} {r['optim']:<7} | "
              f"{r['update2_peak_allocated'] / GiB:9.2f} {r['update2_peak_reserved'] / GiB:8.2f} {upd / GiB:7.2f} "
              f"{ru * 100:+5.1f}% | {r['logprob_peak_allocated'] / GiB:8.2f} {r['logprob_peak_reserved'] / GiB:8.2f} "
              f"{lp / GiB:7.2f} {rl * 100:+5.1f}%")
    ok = lo >= -0.05 and hi <= 0.15
    print(f"worst: {lo * 100:+.1f}% under, {hi * 100:+.1f}% over the reserved peak "
          f"({'PASS' if ok else 'FAIL'}: allowed -5 % / +15 %)")
    return dict(under=lo, over=hi, ok=ok)


def merge_runs(jsonl_paths: list[str], out_path: str) -> None:
    """One table from the driver's JSONL files (the device runs were split to fit their time limit)."""
    cases = [json.loads(line) for p in jsonl_paths for line in open(p) if line.strip()]
    first = next(c for c in cases if c.get("status") == "ok")
    table = dict(description=("Per-GPU peaks (bytes) of verl v0.6.1's FSDP2 actor on one rank: update step "
                              f"({MICRO_BATCHES} packed micro-batches of T tokens, entropy on/off, compiled or "
                              "eager) and the forward-only old-log-prob pass (entropy always); see "
                              "run_case_fsdp2. update2_* is the steady-state step (AdamW state present)."),
                 gpu=first.get("gpu"), gpu_total_bytes=first.get("gpu_total_bytes"), torch=first.get("torch"),
                 transformers=first.get("transformers"), alloc_conf=first.get("alloc_conf"),
                 date=time.strftime("%Y-%m-%d", time.gmtime()), configs=QWEN25_CONFIGS, cases=cases)
    with open(out_path, "w") as f:
        json.dump(table, f, indent=1)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", choices=list(QWEN25_CONFIGS))
    ap.add_argument("--tokens", type=int)
    ap.add_argument("--optim", choices=["foreach", "fused"], default="foreach")
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--tiny", action="store_true", help="toy dimensions, for a CPU logic test")
    ap.add_argument("--path", choices=["plain", "fsdp2"], default="fsdp2",
                    help="fsdp2: verl's training path (run_case_fsdp2); plain: the first table's loop")
    ap.add_argument("--entropy", type=int, choices=[0, 1], default=0)
    ap.add_argument("--eager-entropy", action="store_true", help="actor.use_torch_compile=false")
    ap.add_argument("--seq-len", type=int, default=0,
                    help="fsdp2: rows of this many tokens (0: one packed row, the memory table's shape)")
    ap.add_argument("--logprob-tokens", type=int, default=0,
                    help="fsdp2: the log-prob pass's token budget (0: --tokens)")
    ap.add_argument("--passes", default="update,logprob", choices=["update,logprob", "logprob"],
                    help="fsdp2: logprob = the forward-only pass alone, no optimizer")
    ap.add_argument("--models", default="", help="driver: comma-separated subset of the models")
    ap.add_argument("--eager-only", action="store_true", help="driver: only the eager-entropy cases")
    ap.add_argument("--tokens-min", type=int, default=0, help="driver: skip the smaller token budgets")
    ap.add_argument("--driver", action="store_true")
    ap.add_argument("--nproc", type=int, default=0,
                    help="driver: run CASES_X8 (issue #48) each under torchrun --nproc_per_node=N")
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--out", default=os.path.join(here, "memory_calibration.json"))
    ap.add_argument("--jsonl", default=None)
    ap.add_argument("--budget-s", type=float, default=480.0)
    ap.add_argument("--case-timeout-s", type=float, default=180.0)
    ap.add_argument("--fit", action="store_true")
    ap.add_argument("--merge", nargs="+", help="JSONL files of driver runs to merge into --out")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    if args.merge:
        merge_runs(args.merge, args.out)
    elif args.fit:
        path = args.json or args.out
        with open(path) as f:
            fsdp2 = any(c.get("path") == "fsdp2" for c in json.load(f)["cases"])
        fit_fsdp2(path) if fsdp2 else fit(path)
    elif args.driver and args.nproc:
        cases = [c for c in CASES_X8 if not args.models or c[0] in args.models.split(",")]
        driver_torchrun(args.jsonl or args.out + "l", args.nproc, cases, args.budget_s, args.case_timeout_s,
                        args.tiny)
    elif args.driver:
        driver(args.out, args.budget_s, args.case_timeout_s, args.jsonl, args.tiny, args.path,
               [m for m in args.models.split(",") if m], args.eager_only, args.tokens_min)
    else:
        if not args.model or not args.tokens:
            ap.error("--model and --tokens are required in one-case mode")
        if args.path == "fsdp2":
            res = run_case_fsdp2(args.model, args.tokens, bool(args.entropy), args.optim, args.steps, args.tiny,
                                 not args.eager_entropy, args.seq_len, args.passes, args.logprob_tokens)
            if res.get("rank", 0) != 0:  # under torchrun only rank 0 reports (the ranks' maxima)
                return
        else:
            res = run_case(args.model, args.tokens, args.optim, args.steps, args.tiny)
        print("RESULT " + json.dumps(res), flush=True)


if __name__ == "__main__":
    main()
