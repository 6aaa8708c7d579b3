#!/usr/bin/env python3
"""One training step of a ~20M-parameter Llama, batch 4 x 256, on the CPU:
tacod's engine (bench_step) and PyTorch + transformers side by side, with the
same number of threads, in one run. Prints both and the ratio.

    /opt/tacofix/bin/python bench/step_cpu.py [--build build] [--threads 2]
        [--family llama|qwen3_moe|gpt_oss]

--family qwen3_moe: a tiny Qwen3-MoE instead (16 experts of 256 columns, 2
a token, every layer sparse), transformers' Qwen3MoeForCausalLM against the
engine's routing and per-expert GEMMs. --family gpt_oss: a tiny gpt-oss of
the same width (16 fused experts of 256 columns with biases, 2 a token,
sinks, a window of 128 on the even layers, YaRN), GptOssForCausalLM.

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
    ap.add_argument("--family", choices=["llama", "qwen3_moe", "gpt_oss"],
                    default="llama")
    args = ap.parse_args()

    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    os.environ["OPENBLAS_NUM_THREADS"] = str(args.threads)
    # Both sides run OpenMP; spinning waiters cost 3x on this shared 2-core
    # machine, so both get the passive policy tacod's binaries use.
    os.environ.setdefault("OMP_WAIT_POLICY", "passive")
    import torch
    import transformers
    from transformers import (GptOssConfig, GptOssForCausalLM, LlamaConfig,
                              LlamaForCausalLM, Qwen3MoeConfig,
                              Qwen3MoeForCausalLM)
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)

    if args.family == "qwen3_moe":
        cfg = Qwen3MoeConfig(vocab_size=8192, hidden_size=384,
                             intermediate_size=1024, moe_intermediate_size=256,
                             num_experts=16, num_experts_per_tok=2,
                             norm_topk_prob=True, num_hidden_layers=8,
                             num_attention_heads=6, num_key_value_heads=2,
                             head_dim=64, max_position_embeddings=1024,
                             tie_word_embeddings=False)
        model = Qwen3MoeForCausalLM(cfg).float()
        label = "Qwen3-MoE (16 experts, 2 a token)"
    elif args.family == "gpt_oss":
        cfg = GptOssConfig(vocab_size=8192, hidden_size=384,
                           intermediate_size=256, num_local_experts=16,
                           num_experts_per_tok=2, num_hidden_layers=8,
                           num_attention_heads=6, num_key_value_heads=2,
                           head_dim=64, sliding_window=128,
                           max_position_embeddings=1024,
                           tie_word_embeddings=False)
        cfg._attn_implementation = "eager"
        model = GptOssForCausalLM(cfg).float()
        label = "gpt-oss (16 experts, 2 a token)"
    else:
        cfg = LlamaConfig(vocab_size=8192, hidden_size=384,
                          intermediate_size=1024, num_hidden_layers=8,
                          num_attention_heads=6, num_key_value_heads=2,
                          max_position_embeddings=1024,
                          tie_word_embeddings=False)
        model = LlamaForCausalLM(cfg).float()
        label = "Llama"
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
        runs = {}
        for mode in ("ckpt", "keep"):
            out = subprocess.run([exe, d, os.path.join(d, "batch.json"),
                                  str(args.iters), mode], check=True,
                                 capture_output=True, text=True).stdout
            runs[mode] = json.loads(out)
        ours = runs["ckpt"]

    t_plain, loss_ref = torch_step_times(model, ids, labels, args.iters, False)
    t_ckpt, _ = torch_step_times(model, ids, labels, args.iters, True)

    tokens = B * T
    print(f"model: {label} {nparams / 1e6:.1f}M parameters, batch {B} x {T}, "
          f"{args.threads} threads, CPU")
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, "
          f"OMP_WAIT_POLICY={os.environ['OMP_WAIT_POLICY']}")
    print(f"loss: tacod {ours['loss']:.6f}, PyTorch {loss_ref:.6f}")
    rows = [("tacod, activation checkpointing", runs["ckpt"]["median_s"],
             t_ckpt, "PyTorch, gradient checkpointing"),
            ("tacod, activations kept", runs["keep"]["median_s"], t_plain,
             "PyTorch + transformers (default)")]
    print(f"{'':34s} {'step s':>8s} {'tokens/s':>9s}")
    for ours_name, ours_t, ref_t, ref_name in rows:
        print(f"{ours_name:34s} {ours_t:8.3f} {tokens / ours_t:9.0f}")
        print(f"{ref_name:34s} {ref_t:8.3f} {tokens / ref_t:9.0f}   "
              f"ratio {ref_t / ours_t:.2f}")
    print("ratio = PyTorch time / tacod time (above 1: tacod is faster)")
    print(f"tacod peak backend memory: checkpointing "
          f"{runs['ckpt']['peak_bytes'] / 2**20:.0f} MiB, kept "
          f"{runs['keep']['peak_bytes'] / 2**20:.0f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
