"""Speaker classifier for the voice-cloning check: MFCC statistics + multinomial logistic
regression, numpy only (no sklearn: not needed for 20-odd classes).

Features of an utterance: mean and standard deviation over frames of 13 MFCCs and their deltas
(25 ms frames, 10 ms hop, 16 kHz, 26 mel bands): 52 numbers, standardised with the training
set's mean and deviation. The regression is trained by full-batch gradient descent with L2, from
zeros: deterministic."""

import numpy as np


def _mel_filters(rate, n_fft, n_mels):
    mel = lambda f: 2595.0 * np.log10(1.0 + f / 700.0)  # noqa: E731
    hz = 700.0 * (10 ** (np.linspace(mel(0), mel(rate / 2), n_mels + 2) / 2595.0) - 1.0)
    bins = np.linspace(0, rate / 2, n_fft // 2 + 1)
    lower, center, upper = hz[:-2, None], hz[1:-1, None], hz[2:, None]
    return np.clip(np.minimum((bins - lower) / (center - lower), (upper - bins) / (upper - center)), 0, None)


FRAME, HOP = 400, 160  # 25 ms frames, 10 ms hop at 16 kHz


def _padded(x, frame=FRAME):
    """x as float64, zero-padded to one frame when shorter."""
    x = np.asarray(x, dtype=np.float64)
    return np.pad(x, (0, frame - len(x))) if len(x) < frame else x


def _frames(x, frame=FRAME, hop=HOP):
    """[count, frame] frames of x (at least one frame long), every hop samples."""
    count = 1 + (len(x) - frame) // hop
    return x[np.arange(frame)[None] + hop * np.arange(count)[:, None]]


def mfcc(x, rate=16000, n_mfcc=13, n_mels=26, frame=FRAME, hop=HOP, n_fft=512):
    x = _padded(x, frame)
    x = np.append(x[0], x[1:] - 0.97 * x[:-1])
    frames = _frames(x, frame, hop) * np.hamming(frame)
    power = np.abs(np.fft.rfft(frames, n_fft)) ** 2 / n_fft
    energies = np.log(power @ _mel_filters(rate, n_fft, n_mels).T + 1e-10)
    k = np.arange(n_mels)
    dct = np.cos(np.pi / n_mels * (k[None] + 0.5) * np.arange(n_mfcc)[:, None])
    return energies @ dct.T  # [frames, n_mfcc]


def features(x, rate=16000, speech_db=None):
    """The 52 statistics. speech_db (None for the cloning check): over the frames whose power is
    within speech_db decibels of the utterance's 99th-percentile frame only (an energy voice
    activity detector; the deltas are taken before the selection)."""
    m = mfcc(x, rate)
    d = np.gradient(m, axis=0) if len(m) > 1 else np.zeros_like(m)
    if speech_db is not None and len(m) > 1:
        power = 10 * np.log10((_frames(_padded(x)) ** 2).mean(1) + 1e-20)  # mfcc's frames
        keep = power >= np.percentile(power, 99) - speech_db
        m, d = m[keep], d[keep]
    return np.concatenate([m.mean(0), m.std(0), d.mean(0), d.std(0)])


class SpeakerClassifier:
    def __init__(self, l2=1e-3, steps=2000, lr=0.5):
        self.l2, self.steps, self.lr = l2, steps, lr

    def fit(self, feats, labels):
        self.classes = sorted(set(labels))
        x = np.asarray(feats)
        self.mean, self.std = x.mean(0), x.std(0) + 1e-8
        x = (x - self.mean) / self.std
        y = np.zeros((len(labels), len(self.classes)))
        y[np.arange(len(labels)), [self.classes.index(l) for l in labels]] = 1
        self.w = np.zeros((x.shape[1], len(self.classes)))
        self.b = np.zeros(len(self.classes))
        for _ in range(self.steps):
            p = self._softmax(x @ self.w + self.b)
            g = (p - y) / len(x)
            self.w -= self.lr * (x.T @ g + self.l2 * self.w)
            self.b -= self.lr * g.sum(0)
        return self

    @staticmethod
    def _softmax(z):
        z = z - z.max(axis=1, keepdims=True)
        e = np.exp(z)
        return e / e.sum(axis=1, keepdims=True)

    def probabilities(self, feats):
        return self._softmax(((np.asarray(feats) - self.mean) / self.std) @ self.w + self.b)

    def predict(self, feats):
        return [self.classes[i] for i in self.probabilities(feats).argmax(axis=1)]
