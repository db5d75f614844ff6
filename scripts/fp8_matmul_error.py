#!/usr/bin/env python3
"""Output error of MLA decode if its matrix steps ran in fp8 e4m3.

The 0.6x bar for fp8 KV (issue 4) would need fp8 matrix steps: Q and P
rounded to e4m3 as well as KV. This measures, on the test suite's data
(SyntheticBatch: Q uniform in [-1, 1], KV uniform in [-16, 16] stored as
e4m3 with scale 1/16, softmax scale 1/sqrt(192)), the relative L2 error
that rounding alone adds against float64 attention over the same fp8 KV,
for comparison with the fp8 tolerance of 3e-2. float64 throughout; the
e4m3 rounding is written out (round half to even, saturating at 448).

The last two columns split Q and P into e4m3 high and low parts (x = hi +
lo, lo = e4m3(x - hi)), as session 16's swapped fp8 prototype did (branch
swapped-fp8; bench/RESULTS.md, sessions 16-17), with l summed from the
rounded parts. P's scale: the prototype's lazy rescaling
keeps P = 2^(x - m_ref) in (0, 2^8], so a tile's P is scaled by 2^0 (the
reference maximum just moved to the tile's maximum) up to 2^8; both ends.
"""
import numpy as np


def e4m3(x):
    a = np.abs(x)
    exponent = np.maximum(np.floor(np.log2(np.maximum(a, 1e-30))), -6)  # subnormals below 2^-6
    quantum = 2.0 ** (exponent - 3)
    return np.sign(x) * np.minimum(np.round(a / quantum) * quantum, 448.0)


def attention(q, k, v, scale, round_p=None, l_from_rounded=False):
    s = (q @ k.T) * scale
    p = np.exp(s - s.max(axis=1, keepdims=True))
    l = p.sum(axis=1, keepdims=True)
    if round_p:
        p = round_p(p)
    if l_from_rounded:
        l = p.sum(axis=1, keepdims=True)
    return (p @ v) / l


def split(x):
    """x as the sum of two e4m3 values, high part first."""
    hi = e4m3(x)
    return hi, e4m3(x - hi)


def main():
    rng = np.random.default_rng(1)
    scale = 1 / np.sqrt(192)
    p_in_e4m3 = lambda p: e4m3(p * 256) / 256  # P in [0, 1] scaled into e4m3's range
    print("heads tokens  Q e4m3    P e4m3    Q and P   split, P x1  split, P x256"
          "  (relative L2 against float64; tolerance 3e-2)")
    for heads, tokens in ((48, 1024), (48, 16384), (16, 64), (16, 8192), (1, 300)):
        errors = []
        for _ in range(3):
            q = rng.uniform(-1, 1, (heads, 576))
            k = e4m3(rng.uniform(-1, 1, (tokens, 576)) * 16) / 16
            v = k[:, :512]
            reference = attention(q, k, v, scale)
            q_scale = 2.0 ** np.floor(np.log2(224 / np.abs(q).max()))  # per block, a power of two
            q8 = e4m3(q * q_scale) / q_scale
            rel = lambda o: np.linalg.norm(o - reference) / np.linalg.norm(reference)
            # Split Q: a power of two per head puts its largest value in [224, 448).
            q_head_scale = 2.0 ** np.floor(np.log2(448 / np.abs(q).max(axis=1, keepdims=True)))
            q_split = sum(split(q * q_head_scale)) / q_head_scale
            p_split = lambda p_scale: (lambda p: sum(split(p * p_scale)) / p_scale)
            errors.append((rel(attention(q8, k, v, scale)), rel(attention(q, k, v, scale, p_in_e4m3)),
                           rel(attention(q8, k, v, scale, p_in_e4m3)),
                           rel(attention(q_split, k, v, scale, p_split(1.0), True)),
                           rel(attention(q_split, k, v, scale, p_split(256.0), True))))
        print("%5d %6d  %.2e  %.2e  %.2e  %.2e     %.2e" % (heads, tokens, *np.mean(errors, axis=0)))


if __name__ == "__main__":
    main()
