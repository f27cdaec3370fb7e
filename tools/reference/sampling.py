"""Deterministic sampling (spec section 6), step for step the same as src/util/sampling.h/.cpp:
same order of steps, same tie rules, same float32/float64 choices. Keep the two in step."""

import math

import numpy as np

MASK64 = (1 << 64) - 1


def mix64(z):
    """SplitMix64 finaliser on a 64-bit unsigned integer."""
    z &= MASK64
    z ^= z >> 30
    z = (z * 0xBF58476D1CE4E5B9) & MASK64
    z ^= z >> 27
    z = (z * 0x94D049BB133111EB) & MASK64
    z ^= z >> 31
    return z


def counter_uniform(seed, frame, codebook):
    """u in [0, 1) with 53 random bits, keyed only by (seed, frame index, codebook index)."""
    z = mix64((seed + 0x9E3779B97F4A7C15 * (frame + 1)) & MASK64)
    z = mix64((z + 0xBF58476D1CE4E5B9 * (codebook + 1)) & MASK64)
    return float(z >> 11) * 2.0**-53


def sample_logits(logits, temperature, top_k, top_p, u):
    """One code from float32 logits (a 1-D array-like).

    temperature and top_p are float parameters in C++ (rounded to float32 here too); u is double."""
    logits = np.asarray(logits, dtype=np.float32)
    n = logits.shape[0]
    temperature = np.float32(temperature)
    # 1. temperature <= 0: argmax, lowest id on ties (np.argmax returns the first maximum).
    if temperature <= 0:
        return _argmax_first(logits)
    # 2. s_i = logits_i / temperature, in float32.
    s = logits / temperature
    # 3. sort by s descending, ties lower id first; top_k > 0 keeps the first top_k.
    keep = top_k if 0 < top_k < n else n
    order = sorted(range(n), key=lambda i: (-float(s[i]), i))[:keep]
    # 4. p_i = exp(double(s_i) - double(s_max)); top_p < 1 keeps the shortest prefix reaching
    #    top_p * (sum over candidates), at least one.
    s_max = float(s[order[0]])
    p = [math.exp(float(s[i]) - s_max) for i in order]
    total = 0.0
    for value in p:
        total += value
    if np.float32(top_p) < 1:
        want = float(np.float32(top_p)) * total
        run, m = 0.0, 0
        while m < keep:
            run += p[m]
            m += 1
            if run >= want:
                break
        keep = max(m, 1)
        total = run
    # 5. target = u * total; the first kept candidate whose running sum exceeds it.
    target = u * total
    run = 0.0
    for i in range(keep):
        run += p[i]
        if run > target:
            return order[i]
    return order[keep - 1]


def _argmax_first(values):
    """Index of the maximum, the lowest on ties, comparing with `>` as the C++ loop does."""
    best = 0
    for i in range(1, values.shape[0]):
        if values[i] > values[best]:
            best = i
    return best
