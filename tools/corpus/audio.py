"""WAV reading/writing (16-bit PCM through the wave module) and a windowed-sinc resampler in numpy:
deterministic, no package beyond numpy (the GPU machine has no Debian packages)."""

import wave
from fractions import Fraction

import numpy as np


def read_wav(path):
    """(float32 mono samples in [-1, 1), sample rate); stereo is averaged."""
    with wave.open(path, "rb") as w:
        rate, channels, width = w.getframerate(), w.getnchannels(), w.getsampwidth()
        raw = w.readframes(w.getnframes())
    if width != 2:
        raise ValueError(f"{path}: {8 * width}-bit samples (16-bit expected)")
    x = np.frombuffer(raw, dtype="<i2").astype(np.float32) / 32768.0
    if channels > 1:
        x = x.reshape(-1, channels).mean(axis=1)
    return x, rate


def write_wav(path, samples, rate):
    """Writes 16-bit mono PCM (clipped, rounded to nearest)."""
    pcm = np.clip(np.round(np.asarray(samples, dtype=np.float64) * 32767.0), -32768, 32767)
    with wave.open(path, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(int(rate))
        w.writeframes(pcm.astype("<i2").tobytes())


def _kernel(t, taps, cutoff):
    window = 0.42 + 0.5 * np.cos(np.pi * t / (taps + 1)) + 0.08 * np.cos(2 * np.pi * t / (taps + 1))
    return cutoff * np.sinc(cutoff * t) * window


def resample(x, rate_in, rate_out, taps=24):
    """Band-limited interpolation: out[n] = sum_k x[k] h(n * rate_in / rate_out - k), h a sinc at
    the lower of the two Nyquist frequencies under a Blackman window of +-taps input samples.
    Where rate_in / rate_out = a / b with b <= 4096 (every rate the corpus uses), output n = q b + r
    has phase r: each of the b phases is one strided dot product with its own taps (the same
    kernel values as the direct form, a few times faster)."""
    x = np.asarray(x, dtype=np.float64)
    if rate_in == rate_out:
        return x.astype(np.float32)
    step = rate_in / rate_out
    cutoff = min(1.0, 1.0 / step)  # relative to the input's Nyquist
    n_out = int(np.floor(len(x) / step))
    out = np.empty(n_out)
    padded = np.concatenate([np.zeros(taps + 1), x, np.zeros(taps + 1)])
    offsets = np.arange(-taps, taps + 1)
    ratio = Fraction(rate_in).limit_denominator(1 << 20) / Fraction(rate_out).limit_denominator(1 << 20)
    if ratio.denominator <= 4096 and abs(float(ratio) - step) < 1e-12 * step:
        a, b = ratio.numerator, ratio.denominator
        windows = np.lib.stride_tricks.sliding_window_view(padded, len(offsets))
        for r in range(min(b, n_out)):
            count = (n_out - 1 - r) // b + 1
            base, frac = divmod(r * a, b)
            h = _kernel(frac / b - offsets, taps, cutoff)
            # window j starts at padded[j] = x[j - taps - 1]; output r + q b needs x[base + q a - taps]
            out[r::b] = windows[base + 1: base + 1 + (count - 1) * a + 1: a] @ h
        return out.astype(np.float32)
    for start in range(0, n_out, 8192):
        pos = np.arange(start, min(n_out, start + 8192)) * step
        base = np.floor(pos).astype(np.int64)
        frac = pos - base
        idx = base[:, None] + offsets[None, :]
        h = _kernel(frac[:, None] - offsets[None, :], taps, cutoff)
        out[start:start + len(pos)] = (padded[idx + taps + 1] * h).sum(axis=1)
    return out.astype(np.float32)
