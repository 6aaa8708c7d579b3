#!/usr/bin/env python3
"""gen_optim_fixtures.py: writes tests/fixtures/optim/ (run by hand; the
outputs are committed and CI never runs Python).

    /opt/tacofix/bin/python tests/reference/gen_optim_fixtures.py

(the environment of tests/fixtures/requirements.txt: numpy, torch,
safetensors.)

Outputs
-------
manifest.json          the cases, their parameters and this format note
taco_expected.safetensors
adamw.safetensors

TACO cases (reference: taco_ref.py). Nothing random is stored: the initial
weights and every step's gradient come from a counter-based generator that
the C test implements too:

    h(tag, seed, t, i) = sm(sm(sm(seed ^ tag) ^ t) ^ i)     sm = splitmix64
    i = r * C + c (row-major element index), all arithmetic mod 2^64

    W0 (tag 0x5730 "W0", t = 0):
      F32:       w = float32(int(h >> 40) - 2^23) * 2^-23      in [-1, 1)
      BF16, F16: w = float32(int(h >> 56) - 128) * 2^-7        exact in both
    G of step t (tag 0x4730 "G0", t = 1, 2, ...), by the case's "grad" kind,
    with e = the case's "gexp":
      uniform:  g = (int(h >> 40) - 2^23) * 2^(e - 23)
      ties:     g = [-2, -1, -0.5, 0, 0.5, 1, 2][(h >> 32) % 7] * 2^e
      sparse:   g = 0 if h & 7 else the uniform value
      striped:  the uniform value, times 8 on rows r % 4 == 0
    (every value is exact in float32.)

The state starts empty (idx all ones, q 0, scale 0); step t = 1..steps runs
taco_step with the case's lr, beta, weight_decay, stochastic, seed,
tensor_index and step = t. Stored per case <name>:

    <name>/idx    [steps, C, k] U16 (R <= 65535) or U32: slot rows after
                  each step (column j's slots contiguous, as in the kernel)
    <name>/q      [steps, C, k] U8: FP8 E4M3 codes after each step
    <name>/scale  [steps, C] F32
    <name>/wdiff  [n, 4] U32: every weight element whose bits changed, as
                  (step, row, col, new bits), the bits being the fp32
                  pattern or the bf16 / fp16 pattern zero-extended; so the
                  weights after step t are W0 with the diffs of steps <= t.

Float parameters are also given as their float32 bit patterns (*_bits),
which the C test uses; seeds are hex strings (64-bit).

AdamW cases (torch.optim.AdamW, foreach=False, on an fp32 master; the
model copy is the master rounded to nearest even in the case's dtype):

    <name>/p0            [n] F32 initial master (representable in dtype)
    <name>/g             [steps, n] F32 gradients
    <name>/master, /m, /v  [steps, n] F32: exact emulation of PyTorch's
                  order of operations (see kernels/cpu/adamw.c) with a
                  correctly rounded sqrt: the C kernel must match bitwise
    <name>/p             [steps, n] model copy bits (F32, or U16 holding
                  bf16 / fp16 bits)
    <name>/torch_master, /torch_m, /torch_v   [steps, n] F32: what
                  torch.optim.AdamW itself produced (its CPU sqrt is not
                  always correctly rounded, so master may differ by an ulp)
"""

import json
import math
import os
import sys
from fractions import Fraction

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import taco_ref  # noqa: E402

OUT = os.path.join(HERE, '..', 'fixtures', 'optim')
F32 = np.float32
M64 = (1 << 64) - 1
WTAG, GTAG = 0x5730, 0x4730
TIES = np.array([-2.0, -1.0, -0.5, 0.0, 0.5, 1.0, 2.0])


def f32bits(x):
    return int(np.array([x], dtype=F32).view(np.uint32)[0])


# ---- the counter-based generator (vectorized, numpy uint64 wraps) -------------

def sm_vec(x):
    x = x.astype(np.uint64)
    z = x + np.uint64(0x9E3779B97F4A7C15)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def gen_h(tag, seed, t, n):
    base = taco_ref.splitmix64(taco_ref.splitmix64(seed ^ tag) ^ t)
    i = np.arange(n, dtype=np.uint64)
    with np.errstate(over='ignore'):
        return sm_vec(np.uint64(base) ^ i)


def gen_w0(case):
    R, C = case['R'], case['C']
    h = gen_h(WTAG, case['gen_seed'], 0, R * C)
    if case['dtype'] == 'F32':
        w = ((h >> np.uint64(40)).astype(np.int64) - (1 << 23)) \
            .astype(np.float64) * 2.0 ** -23
        return w.astype(F32).reshape(R, C)
    w = ((h >> np.uint64(56)).astype(np.int64) - 128).astype(np.float64) \
        * 2.0 ** -7
    w = w.astype(F32)
    if case['dtype'] == 'BF16':
        bits = (w.view(np.uint32) >> np.uint32(16)).astype(np.uint16)
        assert np.all((bits.astype(np.uint32) << np.uint32(16)) ==
                      w.view(np.uint32))
    else:
        bits = w.astype(np.float16).view(np.uint16)
        assert np.all(bits.view(np.float16).astype(F32) == w)
    return bits.reshape(R, C)


def gen_g(case, t):
    R, C = case['R'], case['C']
    h = gen_h(GTAG, case['gen_seed'], t, R * C)
    e = case['gexp']
    uni = ((h >> np.uint64(40)).astype(np.int64) - (1 << 23)) \
        .astype(np.float64) * 2.0 ** (e - 23)
    kind = case['grad']
    if kind == 'uniform':
        g = uni
    elif kind == 'ties':
        g = TIES[((h >> np.uint64(32)) % np.uint64(7)).astype(np.int64)] \
            * 2.0 ** e
    elif kind == 'sparse':
        g = np.where((h & np.uint64(7)) != 0, 0.0, uni)
    elif kind == 'striped':
        rows = np.arange(R * C) // C
        g = np.where(rows % 4 == 0, uni * 8.0, uni)
    else:
        raise ValueError(kind)
    g32 = g.astype(F32)
    assert np.all(g32.astype(np.float64) == g)
    return g32.reshape(R, C)


def check_generator():
    # The vectorized splitmix64 equals the Python-int one.
    h = gen_h(0x1234, 0xDEADBEEFCAFEF00D, 7, 5)
    base = taco_ref.splitmix64(taco_ref.splitmix64(0xDEADBEEFCAFEF00D ^
                                                   0x1234) ^ 7)
    for i in range(5):
        assert int(h[i]) == taco_ref.splitmix64(base ^ i)
    # splitmix64(0) from the published reference sequence (seed 0, first
    # output is splitmix64 of 0).
    assert taco_ref.splitmix64(0) == 0xE220A8397B1DCDAF


# ---- TACO cases -------------------------------------------------------------

def taco_cases():
    cases = []
    kinds = ['uniform', 'ties', 'sparse', 'striped']
    gexps = {'uniform': 0, 'ties': -3, 'sparse': 2, 'striped': -1}
    n = 0
    for k in (1, 4, 16):
        for beta in (0.0, 0.9):
            for dtype, stoch in (('F32', 0), ('BF16', 1), ('BF16', 0)):
                for wd in (0.0, 0.1):
                    kind = kinds[n % 4]
                    cases.append(dict(
                        name='m%02d_k%d_b%s_%s%s_wd%s_%s' % (
                            n, k, '0' if beta == 0 else '09', dtype.lower(),
                            '_sr' if stoch else '', '0' if wd == 0 else '01',
                            kind),
                        R=48, C=12, k=k, beta=beta, weight_decay=wd,
                        lr=0.01 if dtype == 'F32' else 0.001,
                        dtype=dtype, stochastic=stoch, grad=kind,
                        gexp=gexps[kind], steps=8,
                        seed=0x5EED0000 + n, tensor_index=n % 5,
                        gen_seed=0xC0FFEE00 + n))
                    n += 1
    extra = [
        # rows < k
        dict(name='x_r5_k16', R=5, C=7, k=16, beta=0.9, weight_decay=0.0,
             lr=0.01, dtype='F32', stochastic=0, grad='uniform', gexp=0),
        dict(name='x_r3_k4_bf16_sr', R=3, C=9, k=4, beta=0.9,
             weight_decay=0.1, lr=0.004, dtype='BF16', stochastic=1,
             grad='ties', gexp=0),
        dict(name='x_r1_k1', R=1, C=5, k=1, beta=0.0, weight_decay=0.0,
             lr=0.25, dtype='F32', stochastic=0, grad='ties', gexp=0),
        dict(name='x_r2_k16_ties_b0', R=2, C=6, k=16, beta=0.0,
             weight_decay=0.0, lr=0.01, dtype='BF16', stochastic=0,
             grad='ties', gexp=1),
        # fp16 weights (nearest even always)
        dict(name='x_f16_k4', R=40, C=9, k=4, beta=0.9, weight_decay=0.1,
             lr=0.002, dtype='F16', stochastic=1, grad='striped', gexp=0),
        # beta = 1: proposals are all zero, nothing is ever tracked
        dict(name='x_beta1', R=16, C=4, k=4, beta=1.0, weight_decay=0.0,
             lr=0.01, dtype='F32', stochastic=0, grad='uniform', gexp=0),
        # tiny gradients: subnormal scales
        dict(name='x_tiny_grad', R=24, C=6, k=4, beta=0.9, weight_decay=0.0,
             lr=0.01, dtype='F32', stochastic=0, grad='uniform', gexp=-120),
        # uint16 boundary and uint32 indices
        dict(name='x_r65535_u16', R=65535, C=1, k=4, beta=0.9,
             weight_decay=0.0, lr=0.01, dtype='F32', stochastic=0,
             grad='ties', gexp=0, steps=4),
        dict(name='x_r65536_u32', R=65536, C=1, k=4, beta=0.0,
             weight_decay=0.0, lr=0.01, dtype='F32', stochastic=0,
             grad='ties', gexp=0, steps=4),
        dict(name='x_r70000_u32', R=70000, C=2, k=16, beta=0.9,
             weight_decay=0.1, lr=0.001, dtype='BF16', stochastic=1,
             grad='striped', gexp=0, steps=6),
    ]
    for i, c in enumerate(extra):
        c.setdefault('steps', 8)
        c['seed'] = 0xABCDEF0123456789 ^ i
        c['tensor_index'] = 1000 + i
        c['gen_seed'] = 0xFEEDFACE00000000 + i
        cases.append(c)
    return cases


def run_taco_case(case):
    R, C, k = case['R'], case['C'], case['k']
    W = gen_w0(case)
    idx, q, scale = taco_ref.init_state(R, C, k)
    out_idx, out_q, out_scale, wdiff = [], [], [], []
    for t in range(1, case['steps'] + 1):
        G = gen_g(case, t)
        before = W.copy()
        taco_ref.taco_step(W, case['dtype'], G, idx, q, scale, k,
                           F32(case['lr']), F32(case['beta']),
                           F32(case['weight_decay']), case['stochastic'],
                           case['seed'], case['tensor_index'], t)
        out_idx.append(idx.copy())
        out_q.append(q.copy())
        out_scale.append(scale.copy())
        bw = before.view(np.uint32 if W.dtype == F32 else np.uint16)
        aw = W.view(np.uint32 if W.dtype == F32 else np.uint16)
        rr, cc = np.nonzero(bw != aw)
        # at most one entry per column changes per step
        assert len(set(cc.tolist())) == len(cc), case['name']
        for r, c in zip(rr.tolist(), cc.tolist()):
            wdiff.append((t, r, c, int(aw[r, c])))
    name = case['name']
    tensors = {
        name + '/idx': np.stack(out_idx),
        name + '/q': np.stack(out_q),
        name + '/scale': np.stack(out_scale).astype(F32),
        name + '/wdiff': np.array(wdiff, dtype=np.uint32).reshape(-1, 4),
    }
    nonempty = int(np.sum(np.stack(out_idx) != taco_ref.empty_idx(R)))
    print('  %-34s steps %d, weight changes %4d, filled slots %d'
          % (name, case['steps'], len(wdiff), nonempty))
    return tensors


# ---- AdamW --------------------------------------------------------------------

def frac_to_f32(x):
    """Correctly rounded (nearest even) float32 of a nonzero Fraction."""
    s = -1.0 if x < 0 else 1.0
    x = abs(x)
    e = x.numerator.bit_length() - x.denominator.bit_length()
    if Fraction(2) ** e > x:
        e -= 1
    while Fraction(2) ** (e + 1) <= x:
        e += 1
    e = max(e, -126)
    n = round(x / Fraction(2) ** (e - 23))  # half to even
    v = Fraction(n) * Fraction(2) ** (e - 23)
    if v >= Fraction(2) ** 128:
        return F32(s * math.inf)
    return F32(s * float(v))


def fma_f32(a, b, c):
    """float32 fma(a, b, c), exact then rounded once (arrays)."""
    out = np.empty_like(a)
    for i in range(a.size):
        x, y, z = float(a.flat[i]), float(b.flat[i]), float(c.flat[i])
        exact = Fraction(x) * Fraction(y) + Fraction(z)
        if exact == 0:
            neg = (math.copysign(1, x) * math.copysign(1, y) < 0 and
                   math.copysign(1, z) < 0)
            out.flat[i] = F32(-0.0 if neg else 0.0)
        else:
            out.flat[i] = frac_to_f32(exact)
    return out


def adamw_emulate(p0, grads, lr, b1, b2, eps, wd):
    """PyTorch's single-tensor AdamW order of operations, fp32, with
    correctly rounded sqrt and the fma its vectorized kernels use."""
    lr, b1, b2, eps, wd = (float(F32(x)) for x in (lr, b1, b2, eps, wd))
    p = p0.copy()
    m = np.zeros_like(p)
    v = np.zeros_like(p)
    out = []
    w1 = F32(1 - b1)
    w2 = F32(1 - b2)
    for t, g in enumerate(grads, start=1):
        if wd != 0:
            p = (p * F32(1 - lr * wd)).astype(F32)
        d = (g - m).astype(F32)
        if abs(w1) < 0.5:
            m = fma_f32(np.full_like(m, w1), d, m)
        else:
            m = fma_f32(np.full_like(m, F32(w1 - F32(1))), d, g)
        v = fma_f32((w2 * g).astype(F32), g, (v * F32(b2)).astype(F32))
        bc1 = 1 - b1 ** float(t)
        bc2 = 1 - b2 ** float(t)
        nstep = F32(-(lr / bc1))
        bc2s = F32(bc2 ** 0.5)
        den = ((np.sqrt(v) / bc2s).astype(F32) + F32(eps)).astype(F32)
        p = (p + ((nstep * m).astype(F32) / den).astype(F32)).astype(F32)
        out.append((p.copy(), m.copy(), v.copy()))
    return out


def adamw_torch(p0, grads, lr, b1, b2, eps, wd):
    import torch
    lr, b1, b2, eps, wd = (float(F32(x)) for x in (lr, b1, b2, eps, wd))
    P = torch.nn.Parameter(torch.tensor(p0.copy()))
    opt = torch.optim.AdamW([P], lr=lr, betas=(b1, b2), eps=eps,
                            weight_decay=wd, foreach=False, fused=False)
    out = []
    for g in grads:
        P.grad = torch.tensor(g.copy())
        opt.step()
        st = opt.state[P]
        out.append((P.detach().numpy().copy(),
                    st['exp_avg'].numpy().copy(),
                    st['exp_avg_sq'].numpy().copy()))
    return out


def adamw_cases():
    return [
        dict(name='adamw_f32', dtype='F32', n=517, steps=6, lr=1e-3,
             beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=0.01, seed=11),
        dict(name='adamw_bf16', dtype='BF16', n=517, steps=6, lr=3e-3,
             beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=0.0, seed=12),
        dict(name='adamw_f16', dtype='F16', n=300, steps=6, lr=1e-2,
             beta1=0.8, beta2=0.99, eps=1e-6, weight_decay=0.1, seed=13),
        dict(name='adamw_f32_lowbeta1', dtype='F32', n=257, steps=5, lr=2e-3,
             beta1=0.3, beta2=0.95, eps=1e-8, weight_decay=0.05, seed=14),
    ]


def to_dtype_bits(x, dtype):
    if dtype == 'F32':
        return x.astype(F32)
    if dtype == 'BF16':
        return np.array([taco_ref.f32_to_bf16_nearest(v) for v in x],
                        dtype=np.uint16)
    return x.astype(F32).astype(np.float16).view(np.uint16)


def run_adamw_case(case):
    rng = np.random.default_rng(case['seed'])
    n, steps = case['n'], case['steps']
    p0 = rng.standard_normal(n).astype(F32)
    if case['dtype'] == 'BF16':
        p0 = np.array([taco_ref.bf16_to_f32(taco_ref.f32_to_bf16_nearest(v))
                       for v in p0], dtype=F32)
    elif case['dtype'] == 'F16':
        p0 = p0.astype(np.float16).astype(F32)
    grads = []
    for _ in range(steps):
        mag = 10.0 ** rng.integers(-7, 2, n)
        g = (rng.standard_normal(n) * mag).astype(F32)
        g[rng.integers(0, n, 3)] = 0.0
        grads.append(g)
    args = (case['lr'], case['beta1'], case['beta2'], case['eps'],
            case['weight_decay'])
    emu = adamw_emulate(p0, grads, *args)
    tor = adamw_torch(p0, grads, *args)
    worst = 0
    for (ep, em, ev), (tp, tm, tv) in zip(emu, tor):
        assert np.array_equal(em.view(np.uint32), tm.view(np.uint32)), 'm'
        assert np.array_equal(ev.view(np.uint32), tv.view(np.uint32)), 'v'
        ulps = np.abs(ep.view(np.int32).astype(np.int64) -
                      tp.view(np.int32).astype(np.int64))
        worst = max(worst, int(ulps.max()))
    ndiff = sum(int(np.sum(e[0].view(np.uint32) != t[0].view(np.uint32)))
                for e, t in zip(emu, tor))
    print('  %-20s m, v equal to torch; master differs from torch in %d of '
          '%d values, at most %d ulp' % (case['name'], ndiff, n * steps,
                                          worst))
    name = case['name']
    return {
        name + '/p0': p0,
        name + '/g': np.stack(grads),
        name + '/master': np.stack([e[0] for e in emu]),
        name + '/m': np.stack([e[1] for e in emu]),
        name + '/v': np.stack([e[2] for e in emu]),
        name + '/p': np.stack([to_dtype_bits(e[0], case['dtype'])
                               for e in emu]),
        name + '/torch_master': np.stack([t[0] for t in tor]),
        name + '/torch_m': np.stack([t[1] for t in tor]),
        name + '/torch_v': np.stack([t[2] for t in tor]),
    }


def self_test():
    check_generator()
    # e4m3: the table covers 0..448, round trip, ties to even, saturation
    for c in range(256):
        x = taco_ref.e4m3_decode(c)
        if not math.isnan(x):
            assert taco_ref.e4m3_encode(F32(x)) == c, c
    assert taco_ref.e4m3_encode(F32(1.0625)) == 0x38  # tie 1 / 1.125 -> even
    assert taco_ref.e4m3_encode(F32(1.1875)) == 0x3A  # tie -> 1.25 (even)
    assert taco_ref.e4m3_encode(F32(1e30)) == 0x7E
    assert taco_ref.e4m3_encode(F32(-math.inf)) == 0xFE
    assert taco_ref.e4m3_encode(F32(2.0 ** -10)) == 0x00  # tie 0 / 2^-9
    assert taco_ref.e4m3_encode(F32(3 * 2.0 ** -10)) == 0x02
    # bf16 nearest
    assert taco_ref.f32_to_bf16_nearest(F32(1.0 + 2.0 ** -8)) == 0x3F80
    assert taco_ref.f32_to_bf16_nearest(F32(1.0 + 3 * 2.0 ** -8)) == 0x3F82
    assert taco_ref.f32_to_bf16_nearest(F32(-(1.0 + 3 * 2.0 ** -8))) \
        == 0xBF82


def main():
    self_test()
    os.makedirs(OUT, exist_ok=True)
    from safetensors.numpy import save_file

    manifest = {
        'format': __doc__,
        'generator': {'w_tag': WTAG, 'g_tag': GTAG,
                      'ties': TIES.tolist()},
        'taco': [],
        'adamw': [],
    }
    tensors = {}
    print('TACO cases')
    for case in taco_cases():
        tensors.update(run_taco_case(case))
        m = dict(case)
        for key in ('lr', 'beta', 'weight_decay'):
            m[key + '_bits'] = f32bits(F32(case[key]))
        for key in ('seed', 'tensor_index', 'gen_seed'):
            m[key] = '0x%016x' % case[key]
        manifest['taco'].append(m)
    save_file(tensors, os.path.join(OUT, 'taco_expected.safetensors'))

    tensors = {}
    print('AdamW cases')
    for case in adamw_cases():
        tensors.update(run_adamw_case(case))
        m = dict(case)
        for key in ('lr', 'beta1', 'beta2', 'eps', 'weight_decay'):
            m[key + '_bits'] = f32bits(F32(case[key]))
        manifest['adamw'].append(m)
    save_file(tensors, os.path.join(OUT, 'adamw.safetensors'))

    with open(os.path.join(OUT, 'manifest.json'), 'w') as f:
        json.dump(manifest, f, indent=1)
        f.write('\n')
    for fn in sorted(os.listdir(OUT)):
        print('  %-28s %8d bytes' % (fn, os.path.getsize(os.path.join(OUT,
                                                                      fn))))


if __name__ == '__main__':
    main()
