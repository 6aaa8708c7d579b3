#!/usr/bin/env python3
"""Encode throughput of the engine's tokenizer (bench_tokenizer, a C driver,
single thread) against Hugging Face `tokenizers` (single thread:
RAYON_NUM_THREADS=1, TOKENIZERS_PARALLELISM=false; the faster of
encode_batch and encode_batch_fast over the same lines) on the same text in the same run. Prints MB/s and tokens/s of both and
the ratio, per tokenizer, and checks that both produced the same ids.

    /opt/tacofix/bin/python bench/tokenizer_bench.py [--build build]
        [--repeat 5] [--lines FILE.jsonl] [--joined N] [TOKENIZER_DIR ...]

Default tokenizers: the fixtures in tests/fixtures/tokenizers. Texts: its
corpus.jsonl (10,000 varied lines, many scripts and emoji), the same text
joined into documents of about --joined bytes (default 4096), and its
ASCII-only lines (English, code, numbers; four times over) joined likewise.
Needs the fixture environment (tests/fixtures/requirements.txt) and a build
with the bench_tokenizer target. A timing, not a test.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

os.environ["RAYON_NUM_THREADS"] = "1"
os.environ["TOKENIZERS_PARALLELISM"] = "false"

from tokenizers import Tokenizer  # noqa: E402

ROOT = os.path.normpath(os.path.join(os.path.dirname(__file__), ".."))
FIX = os.path.join(ROOT, "tests", "fixtures", "tokenizers")


def hf_time(tok, lines, repeat):
    """Best time of encode_batch and encode_batch_fast (no offsets), the
    faster of the two."""
    best, tokens = 1e30, 0
    fns = [tok.encode_batch]
    if hasattr(tok, "encode_batch_fast"):
        fns.append(tok.encode_batch_fast)
    for fn in fns:
        for _ in range(repeat):
            t0 = time.perf_counter()
            enc = fn(lines, add_special_tokens=False)
            dt = time.perf_counter() - t0
            best = min(best, dt)
            tokens = sum(len(e.ids) for e in enc)
    return best, tokens, enc


def ours(binary, tok_dir, path, repeat):
    out = subprocess.run([binary, tok_dir, path, "--repeat", str(repeat)],
                         check=True, capture_output=True, text=True)
    return json.loads(out.stdout)


def ours_ids(binary, tok_dir, path):
    out = subprocess.run([binary, tok_dir, path, "--dump"], check=True,
                         capture_output=True, text=True)
    return [[int(x) for x in l.split()] for l in out.stdout.split("\n")]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--lines", default=os.path.join(FIX, "corpus.jsonl"))
    ap.add_argument("--joined", type=int, default=4096)
    ap.add_argument("tokenizers", nargs="*")
    args = ap.parse_args()
    binary = os.path.join(args.build, "bench_tokenizer")
    if not os.path.exists(binary):
        sys.exit(f"{binary} is missing: cmake --build {args.build} "
                 "--target bench_tokenizer")
    toks = args.tokenizers or [os.path.join(FIX, n) for n in
                               ("bytelevel", "claude", "metaspace",
                                "mistral")]
    lines = [json.loads(l) for l in open(args.lines, encoding="utf-8")]
    joined, cur = [], ""
    for l in lines:
        cur += l + "\n"
        if len(cur.encode()) >= args.joined:
            joined.append(cur)
            cur = ""
    if cur:
        joined.append(cur)
    # ASCII-only lines (English, code, numbers), joined the same way
    ascii_, cur = [], ""
    for l in lines * 4:
        if l.isascii():
            cur += l + "\n"
            if len(cur) >= args.joined:
                ascii_.append(cur)
                cur = ""
    with tempfile.TemporaryDirectory() as td:
        cases = [("lines", args.lines, lines)]
        for case, text in (("joined", joined), ("ascii", ascii_)):
            path = os.path.join(td, case + ".jsonl")
            with open(path, "w", encoding="utf-8") as f:
                for l in text:
                    f.write(json.dumps(l, ensure_ascii=False) + "\n")
            cases.append((case, path, text))
        print(f"{'tokenizer':<11} {'text':<7} {'MB':>6} {'ours MB/s':>10} "
              f"{'HF MB/s':>9} {'ours tok/s':>11} {'HF tok/s':>10} "
              f"{'ratio':>6}  same ids")
        for tdir in toks:
            name = os.path.basename(os.path.normpath(tdir))
            tok = Tokenizer.from_file(os.path.join(tdir, "tokenizer.json"))
            for case, path, text in cases:
                mb = sum(len(l.encode()) for l in text) / 1e6
                hf_s, hf_tokens, enc = hf_time(tok, text, args.repeat)
                us = ours(binary, tdir, path, args.repeat)
                same = ours_ids(binary, tdir, path)[:len(text)] == \
                    [e.ids for e in enc]
                print(f"{name:<11} {case:<7} {mb:6.2f} "
                      f"{mb / us['seconds']:10.2f} {mb / hf_s:9.2f} "
                      f"{us['tokens'] / us['seconds']:11.0f} "
                      f"{hf_tokens / hf_s:10.0f} "
                      f"{hf_s / us['seconds']:6.2f}  {same}")
    print("ratio = HF time / our time (above 1: ours is faster); "
          "best of", args.repeat, "passes each, one thread")


if __name__ == "__main__":
    main()
