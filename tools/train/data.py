"""Training data: corpus audio for the codec, codes + IPA tokens for the model (docs/training.md).

- Codec: random crops of the training utterances (held-out sentences are never read).
- Model: every training utterance's codes (encoded once by the trained codec) and text tokens
  (the checkpoint's text frontend, espeak-ipa through tools/reference/text_frontend.py). An
  example pairs a target utterance with a reference: another training utterance of the same
  speaker, dropped with probability `drop_reference` (the unconditional prompt)."""

import os
import random
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "corpus"))
sys.path.insert(0, os.path.join(HERE, "..", "reference"))

import audio  # noqa: E402
import text_frontend  # noqa: E402


def read_corpus(corpus_dir, split="train"):
    rows = []
    with open(os.path.join(corpus_dir, "corpus.tsv"), encoding="utf-8") as f:
        header = f.readline().rstrip("\n").split("\t")
        for line in f:
            row = dict(zip(header, line.rstrip("\n").split("\t")))
            if row["split"] == split:
                rows.append(row)
    return rows


def load_audio(corpus_dir, rows):
    """[int16 numpy arrays] of the rows' wavs (24 kHz)."""
    out = []
    for r in rows:
        x, rate = audio.read_wav(os.path.join(corpus_dir, r["path"]))
        if rate != 24000:
            x = audio.resample(x, rate, 24000)
        out.append((np.clip(x, -1, 1) * 32767).astype(np.int16))
    return out


class CropSampler:
    """Batches of random `seconds`-long crops (zero-padded when shorter), seeded."""

    def __init__(self, waves, seconds, seed, sample_rate=24000):
        self.waves, self.length = waves, int(seconds * sample_rate)
        self.rng = random.Random(seed)

    def batch(self, size):
        out = np.zeros((size, self.length), dtype=np.float32)
        for i in range(size):
            w = self.waves[self.rng.randrange(len(self.waves))]
            start = self.rng.randrange(max(1, len(w) - self.length + 1))
            piece = w[start:start + self.length].astype(np.float32) / 32768.0
            out[i, :len(piece)] = piece
        return torch.from_numpy(out)

    def state(self):
        return self.rng.getstate()


def text_tokens(config, text):
    t = config["text"]
    return text_frontend.text_tokens(text, t.get("frontend", "bytes"), t.get("language", "en-us"))


class PairSampler:
    """Model examples: (reference or None, target) utterances of one speaker, seeded. The
    training draws each step's batch from seed (recipe seed, step): reseed() starts that stream
    without indexing the utterances again (55246 of them took 32 ms a step)."""

    def __init__(self, utterances, seed, drop_reference=0.15, max_frames=None):
        self.by_speaker = {}
        for u in utterances:
            if max_frames is None or len(u["codes"]) <= max_frames:
                self.by_speaker.setdefault(u["speaker"], []).append(u)
        self.speakers = sorted(s for s, us in self.by_speaker.items() if len(us) >= 2)
        self.rng = random.Random(seed)
        self.drop_reference = drop_reference

    def reseed(self, seed):
        """The draws of PairSampler(same utterances, seed, ...)."""
        self.rng.seed(seed)
        return self

    def batch(self, size):
        out = []
        for _ in range(size):
            us = self.by_speaker[self.speakers[self.rng.randrange(len(self.speakers))]]
            target, ref = self.rng.sample(us, 2)
            out.append((None if self.rng.random() < self.drop_reference else ref, target))
        return out


def example_positions(example):
    """Positions of a (reference or None, target) example's sequence: text + bos/eos + frames of
    each utterance (spec section 6)."""
    return sum(len(u["tokens"]) + 2 + len(u["codes"]) for u in example if u is not None)


def step_batch(sampler, seed, step, size, group=1):
    """The examples of training step `step`. group 1: `size` draws from seed + step (the batches
    of runs 1-5). group G: the G steps from G * (step // G) share one draw of G x size examples
    from seed + that first step, sorted by length and cut into G batches, taken in an order drawn
    from the same stream: each batch holds examples of similar length (padded to its own longest,
    it wastes little), and a step's batch still depends on its step alone (chunks may end
    anywhere)."""
    if group <= 1:
        return sampler.reseed(seed + step).batch(size)
    first = step - step % group
    pool = sampler.reseed(seed + first).batch(size * group)
    order = sampler.rng.sample(range(group), group)
    ranked = sorted(range(len(pool)), key=lambda i: (example_positions(pool[i]), i))
    part = order[step - first]
    return [pool[i] for i in ranked[part * size:(part + 1) * size]]


def padded_shape(examples, bucket, most, max_frames):
    """(positions, predicting rows) for collate's pad_to: the batch's longest sequence rounded up
    to a multiple of `bucket` (0: always `most`, one shape for every batch), at most `most`; and
    min(max_frames + 1, positions) predicting rows per example (an example predicts its target's
    frames + eos, no more than max_frames + 1 and no more than its positions). A CUDA graph is
    captured per shape, so the buckets bound how many there are."""
    positions = most
    if bucket:
        positions = min(most, -(-max(example_positions(e) for e in examples) // bucket) * bucket)
    return positions, len(examples) * min(max_frames + 1, positions)


def collate(config, examples, device, pad_to=None):
    """Padded batch for model.Drama3Train.forward (spec section 6 layout). An example's codes
    may be a list of frames or an int tensor [frames, K]. pad_to=(positions, predicting rows)
    gives every batch the same shapes (a CUDA graph's inputs): sequences padded at the end (the
    mask is causal, so padding changes no real position), predicting rows padded with targets
    -100 (ignored by the losses)."""
    text, k = config["text"], config["audio"]["num_codebooks"]
    eos_code = config["audio"].get("eos_code", config["audio"]["codebook_size"])
    eos_row = torch.tensor([[eos_code] + [0] * (k - 1)], dtype=torch.int64)
    seqs, pred_b, pred_p, targets = [], [], [], []
    for b, (ref, target) in enumerate(examples):
        tokens, codes, is_audio = [], [], []

        def add_text(ids):
            n = len(ids) + 2
            tokens.append(torch.tensor([text["bos_id"], *ids, text["eos_id"]], dtype=torch.int64))
            codes.append(torch.zeros(n, k, dtype=torch.int64))
            is_audio.append(torch.zeros(n, dtype=torch.bool))

        def add_frames(frames):
            f = torch.as_tensor(frames, dtype=torch.int64).reshape(-1, k)
            tokens.append(torch.zeros(f.shape[0], dtype=torch.int64))
            codes.append(f)
            is_audio.append(torch.ones(f.shape[0], dtype=torch.bool))
            return f

        if ref is not None:
            add_text(ref["tokens"])
            add_frames(ref["codes"])
        add_text(target["tokens"])
        first = sum(t.shape[0] for t in tokens) - 1  # the target text's eos predicts frame 0
        frames = add_frames(target["codes"])
        count = frames.shape[0] + 1  # every frame, then eos
        pred_b.append(torch.full((count,), b, dtype=torch.int64))
        pred_p.append(torch.arange(first, first + count, dtype=torch.int64))
        targets.append(torch.cat([frames, eos_row]))
        seqs.append((torch.cat(tokens), torch.cat(codes), torch.cat(is_audio)))
    length = max(s_[0].shape[0] for s_ in seqs)
    target = torch.cat(targets)
    pb, pp = torch.cat(pred_b), torch.cat(pred_p)
    if pad_to is not None:
        if length > pad_to[0] or target.shape[0] > pad_to[1]:
            raise ValueError(f"batch of {length} positions and {target.shape[0]} predicting rows "
                             f"exceeds pad_to {pad_to}")
        length, extra = pad_to[0], pad_to[1] - target.shape[0]
        target = torch.cat([target, torch.full((extra, k), -100, dtype=torch.int64)])
        pb = torch.cat([pb, torch.zeros(extra, dtype=torch.int64)])
        pp = torch.cat([pp, torch.zeros(extra, dtype=torch.int64)])
    bsz = len(seqs)
    tok = torch.zeros(bsz, length, dtype=torch.int64)
    cod = torch.zeros(bsz, length, k, dtype=torch.int64)
    aud = torch.zeros(bsz, length, dtype=torch.bool)
    for b, (t, c, a) in enumerate(seqs):
        tok[b, :t.shape[0]] = t
        cod[b, :t.shape[0]] = c
        aud[b, :t.shape[0]] = a
    return {"tokens": tok.to(device), "codes": cod.to(device), "is_audio": aud.to(device),
            "pred_batch": pb.to(device), "pred_pos": pp.to(device),
            "target_c0": target[:, 0].contiguous().to(device), "target_codes": target.to(device)}
