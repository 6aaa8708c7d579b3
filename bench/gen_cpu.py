#!/usr/bin/env python3
"""Greedy decoding of a ~20M-parameter Llama (step_cpu.py's shape), batch
1, on the CPU: tacod's engine (bench_gen: a prefill, then one decode step a
token over its KV cache) and transformers' generate(do_sample=False) side
by side, with the same number of threads, in one run. Prints both decode
rates, the ratio, and whether the two greedy continuations agree.

    /opt/tacofix/bin/python bench/gen_cpu.py [--build build] [--threads 2]
        [--prompt 128] [--new 128]

Needs the fixture environment (tests/fixtures/requirements.txt) and a build
with the bench_gen target. A timing, not a test.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--prompt", type=int, default=128)
    ap.add_argument("--new", type=int, default=128)
    args = ap.parse_args()

    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    os.environ["OPENBLAS_NUM_THREADS"] = str(args.threads)
    # both sides run OpenMP: the passive policy tacod's binaries use
    os.environ.setdefault("OMP_WAIT_POLICY", "passive")
    import torch
    import transformers
    from transformers import LlamaConfig, LlamaForCausalLM
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=8192, hidden_size=384,
                      intermediate_size=1024, num_hidden_layers=8,
                      num_attention_heads=6, num_key_value_heads=2,
                      max_position_embeddings=1024,
                      tie_word_embeddings=False)
    model = LlamaForCausalLM(cfg).float().eval()
    model.generation_config.eos_token_id = None  # every token generated
    nparams = sum(p.numel() for p in model.parameters())
    P, D = args.prompt, args.new
    ids = torch.tensor([[3 + i % (cfg.vocab_size - 3) for i in range(P)]])

    with tempfile.TemporaryDirectory() as d:
        model.save_pretrained(d, safe_serialization=True)
        out = subprocess.run([os.path.join(args.build, "bench_gen"), d,
                              str(P), str(D)], check=True,
                             capture_output=True, text=True).stdout
        ours = json.loads(out)

    def hf_rate(new):
        with torch.no_grad():
            t0 = time.perf_counter()
            g = model.generate(ids, do_sample=False, max_new_tokens=new,
                               min_new_tokens=new,
                               attention_mask=torch.ones_like(ids))
            return time.perf_counter() - t0, g[0, P:].tolist()

    hf_rate(4)  # warm-up
    # the decode rate alone: a run of D tokens less a run of 1 (the
    # prefill and the first token)
    t1, _ = hf_rate(1)
    tD, hf_ids = hf_rate(D)
    ref = (D - 1) / (tD - t1)
    rate = ours["decode_tokens_per_s"]
    same = sum(1 for a, b in zip(ours["ids"], hf_ids) if a == b)
    print(f"model: Llama {nparams / 1e6:.1f}M parameters, prompt {P}, "
          f"{D} new tokens, batch 1, {args.threads} threads, CPU, fp32")
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, "
          f"OMP_WAIT_POLICY={os.environ['OMP_WAIT_POLICY']}")
    print(f"{'':40s} {'decode tokens/s':>16s}")
    print(f"{'tacod (bench_gen, KV cache)':40s} {rate:16.1f}")
    print(f"{'transformers generate(do_sample=False)':40s} {ref:16.1f}   "
          f"ratio {rate / ref:.2f}")
    print("ratio = tacod rate / transformers rate (above 1: tacod is faster)")
    print(f"prefill of {P} tokens: tacod {ours['prefill_s'] * 1e3:.1f} ms")
    print(f"greedy continuations: {same} of {D} tokens the same")
    return 0


if __name__ == "__main__":
    sys.exit(main())
