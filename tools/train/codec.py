"""Training the Mimi-architecture codec (docs/training.md). The forward pass is
tools/reference/mimi.py's own code run on trainable tensors, so what is trained is what the
reference (and through its parity tests, the engine) decodes.

The quantizer is the hard part (issue 14: naive EMA RVQ codecs collapsed to a constant output):
- codebooks are EMA k-means in Mimi's own representation (embed_sum / cluster_usage, exported
  unchanged), each initialised by k-means on the first batch's residuals;
- a code whose EMA usage falls below `dead_ratio` of the mean usage is restarted on a random
  residual of the batch (relative, as Moshi's threshold_usage_ratio: an absolute threshold of
  0.5 with 480 vectors a batch for 1024 codes put the average code below it, so about 300 codes
  per codebook were re-seeded every step and none settled; the first GPU chunk, 2026-12-01);
- low-dimensional codes (vector_quantization_hidden_dimension, e.g. 32) through Mimi's
  input_proj/output_proj, as DAC factorises;
- quantizer dropout (a random number of codebooks per batch) so early codebooks carry the most;
- losses: multi-resolution log-mel L1 + log-STFT L1, commitment; after `adv_start` steps a
  multi-scale STFT discriminator (hinge + feature matching) as EnCodec/Mimi train with.

The decoder stage (train.py `decoder`) trains on only what decoding reads (Codec.decoder_names:
the tensors encode() never touches), so the codes, and the model trained on them, stay valid;
there a multi-period discriminator (HiFi-GAN's, smaller) joins the STFT one (Discriminators)."""

import math
import os
import sys

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "reference"))

import mimi  # noqa: E402

import layout  # noqa: E402


def _mel_filters(sample_rate, n_fft, n_mels):
    def hz_to_mel(f):
        return 2595.0 * math.log10(1.0 + f / 700.0)

    mels = torch.linspace(hz_to_mel(0.0), hz_to_mel(sample_rate / 2), n_mels + 2)
    hz = 700.0 * (10 ** (mels / 2595.0) - 1.0)
    bins = torch.linspace(0, sample_rate / 2, n_fft // 2 + 1)
    lower, center, upper = hz[:-2, None], hz[1:-1, None], hz[2:, None]
    up = (bins[None] - lower) / (center - lower)
    down = (upper - bins[None]) / (upper - center)
    return torch.clamp(torch.minimum(up, down), min=0.0)  # [n_mels, bins]


class SpectralLoss:
    """Multi-resolution log-mel L1 plus log-magnitude STFT L1."""

    def __init__(self, sample_rate, sizes=(256, 512, 1024, 2048), n_mels=64):
        self.sizes = sizes
        self.mels = {n: _mel_filters(sample_rate, n, n_mels) for n in sizes}
        self._on = {}  # (n, device) -> (window, filters): no host copies inside a step

    def _tables(self, n, device):
        key = (n, str(device))
        if key not in self._on:
            self._on[key] = (torch.hann_window(n, device=device), self.mels[n].to(device))
        return self._on[key]

    def __call__(self, y_hat, y):
        mel_loss = stft_loss = 0.0
        for n in self.sizes:
            window, fb = self._tables(n, y.device)
            spec = lambda s: torch.stft(s, n, n // 4, window=window, return_complex=True).abs()  # noqa: E731
            a, b = spec(y_hat), spec(y)
            mel_loss = mel_loss + F.l1_loss(torch.log(fb @ a + 1e-5), torch.log(fb @ b + 1e-5))
            stft_loss = stft_loss + F.l1_loss(torch.log(a + 1e-5), torch.log(b + 1e-5))
        return mel_loss / len(self.sizes), stft_loss / len(self.sizes)


def _conv_stack(net, x):
    """A discriminator's convolutions in order, leaky ReLU between them: (the last one's output,
    the feature maps after every other one)."""
    features = []
    for i, conv in enumerate(net):
        x = conv(x)
        if i < len(net) - 1:
            x = F.leaky_relu(x, 0.2)
            features.append(x)
    return x, features


class StftDiscriminator(torch.nn.Module):
    """Multi-scale STFT discriminator (EnCodec's MS-STFT-D, smaller): real/imag planes through
    2-D convolutions at three resolutions; returns per-scale logits and feature maps."""

    def __init__(self, channels=32, sizes=(512, 1024, 2048)):
        super().__init__()
        self.sizes = sizes
        self._windows = {}
        self.nets = torch.nn.ModuleList()
        for _ in sizes:
            self.nets.append(torch.nn.ModuleList([
                torch.nn.Conv2d(2, channels, (3, 9), padding=(1, 4)),
                torch.nn.Conv2d(channels, channels, (3, 9), stride=(1, 2), padding=(1, 4)),
                torch.nn.Conv2d(channels, channels, (3, 9), stride=(1, 2), padding=(1, 4)),
                torch.nn.Conv2d(channels, channels, (3, 3), padding=(1, 1)),
                torch.nn.Conv2d(channels, 1, (3, 3), padding=(1, 1))]))

    def forward(self, y):
        outs = []
        for n, net in zip(self.sizes, self.nets):
            key = (n, str(y.device))
            if key not in self._windows:
                self._windows[key] = torch.hann_window(n, device=y.device)
            window = self._windows[key]
            s = torch.stft(y, n, n // 4, window=window, return_complex=True)
            x = torch.stack([s.real, s.imag], dim=1).transpose(2, 3)  # [B, 2, frames, bins]
            outs.append(_conv_stack(net, x))
        return outs


class PeriodDiscriminator(torch.nn.Module):
    """Multi-period discriminator (HiFi-GAN's MPD, narrower): the waveform folded into [frames,
    period] columns for each period, 2-D convolutions along time only, so each sees the samples
    one period apart (pitch and its harmonics, which the STFT's magnitudes blur). Same output as
    StftDiscriminator: per period (logits, feature maps)."""

    def __init__(self, periods=(2, 3, 5, 7, 11), channels=32):
        super().__init__()
        self.periods = tuple(periods)
        widths = [1, channels, 2 * channels, 4 * channels, 4 * channels]
        self.nets = torch.nn.ModuleList()
        for _ in self.periods:
            layers = [torch.nn.Conv2d(a, b, (5, 1), stride=(3, 1), padding=(2, 0))
                      for a, b in zip(widths[:-1], widths[1:])]
            layers.append(torch.nn.Conv2d(widths[-1], widths[-1], (5, 1), padding=(2, 0)))
            layers.append(torch.nn.Conv2d(widths[-1], 1, (3, 1), padding=(1, 0)))
            self.nets.append(torch.nn.ModuleList(layers))

    def forward(self, y):
        outs = []
        for p, net in zip(self.periods, self.nets):
            pad = (-y.shape[-1]) % p
            x = F.pad(y, (0, pad), mode="reflect") if pad else y
            outs.append(_conv_stack(net, x.view(x.shape[0], 1, -1, p)))  # [B, 1, frames, period]
        return outs


class Discriminators(torch.nn.Module):
    """Several discriminators as one: their (logits, feature maps) lists end to end, so the step's
    hinge and feature-matching sums (train.codec_step_fn) run over all of them unchanged."""

    def __init__(self, **parts):
        super().__init__()
        self.parts = torch.nn.ModuleDict({n: d for n, d in parts.items() if d is not None})

    def forward(self, y):
        return [out for d in self.parts.values() for out in d(y)]


class _Reads(dict):
    """A tensor dict that records the names read through it (Codec.decoder_names)."""

    def __init__(self, tensors):
        super().__init__(tensors)
        self.read = set()

    def __getitem__(self, name):
        self.read.add(name)
        return super().__getitem__(name)

    def get(self, name, default=None):
        if name in self:
            self.read.add(name)
        return super().get(name, default)


class Codec:
    """Trainable parameters + EMA codebooks of one Mimi codec, and the training forward."""

    def __init__(self, codec_config, seed, device="cpu", decay=0.99, dead_ratio=0.1,
                 commitment=0.25):
        self.raw = dict(codec_config)
        self.c = mimi.config_from_dict(self.raw)
        self.decay, self.dead_ratio, self.commitment = decay, dead_ratio, commitment
        generator = torch.Generator().manual_seed(seed)
        values = layout.initial_values(layout.mimi_layout(self.raw), generator)
        self.buffers = {n: v.to(device) for n, v in values.items() if ".codebook." in n}
        self.params = {n: torch.nn.Parameter(v.to(device)) for n, v in values.items()
                       if ".codebook." not in n}
        self.model = mimi.Mimi(None, self.c, {**self.params, **self.buffers})
        self.generator = torch.Generator(device=device).manual_seed(seed + 1)
        # The restarts' random picks: this generator, or None (the device's default generator)
        # when the step is captured as a CUDA graph (the default one is graph-safe).
        self.rng = self.generator
        self.device = device
        self._initialized = set()  # codebooks known to be initialised (read once, not per step)

    def tensors(self):
        """Every tensor (parameters and codebook state), for export and checkpoints."""
        return {**{n: p.detach() for n, p in self.params.items()}, **self.buffers}

    def load(self, tensors):
        with torch.no_grad():
            for n, p in self.params.items():
                p.copy_(tensors[n])
            for n, b in self.buffers.items():
                b.copy_(tensors[n])
        self._initialized.clear()

    def encode_latent(self, pcm):
        m = self.model
        e = m.encoder(pcm[:, None])
        e = m.transformer(e.transpose(1, 2), "encoder_transformer").transpose(1, 2)
        return m.conv1d(e, "downsample", stride=2, replicate=True)  # [B, hidden, frames]

    def decode_latent(self, emb):
        m = self.model
        emb = m.conv_transpose1d(emb, "upsample", stride=2, groups=self.c.upsample_groups)
        emb = m.transformer(emb.transpose(1, 2), "decoder_transformer").transpose(1, 2)
        return m.decoder(emb)[:, 0]

    def _codebook(self, prefix, i):
        p = f"{prefix}.layers.{i}.codebook."
        return self.buffers[p + "embed_sum"] / self.buffers[p + "cluster_usage"].clamp(min=1e-5)[:, None]

    def _kmeans_init(self, prefix, i, x, iterations=10):
        p = f"{prefix}.layers.{i}.codebook."
        n = self.c.codebook_size
        pick = torch.randint(0, x.shape[0], (n,), generator=self.generator, device=x.device)
        centers = x[pick].clone()
        for _ in range(iterations):
            idx = torch.cdist(x, centers).argmin(dim=1)
            counts = torch.bincount(idx, minlength=n).float()
            sums = torch.zeros_like(centers).index_add_(0, idx, x)
            filled = counts > 0
            centers[filled] = sums[filled] / counts[filled, None]
        self.buffers[p + "embed_sum"].copy_(centers)
        self.buffers[p + "cluster_usage"].fill_(1.0)
        self.buffers[p + "initialized"].fill_(1.0)
        self._initialized.add(p)

    def _needs_init(self, prefix, i):
        p = f"{prefix}.layers.{i}.codebook."
        if p in self._initialized:
            return False
        if self.buffers[p + "initialized"].item() >= 0.5:  # loaded state: once per codebook
            self._initialized.add(p)
            return False
        return True

    def _update(self, prefix, i, x, idx):
        """EMA update of one codebook from residuals x [N, D] assigned to idx, then restarts of
        the codes used less than dead_ratio x the mean usage. No host synchronisation (the step
        can be captured as a CUDA graph): counts by scatter_add, and every code draws a candidate
        residual that the dead ones take (torch.where). Returns (codes restarted, codes used in
        this batch) as device tensors."""
        p = f"{prefix}.layers.{i}.codebook."
        usage, embed_sum = self.buffers[p + "cluster_usage"], self.buffers[p + "embed_sum"]
        counts = torch.zeros_like(usage).scatter_add_(0, idx, torch.ones_like(idx, dtype=usage.dtype))
        sums = torch.zeros_like(embed_sum).index_add_(0, idx, x)
        usage.mul_(self.decay).add_(counts, alpha=1 - self.decay)
        embed_sum.mul_(self.decay).add_(sums, alpha=1 - self.decay)
        floor = self.dead_ratio * usage.mean()
        dead = usage < floor
        pick = torch.randint(0, x.shape[0], (usage.shape[0],), generator=self.rng, device=x.device)
        embed_sum.copy_(torch.where(dead[:, None], x[pick] * floor, embed_sum))
        usage.copy_(torch.where(dead, floor, usage))
        return dead.sum(), (counts > 0).sum()

    def keep_mask(self, n_q):
        """[num_quantizers] float: 1 for the first n_q codebooks (quantizer dropout), 0 after."""
        return (torch.arange(self.c.num_quantizers, device=self.device) < n_q).float()

    def quantize(self, e, keep, train, project_out=True):
        """e [B, hidden, F] -> (quantized embedding [B, hidden, F], codes [B, F, K], commitment
        loss, stats). keep: n_q, or keep_mask(n_q) as a device tensor (the CUDA graph's input).
        Every codebook quantizes its residual and, in training, updates; the embedding sums only
        the kept ones, and a part (semantic, acoustic) with none kept passes no gradient and no
        commitment loss, as if it were not run. Stats are device tensors: restarts, and the
        fewest codes any kept codebook used. project_out=False: the codes alone (the embedding is
        0.0; the output projections, which only decoding needs, are not read)."""
        m = self.model
        if not torch.is_tensor(keep):
            keep = self.keep_mask(keep)
        b, _, frames = e.shape
        out, codes, commit, dead, used = 0.0, [], 0.0, 0, []
        for prefix, first, count in m.rvq_parts(self.c.num_quantizers):
            if count <= 0:
                continue
            z = m.project(e, prefix + ".input_proj.weight")  # [B, D, F]
            flat = z.transpose(1, 2).reshape(-1, z.shape[1])
            residual, total = flat.detach(), torch.zeros_like(flat)
            for i in range(count):
                if train and self._needs_init(prefix, i):
                    self._kmeans_init(prefix, i, residual)
                embed = self._codebook(prefix, i)
                idx = torch.cdist(residual, embed).argmin(dim=1)
                q = embed[idx]
                if train:
                    n_dead, n_used = self._update(prefix, i, residual, idx)
                    dead = dead + n_dead
                    used.append(torch.where(keep[first + i] > 0, n_used, self.c.codebook_size))
                codes.append(idx.view(b, frames))
                total = total + q * keep[first + i]
                residual = residual - q
            on = keep[first]  # the part is run when its first codebook is kept
            commit = commit + on * F.mse_loss(flat, total.detach())
            if not project_out:  # the codes alone (encode): the output projections are decoding's
                continue
            zq = total.detach() + (flat - flat.detach()) * on  # straight-through to the encoder
            part = m.project(zq.view(b, frames, -1).transpose(1, 2), prefix + ".output_proj.weight")
            out = part if isinstance(out, float) else out + part
        stats = {"dead_restarts": dead, "codes_used_min": torch.stack(used).min()} if used else {}
        return out, torch.stack(codes, dim=-1), commit * self.commitment, stats

    def forward(self, pcm, keep, train=True):
        e = self.encode_latent(pcm)
        emb, codes, commit, stats = self.quantize(e, keep, train)
        y = self.decode_latent(emb)
        return y[:, : pcm.shape[1]], codes, commit, stats

    @torch.no_grad()
    def encode(self, pcm):
        """pcm [B, T] -> codes [B, F, num_quantizers] (nearest code in float32)."""
        return self.quantize(self.encode_latent(pcm), self.c.num_quantizers, False, project_out=False)[1]

    @torch.no_grad()
    def reconstruct_unquantized(self, pcm):
        """pcm [B, T] -> pcm through the encoder, the quantizer's input and output projections
        WITHOUT the codebooks, and the decoder: what the autoencoder gives when quantization
        loses nothing (beside decode(encode(pcm)), it says which of the two limits)."""
        e = self.encode_latent(pcm)
        emb = None
        for prefix, _, count in self.model.rvq_parts(self.c.num_quantizers):
            if count <= 0:
                continue
            part = self.model.project(self.model.project(e, prefix + ".input_proj.weight"),
                                      prefix + ".output_proj.weight")
            emb = part if emb is None else emb + part
        return self.decode_latent(emb)

    def decoder_names(self):
        """The parameters decoding reads and encoding does not (the output projections, the
        upsampling, the decoder's transformer and convolutions), found by running encode() on a
        few samples and recording what it reads: training only these leaves every code the encoder
        gives, so the codes and the model trained on them, unchanged."""
        reads = _Reads(self.model.w)
        self.model.w = reads
        try:
            frame = 2 * math.prod(self.c.upsampling_ratios)  # samples a code stands for
            self.encode(torch.full((1, 4 * frame), 0.1, device=self.device))
        finally:
            self.model.w = dict(reads)
        return sorted(n for n in self.params if n not in reads.read)

    def forward_decoder(self, pcm):
        """The decoder stage's forward: the codes of pcm (every codebook, nothing trained or
        updated on the way) decoded with gradients for the decoding parameters. Returns what
        forward does, with no commitment loss and no codebook statistics."""
        codes = self.encode(pcm)
        y = self._decode(codes)
        zero = torch.zeros((), device=pcm.device)
        return y[:, : pcm.shape[1]], codes, zero, {"dead_restarts": zero, "codes_used_min": zero}

    @torch.no_grad()
    def decode(self, codes):
        """codes [B, F, K] -> pcm [B, F * samples_per_frame], the reference's decode path."""
        return self._decode(codes)

    def _decode(self, codes):
        return self.decode_latent(self.embedding(codes))

    def embedding(self, codes):
        """codes [B, F, K] -> the decoder's input [B, hidden, F]: each part's codebook vectors
        summed and through its output projection, the parts summed."""
        emb = None
        for prefix, first, count in self.model.rvq_parts(codes.shape[-1]):
            if count <= 0:
                continue
            q = sum(self._codebook(prefix, i)[codes[..., first + i]] for i in range(count))
            part = self.model.project(q.transpose(1, 2), prefix + ".output_proj.weight")
            emb = part if emb is None else emb + part
        return emb
