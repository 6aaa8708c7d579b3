"""taco_ref.py: an independent reference of the TACO specification in
Python (docs/taco.md describes the engine's implementation of it).

Written from the spec, not from the C code: FP8 E4M3 encoding searches the
table of representable values for the nearest one instead of manipulating
bits, the proposals come from a full sort instead of a streaming top-k, and
bf16 rounding compares exact distances. Every fp32 operation is one numpy
float32 operation (np.float32 scalars), so each is rounded on its own as the
spec requires (no fused multiply-add exists in this code).

Choices where the spec is silent (the C kernel kernels/cpu/taco.c documents
the same ones; CUDA must match them):

- slot order after the merge: kept slots first, by |value| (fp32, before
  requantization) descending, equal |value| by smaller row; then the empty
  slots. Slot 0 is therefore s*.
- an empty slot has idx all ones and q = 0; a column whose slots are all
  empty has scale 0.
- a kept slot whose value requantizes to (signed) zero keeps its row.
- a slot whose idx is not all ones but >= R counts as empty.
- a column whose gradient holds a NaN or an infinity, or in which a tracked
  or proposed value is not finite, is skipped: state and weights unchanged.
- fp16 weights round to nearest even (no stochastic rounding for fp16).
"""

import math
from bisect import bisect_left

import numpy as np

F32 = np.float32
MASK64 = (1 << 64) - 1


# ---- splitmix64 (Python ints) ---------------------------------------------

def splitmix64(x):
    z = (x + 0x9E3779B97F4A7C15) & MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return z ^ (z >> 31)


# ---- FP8 E4M3 (e4m3fn) from the format definition --------------------------

def e4m3_decode(code):
    """Exact value of a code as a Python float (NaN for 0x7F / 0xFF)."""
    sign = -1.0 if code & 0x80 else 1.0
    e = (code >> 3) & 0xF
    m = code & 0x7
    if e == 0xF and m == 0x7:
        return math.nan
    if e == 0:
        return sign * (m / 8.0) * 2.0 ** -6
    return sign * (1.0 + m / 8.0) * 2.0 ** (e - 7)


# Non-negative finite codes 0x00..0x7E in increasing value order.
_POS_CODES = list(range(0x7F))
_POS_VALUES = [e4m3_decode(c) for c in _POS_CODES]
assert all(a < b for a, b in zip(_POS_VALUES, _POS_VALUES[1:]))
assert _POS_VALUES[-1] == 448.0


def e4m3_encode(x):
    """Nearest code to float32 x, ties to the even code, saturating at 448;
    NaN -> 0x7F. Sign kept (so -0 and small negatives give 0x80)."""
    x = float(x)
    if math.isnan(x):
        return 0x7F
    sign = 0x80 if math.copysign(1.0, x) < 0 else 0
    a = abs(x)
    if a >= 448.0:
        return sign | 0x7E
    i = bisect_left(_POS_VALUES, a)  # _POS_VALUES[i-1] < a <= _POS_VALUES[i]
    if _POS_VALUES[i] == a:
        return sign | _POS_CODES[i]
    lo, hi = i - 1, i
    dlo = a - _POS_VALUES[lo]  # exact: both are short binary fractions
    dhi = _POS_VALUES[hi] - a
    if dlo < dhi:
        c = _POS_CODES[lo]
    elif dhi < dlo:
        c = _POS_CODES[hi]
    else:
        c = _POS_CODES[lo] if _POS_CODES[lo] % 2 == 0 else _POS_CODES[hi]
    return sign | c


# ---- bf16 / fp16 -------------------------------------------------------------

def f32_bits(x):
    return int(np.array([x], dtype=F32).view(np.uint32)[0])


def bits_f32(b):
    return np.array([b & 0xFFFFFFFF], dtype=np.uint32).view(F32)[0]


def bf16_to_f32(h):
    return bits_f32(h << 16)


def f32_to_bf16_nearest(x):
    """Round float32 x to bf16 bits, nearest, ties to even (by distance)."""
    b = f32_bits(x)
    if math.isnan(float(x)):
        return ((b >> 16) | 0x40) & 0xFFFF
    lo = b & 0xFFFF0000  # truncation toward zero (same sign)
    if lo == b:
        return lo >> 16
    hi = lo + 0x10000  # next bf16 away from zero (may be infinity)
    xv = float(x)
    dlo = abs(xv - float(bits_f32(lo)))
    dhi = abs(float(bits_f32(hi)) - xv) if (hi & 0x7F800000) != 0x7F800000 \
        else abs(2.0 ** 128 - abs(xv))  # the overflow threshold
    if dlo < dhi:
        return lo >> 16
    if dhi < dlo:
        return (hi >> 16) & 0xFFFF
    return (lo >> 16) if ((lo >> 16) & 1) == 0 else ((hi >> 16) & 0xFFFF)


def f32_to_bf16_stochastic(x, h):
    b = f32_bits(x)
    if math.isnan(float(x)):
        return ((b >> 16) | 0x40) & 0xFFFF
    b = (b + (h & 0xFFFF)) & 0xFFFF0000
    return b >> 16


def f16_to_f32(h):
    return F32(np.array([h], dtype=np.uint16).view(np.float16)[0])


def f32_to_f16_nearest(x):
    return int(np.array([F32(x)], dtype=F32).astype(np.float16)
               .view(np.uint16)[0])


# ---- one TACO step -------------------------------------------------------------

def empty_idx(R):
    return 0xFFFF if R <= 65535 else 0xFFFFFFFF


def init_state(R, C, k):
    idx_dtype = np.uint16 if R <= 65535 else np.uint32
    idx = np.full((C, k), empty_idx(R), dtype=idx_dtype)
    q = np.zeros((C, k), dtype=np.uint8)
    scale = np.zeros(C, dtype=F32)
    return idx, q, scale


def _finite(x):
    return math.isfinite(float(x))


def taco_step(W, dtype, G, idx, q, scale, k, lr, beta, weight_decay,
              stochastic, seed, tensor_index, step):
    """One TACO step, in place. W: float32 [R, C] for 'F32', uint16 bit
    patterns [R, C] for 'BF16' / 'F16'. G: float32 [R, C]. idx [C, k],
    q [C, k] uint8, scale [C] float32."""
    R, C = G.shape
    EMPTY = empty_idx(R)
    lr = F32(lr)
    beta = F32(beta)
    wd = F32(weight_decay)
    omb = F32(F32(1.0) - beta)
    decay = F32(F32(1.0) - F32(lr * wd))
    hbase = splitmix64(splitmix64(seed ^ tensor_index) ^ step)
    rows = np.arange(R)

    for j in range(C):
        col = G[:, j]
        if not np.all(np.isfinite(col)):
            continue
        # 1. decode, 2. track
        tracked = []  # (row, value)
        for s in range(k):
            r = int(idx[j, s])
            if r == EMPTY or r >= R:
                continue
            v = F32(F32(e4m3_decode(int(q[j, s]))) * scale[j])
            v = F32(F32(beta * v) + F32(omb * col[r]))
            tracked.append((r, v))
        tracked_rows = {r for r, _ in tracked}
        # 3. propose: full sort of the column by (|G| desc, row asc)
        order = np.lexsort((rows, -np.abs(col.astype(np.float64))))
        proposals = []
        for r in order:
            if len(proposals) == k:
                break
            r = int(r)
            if r in tracked_rows:
                continue
            proposals.append((r, F32(omb * col[r])))
        if not all(_finite(v) for _, v in tracked + proposals):
            continue
        # 4. merge
        ents = [(abs(float(v)), 0, r, v) for r, v in tracked if v != 0] + \
               [(abs(float(u)), 1, r, u) for r, u in proposals if u != 0]
        ents.sort(key=lambda e: (-e[0], e[1], e[2]))
        kept = ents[:k]
        kept.sort(key=lambda e: (-e[0], e[2]))
        # 5. select: argmax |v|, ties smaller row
        if kept:
            best = min(kept, key=lambda e: (-e[0], e[2]))
            r_star, v_star = best[2], best[3]
            if dtype == 'F32':
                w = F32(W[r_star, j])
            elif dtype == 'BF16':
                w = bf16_to_f32(int(W[r_star, j]))
            else:
                w = f16_to_f32(int(W[r_star, j]))
            a = F32(w * decay)
            new = F32(a - lr) if v_star > 0 else F32(a + lr)
            if dtype == 'F32':
                W[r_star, j] = new
            elif dtype == 'BF16':
                if stochastic:
                    h = splitmix64(hbase ^ j) & 0xFFFFFFFF
                    W[r_star, j] = f32_to_bf16_stochastic(new, h)
                else:
                    W[r_star, j] = f32_to_bf16_nearest(new)
            else:
                W[r_star, j] = f32_to_f16_nearest(new)
        # 6. requantize
        if kept:
            amax = F32(max(e[0] for e in kept))
            sc = F32(amax / F32(448.0))
        else:
            sc = F32(0.0)
        for s in range(k):
            if s < len(kept):
                _, _, r, v = kept[s]
                idx[j, s] = r
                with np.errstate(divide='ignore', over='ignore',
                                 invalid='ignore'):
                    q[j, s] = e4m3_encode(F32(v / sc))
            else:
                idx[j, s] = EMPTY
                q[j, s] = 0
        scale[j] = sc
