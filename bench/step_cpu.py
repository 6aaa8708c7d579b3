#!/usr/bin/env python3
"""One training step of a ~20M-parameter Llama, batch 4 x 256, on the CPU:
tacod's engine (bench_step) and PyTorch + transformers side by side, with the
same number of threads, in one run. Prints both and the ratio.

    /opt/tacofix/bin/python bench/step_cpu.py [--build build] [--threads 2]

Needs the fixture environment (tests/fixtures/requirements.txt) and a build
with the bench_step target. A timing, not a test.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time


def torch_step_times(model, ids, labels, iters, checkpointing):
    import torch
    if checkpointing:
        model.gradient_checkpointing_enable()
    else:
        model.gradient_checkpointing_disable()
    model.train()
    times = []
    for i in range(iters + 1):
        t0 = time.perf_counter()
        loss = model(input_ids=ids, labels=labels).loss
        loss.backward()
        dt = time.perf_counter() - t0
        model.zero_grad(set_to_none=True)
        if i:
            times.append(dt)
    return statistics.median(times), float(loss.detach())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=256)
    args = ap.parse_args()

    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    os.environ["OPENBLAS_NUM_THREADS"] = str(args.threads)
    # Both sides run OpenMP; spinning waiters cost 3x on this shared 2-core
    # machine, so both get the passive policy tacod's binaries use.
    os.environ.setdefault("OMP_WAIT_POLICY", "passive")
    import torch
    import transformers
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)

    cfg = LlamaConfig(vocab_size=8192, hidden_size=384, intermediate_size=1024,
                      num_hidden_layers=8, num_attention_heads=6,
                      num_key_value_heads=2, max_position_embeddings=1024,
                      tie_word_embeddings=False)
    model = LlamaForCausalLM(cfg).float()
    nparams = sum(p.numel() for p in model.parameters())
    B, T = args.batch, args.seq
    ids = torch.randint(0, cfg.vocab_size, (B, T))
    labels = ids.clone()
    targets = torch.full((B, T), -100, dtype=torch.long)
    targets[:, :-1] = labels[:, 1:]

    with tempfile.TemporaryDirectory() as d:
        model.save_pretrained(d, safe_serialization=True)
        with open(os.path.join(d, "batch.json"), "w") as f:
            json.dump({"input_ids": ids.tolist(),
                       "targets": targets.tolist()}, f)
        exe = os.path.join(args.build, "bench_step")
        out = subprocess.run([exe, d, os.path.join(d, "batch.json"),
                              str(args.iters)], check=True,
                             capture_output=True, text=True).stdout
        ours = json.loads(out)

    t_plain, loss_ref = torch_step_times(model, ids, labels, args.iters, False)
    t_ckpt, _ = torch_step_times(model, ids, labels, args.iters, True)

    tokens = B * T
    print(f"model: Llama {nparams / 1e6:.1f}M parameters, batch {B} x {T}, "
          f"{args.threads} threads, CPU")
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, "
          f"OMP_WAIT_POLICY={os.environ['OMP_WAIT_POLICY']}")
    print(f"loss: tacod {ours['loss']:.6f}, PyTorch {loss_ref:.6f}")
    print(f"{'':34s} {'step s':>8s} {'tokens/s':>9s} {'ratio':>6s}")
    print(f"{'tacod (activation checkpointing)':34s} {ours['median_s']:8.3f} "
          f"{tokens / ours['median_s']:9.0f} {1.0:6.2f}")
    for name, t in (("PyTorch + transformers", t_plain),
                    ("PyTorch, gradient checkpointing", t_ckpt)):
        print(f"{name:34s} {t:8.3f} {tokens / t:9.0f} "
              f"{t / ours['median_s']:6.2f}")
    print("ratio = PyTorch time / tacod time (above 1: tacod is faster)")
    print(f"tacod peak backend memory: {ours['peak_bytes'] / 2**20:.0f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
