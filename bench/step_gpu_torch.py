#!/usr/bin/env python3
"""The PyTorch side of tests/gpu/run.sh: one training step of a config's
model in PyTorch + transformers, the way people fine-tune on one GPU, timed
like bench_model_step and printed as the same one-line JSON.

    python3 bench/step_gpu_torch.py --config CFG.json --batch 4 --seq 1024
        [--steps 3] [--warmup 1] [--peak-tflops 989] [--device cuda]
        [--optimizer auto|bnb|torch]

Model: AutoModelForCausalLM.from_config of the config's JSON, random
weights, bf16 on the device, SDPA attention, gradient checkpointing.
Optimizer (--optimizer auto, the default): 8-bit AdamW from bitsandbytes
(bnb.optim.AdamW8bit, its defaults), what people fine-tune with on one GPU,
when it imports and a trial step of it runs on the device; else
torch.optim.AdamW(fused=True). "optimizer" says which ran, "bitsandbytes"
its version (null: not imported) and "optimizer_note" why bitsandbytes was
not used. --optimizer bnb fails without it; torch never tries it.
MFU = 6 * params * B * T / step_s / (peak TFLOP/s * 1e12), as
bench_model_step counts it (the recomputation of checkpointing not
counted).
A step: forward with labels, backward, optimizer step, zero_grad; timed
between CUDA synchronisations. peak_bytes: torch.cuda.max_memory_allocated.
--device cpu runs the same code on the CPU (no fused AdamW, peak 0), to test
the script without a GPU.

Exit status 0, or 1 with a JSON line holding "error".
"""
import argparse
import json
import os
import statistics
import sys
import time


def load_config(path):
    import transformers
    with open(path) as f:
        d = json.load(f)
    model_type = d.pop("model_type")
    # torch_dtype / dtype in the file would only set a default; the model
    # is made in bf16 below either way.
    return transformers.AutoConfig.for_model(model_type, **d)


def make_model(cfg, device):
    import torch
    from transformers import AutoModelForCausalLM
    cfg.use_cache = False
    # Made on the device in bf16 directly: a host-side fp32 init of 8B
    # parameters takes minutes.
    with torch.device(device):
        try:
            model = AutoModelForCausalLM.from_config(
                cfg, dtype=torch.bfloat16, attn_implementation="sdpa")
        except TypeError:  # transformers < 4.56 names it torch_dtype
            model = AutoModelForCausalLM.from_config(
                cfg, torch_dtype=torch.bfloat16, attn_implementation="sdpa")
    model.to(device=device, dtype=torch.bfloat16)
    # non-reentrant: the variant PyTorch recommends, and the one that
    # checkpoints correctly whatever requires grad
    model.gradient_checkpointing_enable(
        gradient_checkpointing_kwargs={"use_reentrant": False})
    model.train()
    return model


def bnb_trial(device):
    """bitsandbytes, once a step of its AdamW8bit ran on the device: it can
    import and still lack a build for this CUDA, which only a step shows.
    The trial tensor is big enough (>= 4096 elements) for 8-bit state."""
    import torch
    import bitsandbytes as bnb
    p = torch.nn.Parameter(torch.ones(64, 128, device=device))
    p.grad = torch.full_like(p, 0.5)
    opt = bnb.optim.AdamW8bit([p], lr=1e-2)
    opt.step()
    if device == "cuda":
        torch.cuda.synchronize()
    if not bool(torch.isfinite(p).all()) or float(p.float().max()) >= 1.0:
        raise RuntimeError("AdamW8bit trial step did not update")
    return bnb


def make_optimizer(model, device, which, res):
    """The optimizer and its label; res gets "bitsandbytes" and, when
    bitsandbytes was wanted and not used, "optimizer_note"."""
    import torch
    params = [p for p in model.parameters() if p.requires_grad]
    res["bitsandbytes"] = None
    if which in ("auto", "bnb"):
        try:
            bnb = bnb_trial(device)
            res["bitsandbytes"] = getattr(bnb, "__version__", "?")
            return bnb.optim.AdamW8bit(params, lr=1e-5), "bnb.AdamW8bit"
        except Exception as e:  # not installed, or no build for this CUDA
            if which == "bnb":
                raise
            res["optimizer_note"] = "bitsandbytes not used: %s: %s" % (
                type(e).__name__, str(e).splitlines()[0][:200] if str(e)
                else "")
    if device == "cuda":
        return torch.optim.AdamW(params, lr=1e-5, fused=True), \
            "torch.AdamW(fused)"
    return torch.optim.AdamW(params, lr=1e-5), "torch.AdamW"


def run(args, res):
    import torch
    import transformers
    res["torch"] = torch.__version__
    res["transformers"] = transformers.__version__
    device = args.device
    if device == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("torch sees no CUDA device")
    torch.manual_seed(args.seed)
    t0 = time.perf_counter()
    model = make_model(load_config(args.config), device)
    opt, res["optimizer"] = make_optimizer(model, device, args.optimizer,
                                           res)
    res["init_s"] = time.perf_counter() - t0
    res["params"] = sum(p.numel() for p in model.parameters())
    res["attn"] = getattr(model.config, "_attn_implementation", None)
    res["grad_checkpointing"] = bool(
        getattr(model, "is_gradient_checkpointing", False))
    V = model.config.vocab_size
    g = torch.Generator(device=device).manual_seed(args.seed)

    def sync():
        if device == "cuda":
            torch.cuda.synchronize()

    times, losses = [], []
    for i in range(args.warmup + args.steps):
        ids = torch.randint(0, V, (args.batch, args.seq), device=device,
                            generator=g)
        sync()
        t0 = time.perf_counter()
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        sync()
        dt = time.perf_counter() - t0
        losses.append(float(loss.detach()))
        if i >= args.warmup:
            times.append(dt)
    step_s = statistics.median(times)
    tokens = args.batch * args.seq
    res.update({
        "step_s": step_s,
        "step_min_s": min(times),
        "tokens_per_s": tokens / step_s,
        "peak_bytes": (torch.cuda.max_memory_allocated()
                       if device == "cuda" else 0),
        "planned_bytes": None,
        "plan_error_pct": None,
        "mfu": 6.0 * res["params"] * tokens / step_s /
        (args.peak_tflops * 1e12),
        "loss_first": losses[0],
        "loss_last": losses[-1],
    })


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", required=True)
    ap.add_argument("--batch", type=int, required=True)
    ap.add_argument("--seq", type=int, required=True)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--peak-tflops", type=float, default=989.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    ap.add_argument("--optimizer", choices=["auto", "bnb", "torch"],
                    default="auto")
    ap.add_argument("--name")
    args = ap.parse_args()
    if args.steps < 1 or args.warmup < 0:
        ap.error("--steps must be >= 1 and --warmup >= 0")
    name = args.name or os.path.splitext(os.path.basename(args.config))[0]
    if name == "config":
        name = os.path.basename(os.path.dirname(os.path.abspath(
            args.config)))
    res = {"impl": "torch", "backend": args.device, "config": name,
           "B": args.batch, "T": args.seq, "steps": args.steps,
           "peak_tflops": args.peak_tflops}
    try:
        run(args, res)
    except Exception as e:  # one JSON line whatever failed
        res["error"] = "%s: %s" % (type(e).__name__, e)
        print(json.dumps(res), flush=True)
        print("step_gpu_torch: %s" % res["error"], file=sys.stderr)
        return 1
    print(json.dumps(res), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
