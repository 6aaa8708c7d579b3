#!/usr/bin/env python3
"""dist_check.py: what data parallel guarantees, checked between a job of
one rank and the same job on N ranks (tests/dist_mpi.sh, docs/multi-gpu.md,
"What N ranks guarantee"). Standard library only: CI has no numpy.

  dist_check.py grads ONE.safetensors N.safetensors TOKENS
      The first step's summed gradient, read from the AdamW state of the
      step-1 checkpoints (m = (1 - beta1) g after one step). For every
      tensor t: max |m_N - m_1| <= 2 K u max |m_1|, K = TOKENS (the global
      batch's tokens: the length of each gradient's sum), u = 2^-24 (fp32's
      unit roundoff). Each of the two runs sums the same K products in its
      own order, within K u of the exact sum (the classic bound, taking the
      sum of the products' magnitudes at the tensor's largest entry).
  dist_check.py curves ONE.events N.events BOUND
      The loss of every logged step and every validation loss within BOUND
      (relative) of the one-rank run's, the first step's (the same weights
      on both) within 1e-6.

Exit 1 with the first tensor, step or value out of bounds; 0 prints the
largest ratio to the bound."""
import array
import json
import struct
import sys

U = 2.0**-24


def adamw_m(path):
    """{tensor: array of m} of an optimizer.safetensors."""
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8 : 8 + n])
    out = {}
    for name, v in header.items():
        if not name.startswith("adamw.m.") or v["dtype"] != "F32":
            continue
        a, b = v["data_offsets"]
        values = array.array("f")
        values.frombytes(blob[8 + n + a : 8 + n + b])
        out[name[len("adamw.m.") :]] = values
    if not out:
        sys.exit(f"dist_check: {path}: no adamw.m tensors")
    return out


def grads(one_path, n_path, tokens):
    one, other = adamw_m(one_path), adamw_m(n_path)
    if sorted(one) != sorted(other):
        sys.exit(f"dist_check: {n_path}: other tensors than {one_path}")
    tau = 2 * tokens * U
    worst = (0.0, "")
    for name in sorted(one):
        a, b = one[name], other[name]
        top = max(abs(x) for x in a)
        diff = max(abs(x - y) for x, y in zip(a, b))
        if diff > tau * top:
            sys.exit(
                f"dist_check: gradient of {name}: differs by {diff:.3e}, "
                f"{diff / top:.2e} of its largest entry {top:.3e}; "
                f"the bound is 2 K u = {tau:.2e} (K = {tokens})"
            )
        if top and diff / (tau * top) >= worst[0]:
            worst = (diff / (tau * top), name)
    print(
        f"gradients within 2 K u = {tau:.2e} of the largest entry "
        f"({len(one)} tensors; the closest, {worst[1]}, at "
        f"{worst[0]:.3f} of the bound)"
    )


def series(path, kind, key):
    with open(path) as f:
        events = [json.loads(line) for line in f]
    return [(e["step"], e[key]) for e in events if e["event"] == kind and key in e]


def curves(one_path, n_path, bound):
    worst = 0.0
    for kind, key in (("progress", "loss"), ("eval", "val_loss")):
        a, b = series(one_path, kind, key), series(n_path, kind, key)
        if not a or [s for s, _ in a] != [s for s, _ in b]:
            sys.exit(f"dist_check: {n_path}: {kind} steps differ from {one_path}")
        for (step, x), (_, y) in zip(a, b):
            rel = abs(x - y) / abs(x)
            lim = 1e-6 if kind == "progress" and step == a[0][0] else bound
            if rel > lim:
                sys.exit(
                    f"dist_check: {key} at step {step}: {y!r} against one "
                    f"rank's {x!r}, {rel:.2e} apart (bound {lim:.0e})"
                )
            worst = max(worst, rel / bound)
    print(f"losses within {bound:.0e} of one rank's (the largest at {worst:.3f} of it)")


def main():
    if len(sys.argv) != 5 or sys.argv[1] not in ("grads", "curves"):
        sys.exit(__doc__)
    if sys.argv[1] == "grads":
        grads(sys.argv[2], sys.argv[3], int(sys.argv[4]))
    else:
        curves(sys.argv[2], sys.argv[3], float(sys.argv[4]))


if __name__ == "__main__":
    main()
