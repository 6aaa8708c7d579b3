#!/usr/bin/env python3
"""tacod's GGUF export, checked by llama.cpp's own code (CTest gguf_export).

  check.py BUILD_DIR [--quick]

1. The converter's file. For each fixture of tests/fixtures/gguf/ (one per
   family, tests/fixtures/gen_gguf.py), `taco-train --export-gguf TYPE
   --checkpoint` writes bf16, f16 and q8_0; gguf's GGUFReader (llama.cpp's
   reader, gguf 0.19) reads it, and every tensor (name, shape, type, the
   sha256 of its bytes) and every key-value must be what llama.cpp's
   convert_hf_to_gguf.py wrote for the same model, but for the naming keys
   it derives from the directory (general.name, general.size_label).
2. The tokenizer: llama.cpp tokenizes the fixture's prompts into the ids
   transformers gave.
3. After training. A job fine-tunes each fixture for a few steps with
   "export_gguf": ["bf16", "f16", "q8_0"]; llama.cpp (llama-cpp-python
   0.3.36) loads each file, and its next-token log-probabilities on the
   prompts must agree with the engine's on the safetensors export
   (tests/gguf/engine_logprobs; test_golden holds the engine to
   transformers, and so does this script, on the untrained fixture).
4. The demo: the tour's job (500 steps) exports GGUF; llama.cpp answers the
   48 held-out prompts greedily, and every answer must be the engine's.
"""
import argparse
import json
import math
import os
import subprocess
import sys
import tempfile

import numpy as np
from gguf import GGUFReader
from gguf_describe import describe as describe_with
import llama_cpp.llama as ll

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIXTURES = os.path.join(ROOT, "tests", "fixtures", "gguf")
DEMO = os.path.join(ROOT, "examples", "demo")
TYPES = ["bf16", "f16", "q8_0"]
# Keys the converter derives from the model's name and size, not from what
# it converts.
NAMING = {"general.name", "general.size_label"}
# The largest |log p| difference, over every position and token of the
# prompts, between llama.cpp and the engine (fp32 from the same weights).
# llama.cpp's CPU matmul rounds the activations to the weights' type (bf16:
# 8 bits, f16: 11) or quantizes them to q8_0 blocks; measured on these
# fixtures: see docs/gguf.md.
BOUND = {"bf16": 0.1, "f16": 0.02, "q8_0": 0.4}
# A mixture of experts in q8_0: the 8-bit experts move a layer's output
# enough that a later router sends a token to another expert than the
# engine's fp32 run, and that token's log-probabilities move whole
# (measured on qwen3moe, whose tensors are byte for byte the converter's:
# 1.62, KL 0.16; bf16 and f16 stay within the bounds above, 0.042 and
# 0.0069).
MOE_BOUND = {"bf16": 0.1, "f16": 0.02, "q8_0": 2.0}
# gpt-oss: llama.cpp's YaRN rounds the correction range to whole dims
# (ggml_rope_yarn_corr_dims: floor, ceil), which is transformers' truncate
# true; gpt-oss's configs say truncate false, so llama.cpp's rotary
# frequencies differ from transformers' (and the engine's) in the ramp,
# for the released models too. Measured on the fixture: f16 0.0446 (0.0110
# with truncate true on both sides), bf16 0.0666, q8_0 0.439.
GPT_OSS_BOUND = {"bf16": 0.1, "f16": 0.06, "q8_0": 2.0}
EOS = 2
# Demo answers (of 48) that may differ from the engine's: none in bf16 and
# f16; q8_0 rounds every weight to 8 bits, and 1 of 48 flipped when
# measured (docs/gguf.md).
DEMO_MISSES = {"bf16": 0, "f16": 0, "q8_0": 3}

# llama.cpp 0c1e570's AMX kernel for q8_0 (x86 CPUs with AMX, where the
# build is -march=native) crashes on tensors this small, the converter's
# own files as ours: load without the repacking "extra" buffer types.
_default_params = ll.llama_cpp.llama_model_default_params


def _params():
    p = _default_params()
    p.use_extra_bufts = False
    return p


ll.llama_cpp.llama_model_default_params = _params

failures = []


def fail(msg):
    failures.append(msg)
    print("FAIL", msg, flush=True)


def run(cmd, **kw):
    r = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if r.returncode:
        sys.exit(f"{' '.join(cmd)}: exit {r.returncode}\n{r.stdout}{r.stderr}")
    return r.stdout


def describe(path):
    d = describe_with(path, GGUFReader)
    return d["kv"], {n: rest for n, *rest in d["tensors"]}


def same_value(a, b):
    if isinstance(a, float) or isinstance(b, float):
        return math.isclose(a, b, rel_tol=1e-7)
    return a == b


def compare_converter(name, t, path, want):
    kv, tensors = describe(path)
    wt = {n: rest for n, *rest in want["tensors"]}
    for n in sorted(set(wt) | set(tensors)):
        if n not in tensors:
            fail(f"{name} {t}: no tensor {n}")
        elif n not in wt:
            fail(f"{name} {t}: tensor {n} the converter does not write")
        elif tensors[n] != wt[n]:
            fail(f"{name} {t}: {n}: {tensors[n]} != converter's {wt[n]}")
    for k, v in want["kv"].items():
        if k in NAMING:
            continue
        if k not in kv:
            fail(f"{name} {t}: no key {k}")
        elif not same_value(kv[k], v):
            fail(f"{name} {t}: {k} = {kv[k]!r}, converter {v!r}")
    extra = sorted(set(kv) - set(want["kv"]))
    return len(tensors), extra


def llama(path):
    return ll.Llama(model_path=path, logits_all=True, verbose=False,
                    n_ctx=256, n_threads=2, n_batch=256)


def log_softmax(x):
    x = np.asarray(x, dtype=np.float64)
    m = x.max(axis=-1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis=-1, keepdims=True))


def llama_logprobs(m, ids):
    m.reset()
    m.eval(ids)
    return log_softmax(m.scores[:len(ids)])


def diff(got, want):
    """The largest |log p| difference over the tokens the engine gives a
    probability of 1e-3 or more (a rare token's log-probability, -10 and
    below, moves most with rounding and matters least), and the KL
    divergence of the two distributions, the largest over positions."""
    keep = want >= math.log(1e-3)
    kl = (np.exp(want) * (want - got)).sum(axis=-1).max()
    return float(np.abs(got - want)[keep].max()), float(kl)


def llama_greedy(m, ids, n):
    m.reset()
    m.eval(ids)
    out = []
    for _ in range(n):
        tok = int(np.argmax(m.scores[m.n_tokens - 1]))
        out.append(tok)
        if tok == EOS or m.n_tokens >= m.n_ctx():
            break
        m.eval([tok])
    return out


def engine(build, model_dir, prompts, generate=0):
    out = run([os.path.join(build, "engine_logprobs"), model_dir],
              input=json.dumps({"prompts": prompts, "generate": generate,
                                "eos": EOS}))
    return json.loads(out)


def job_file(tmp, model, steps, extra):
    job = {"model": model, "train": os.path.join(DEMO, "train.jsonl"),
           "output_dir": os.path.join(tmp, "out"), "steps": steps,
           "batch_size": 16, "seq_len": 32, "log_every": steps,
           "export_gguf": TYPES}
    job.update(extra)
    path = os.path.join(tmp, "job.json")
    with open(path, "w") as f:
        json.dump(job, f)
    return path


def check_family(build, name, worst, worst_kl):
    fix = os.path.join(FIXTURES, name)
    exp = json.load(open(os.path.join(fix, "expected.json")))
    ref = exp["reference"]
    taco_train = os.path.join(build, "taco-train")
    with tempfile.TemporaryDirectory() as tmp:
        job = job_file(tmp, fix, 20, {"lr": 0.003})
        for t in TYPES:
            path = os.path.join(tmp, f"{t}.gguf")
            run([taco_train, "--export-gguf", t, "--checkpoint", fix,
                 "--output", path, job])
            n, extra = compare_converter(name, t, path, exp["converter"][t])
            m = llama(path)
            for i, ids in enumerate(ref["prompts"]):
                text = m.detokenize(ids, special=True)
                got = m.tokenize(text, add_bos=False, special=True)
                if got != ids:
                    fail(f"{name} {t}: llama.cpp tokenizes prompt {i} as "
                         f"{got}, transformers {ids}")
            del m
        print(f"{name}: {n} tensors and every key as the converter's "
              f"(also: {', '.join(extra) or 'nothing'})", flush=True)
        # the engine against transformers on the fixture itself
        e = engine(build, fix, ref["prompts"])
        d = max(abs(e["logprobs"][i][p][ids[p + 1]] - ref["target_logprobs"][i][p])
                for i, ids in enumerate(ref["prompts"])
                for p in range(len(ids) - 1))
        if d > 1e-4:
            fail(f"{name}: engine against transformers: {d:.3g}")
        # trained, then each export in llama.cpp against the engine
        run([taco_train, "--no-progress", job])
        out = os.path.join(tmp, "out")
        e = engine(build, os.path.join(out, "model"), ref["prompts"])
        line = []
        for t in TYPES:
            m = llama(os.path.join(out, "gguf", f"model-{t}.gguf"))
            ds = [diff(llama_logprobs(m, ids), np.array(e["logprobs"][i]))
                  for i, ids in enumerate(ref["prompts"])]
            del m
            d, kl = max(x[0] for x in ds), max(x[1] for x in ds)
            worst[t] = max(worst[t], d)
            worst_kl[t] = max(worst_kl[t], kl)
            line.append(f"{t} {d:.4f} (KL {kl:.2g})")
            arch = exp["converter"][t]["kv"]["general.architecture"]
            bound = (GPT_OSS_BOUND if arch == "gpt-oss" else
                     MOE_BOUND if "expert_count" in json.dumps(
                         exp["converter"][t]["kv"]) else BOUND)[t]
            if d > bound:
                fail(f"{name} {t}: log-probabilities {d:.4f} from the "
                     f"engine's, bound {bound}")
        print(f"{name} trained: llama.cpp against the engine, largest "
              f"|log p| difference: {', '.join(line)}", flush=True)


def check_demo(build):
    val = [json.loads(l) for l in open(os.path.join(DEMO, "val.jsonl"))]
    taco_train = os.path.join(build, "taco-train")
    with tempfile.TemporaryDirectory() as tmp:
        job = job_file(tmp, os.path.join(DEMO, "model"), 500,
                       {"lr": 0.008, "schedule": "linear"})
        run([taco_train, "--no-progress", job])
        out = os.path.join(tmp, "out")
        # docs/gguf.md's on-demand command, as written: the same file again
        q8 = os.path.join(out, "gguf", "model-q8_0.gguf")
        first = open(q8, "rb").read()
        printed = run([taco_train, "--export-gguf", "q8_0", job]).strip()
        if printed != q8 or open(q8, "rb").read() != first:
            fail(f"demo: taco-train --export-gguf q8_0 JOB.json wrote "
                 f"{printed}, not the job's own {q8} again")
        answers = {}
        for t in TYPES:
            m = llama(os.path.join(out, "gguf", f"model-{t}.gguf"))
            prompts, got = [], []
            for v in val:
                # the prompt as the chat template renders it (ChatML)
                text = "".join(f"<|im_start|>{x['role']}\n{x['content']}<|im_end|>\n"
                               for x in v["messages"] if x["role"] != "assistant")
                text += "<|im_start|>assistant\n"
                ids = m.tokenize(text.encode(), add_bos=False, special=True)
                prompts.append(ids)
                got.append(llama_greedy(m, ids, 24))
            answers[t] = got
            del m
        e = engine(build, os.path.join(out, "model"), prompts, generate=24)
        truth = [next(x["content"] for x in v["messages"]
                      if x["role"] == "assistant") for v in val]
        m = llama(os.path.join(out, "gguf", "model-bf16.gguf"))
        text = lambda ids: m.detokenize([i for i in ids if i != EOS]).decode()
        right = sum(text(g) == w for g, w in zip(e["greedy"], truth))
        print(f"demo: the engine answers {right} of {len(val)} held-out "
              f"prompts right", flush=True)
        for t in TYPES:
            same = sum(a == b for a, b in zip(answers[t], e["greedy"]))
            ok = sum(text(g) == w for g, w in zip(answers[t], truth))
            print(f"demo {t}: llama.cpp gives the engine's answer to {same} "
                  f"of {len(val)} ({ok} right)", flush=True)
            for i, (a, b) in enumerate(zip(answers[t], e["greedy"])):
                if a != b:
                    print(f"  prompt {i}: llama.cpp {text(a)!r}, engine "
                          f"{text(b)!r}", flush=True)
            if len(val) - same > DEMO_MISSES[t]:
                fail(f"demo {t}: {len(val) - same} answers differ from the "
                     f"engine's, at most {DEMO_MISSES[t]} may")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    ap.add_argument("--families", default=None,
                    help="comma-separated fixtures (default: all)")
    ap.add_argument("--no-demo", action="store_true")
    a = ap.parse_args()
    names = a.families.split(",") if a.families else sorted(os.listdir(FIXTURES))
    worst = dict.fromkeys(TYPES, 0.0)
    worst_kl = dict.fromkeys(TYPES, 0.0)
    for name in names:
        check_family(a.build, name, worst, worst_kl)
    print("largest difference over the families: " +
          ", ".join(f"{t} {worst[t]:.4f} (bound {BOUND[t]}, KL "
                    f"{worst_kl[t]:.2g})" for t in TYPES))
    if not a.no_demo:
        check_demo(a.build)
    if failures:
        sys.exit(f"{len(failures)} failures")
    print("gguf: all checks passed")


if __name__ == "__main__":
    main()
