"""Reference Mimi codec (Hugging Face MimiModel semantics) in plain PyTorch, reading codec/.

Readable, not fast: whole-utterance encode and decode exactly as transformers' MimiModel does
without streaming (causal convolutions with HF's padding rules, transposed convolutions trimmed
on the right, causal sliding-window transformers with rotary embeddings, split RVQ). Tensor
names are the ones MimiModel uses, so the same codec/model.safetensors loads into either.

    /usr/bin/python3 tools/reference/mimi.py decode --codec DIR --codes FILE -o OUT
        FILE: safetensors with int32 `codes` [frames, K]; OUT: float32 `pcm` [samples]
    /usr/bin/python3 tools/reference/mimi.py encode --codec DIR --audio-f32 FILE --num-codebooks K -o OUT
        FILE: safetensors with float32 `pcm` [samples] at the codec rate (or raw float32 LE);
        OUT: int32 `codes` [frames, K] and float32 `margin` [frames, K] (second-best minus best
        squared distance, computed in float64), for tests that skip near ties.

Exit status: 0 on success, 2 for bad arguments, 1 for any other failure (one line).
"""

import argparse
import json
import math
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import safetensors_io  # noqa: E402

DEFAULTS = dict(
    sampling_rate=24000, audio_channels=1, hidden_size=512, num_filters=64, num_residual_layers=1,
    upsampling_ratios=[8, 6, 5, 4], kernel_size=7, last_kernel_size=3, residual_kernel_size=3,
    dilation_growth_rate=2, compress=2, codebook_size=2048, codebook_dim=256, num_quantizers=32,
    num_semantic_quantizers=1, vector_quantization_hidden_dimension=256, upsample_groups=512,
    num_hidden_layers=8, intermediate_size=2048, num_attention_heads=8, num_key_value_heads=8,
    head_dim=64, norm_eps=1e-5, rope_theta=10000.0, sliding_window=250)


def load_config(codec_dir):
    with open(os.path.join(codec_dir, "config.json")) as f:
        return config_from_dict(json.load(f))


def config_from_dict(raw):
    """A codec config dict (HF MimiConfig fields) with defaults filled in, as a namespace."""
    c = dict(DEFAULTS)
    c.update({k: v for k, v in raw.items() if k in DEFAULTS and v is not None})
    if isinstance(raw.get("rope_parameters"), dict) and "rope_theta" in raw["rope_parameters"]:
        c["rope_theta"] = raw["rope_parameters"]["rope_theta"]
    if "head_dim" not in raw or raw["head_dim"] is None:
        c["head_dim"] = c["hidden_size"] // c["num_attention_heads"]
    return argparse.Namespace(**c)


class Mimi:
    def __init__(self, codec_dir, config=None, weights=None):
        """From codec_dir (config.json + model.safetensors), or from a config namespace and a
        {name: tensor} dict (tools/train/ passes its parameters, so training runs this code)."""
        if codec_dir is None:
            self.c, self.w = config, weights
        else:
            self.c = load_config(codec_dir)
            self.w, _ = safetensors_io.load(os.path.join(codec_dir, "model.safetensors"))
        c = self.c
        hop = int(np.prod(c.upsampling_ratios))
        encodec_rate = math.ceil(c.sampling_rate / hop)
        self.resample_kernel = 2 * int(encodec_rate / (c.sampling_rate / (2 * hop)))
        self._table_cache = {}  # (positions, device) -> rotary tables and mask (_tables)

    # --- convolutions (HF MimiConv1d / MimiConvTranspose1d, causal) ---
    def conv1d(self, x, prefix, stride=1, dilation=1, groups=1, replicate=False):
        w = self.w[prefix + ".conv.weight"]
        b = self.w.get(prefix + ".conv.bias")
        k_eff = (w.shape[-1] - 1) * dilation + 1
        padding_total = k_eff - stride
        length = x.shape[-1]
        n_frames = math.ceil((length - k_eff + padding_total) / stride + 1) - 1
        extra = n_frames * stride + k_eff - padding_total - length
        mode = "replicate" if replicate else "constant"
        x = F.pad(x, (padding_total, extra), mode=mode)
        return F.conv1d(x, w, b, stride=stride, dilation=dilation, groups=groups)

    def conv_transpose1d(self, x, prefix, stride, groups=1):
        w = self.w[prefix + ".conv.weight"]
        b = self.w.get(prefix + ".conv.bias")
        y = F.conv_transpose1d(x, w, b, stride=stride, groups=groups)
        padding_total = w.shape[-1] - stride  # trim_right_ratio 1: all of it on the right
        return y[..., : y.shape[-1] - padding_total]

    def resnet(self, x, prefix, dilation):
        h = self.conv1d(F.elu(x), prefix + ".block.1", dilation=dilation)
        h = self.conv1d(F.elu(h), prefix + ".block.3")
        return x + h

    def encoder(self, x):
        c, i = self.c, 0
        x = self.conv1d(x, "encoder.layers.0")
        i = 1
        for ratio in reversed(c.upsampling_ratios):
            for j in range(c.num_residual_layers):
                x = self.resnet(x, f"encoder.layers.{i}", c.dilation_growth_rate ** j)
                i += 1
            x = F.elu(x)
            i += 1
            x = self.conv1d(x, f"encoder.layers.{i}", stride=ratio)
            i += 1
        x = F.elu(x)
        i += 1
        return self.conv1d(x, f"encoder.layers.{i}")

    def decoder(self, x):
        c = self.c
        x = self.conv1d(x, "decoder.layers.0")
        i = 1
        for ratio in c.upsampling_ratios:
            x = F.elu(x)
            i += 1
            x = self.conv_transpose1d(x, f"decoder.layers.{i}", stride=ratio)
            i += 1
            for j in range(c.num_residual_layers):
                x = self.resnet(x, f"decoder.layers.{i}", c.dilation_growth_rate ** j)
                i += 1
        x = F.elu(x)
        i += 1
        return self.conv1d(x, f"decoder.layers.{i}")

    # --- transformer (HF MimiTransformerModel, no cache) ---
    def _tables(self, t, device):
        """Rotary tables and the sliding-window causal mask for t positions, built on the CPU
        (the reference's bits) and kept per (t, device): tools/train/ captures its training step
        as a CUDA graph, which cannot copy from the host inside the step."""
        cache, key = self._table_cache, (t, str(device))
        if key not in cache:
            c = self.c
            pos = torch.arange(t)
            inv_freq = 1.0 / (c.rope_theta ** (torch.arange(0, c.head_dim, 2, dtype=torch.int64).float() / c.head_dim))
            freqs = pos.float()[:, None] * inv_freq[None, :]
            emb = torch.cat((freqs, freqs), dim=-1)
            i, j = pos[:, None], pos[None, :]
            allowed = (j <= i) & (j > i - c.sliding_window)
            mask = torch.zeros(t, t).masked_fill(~allowed, float("-inf"))
            cache[key] = (emb.cos().to(device), emb.sin().to(device), mask.to(device))
        return cache[key]

    def transformer(self, x, prefix):
        """x [batch, time, hidden] (tools/train/ runs batches through the same code)."""
        c = self.c
        b, t = x.shape[0], x.shape[1]
        cos, sin, mask = self._tables(t, x.device)

        def rotate_half(v):
            half = v.shape[-1] // 2
            return torch.cat((-v[..., half:], v[..., :half]), dim=-1)

        for layer in range(c.num_hidden_layers):
            p = f"{prefix}.layers.{layer}."
            w = lambda name: self.w[p + name]  # noqa: E731
            h = F.layer_norm(x, (c.hidden_size,), w("input_layernorm.weight"), w("input_layernorm.bias"), c.norm_eps)
            q = (h @ w("self_attn.q_proj.weight").T).view(b, t, c.num_attention_heads, c.head_dim).transpose(1, 2)
            k = (h @ w("self_attn.k_proj.weight").T).view(b, t, c.num_key_value_heads, c.head_dim).transpose(1, 2)
            v = (h @ w("self_attn.v_proj.weight").T).view(b, t, c.num_key_value_heads, c.head_dim).transpose(1, 2)
            q = q * cos + rotate_half(q) * sin
            k = k * cos + rotate_half(k) * sin
            rep = c.num_attention_heads // c.num_key_value_heads
            k = k.repeat_interleave(rep, dim=1)
            v = v.repeat_interleave(rep, dim=1)
            scores = q @ k.transpose(2, 3) / math.sqrt(c.head_dim) + mask
            attn = torch.softmax(scores.float(), dim=-1) @ v
            attn = attn.transpose(1, 2).reshape(b, t, -1) @ w("self_attn.o_proj.weight").T
            x = x + w("self_attn_layer_scale.scale") * attn
            h = F.layer_norm(x, (c.hidden_size,), w("post_attention_layernorm.weight"),
                             w("post_attention_layernorm.bias"), c.norm_eps)
            h = F.gelu(h @ w("mlp.fc1.weight").T) @ w("mlp.fc2.weight").T
            x = x + w("mlp_layer_scale.scale") * h
        return x

    # --- split residual vector quantizer ---
    def rvq_parts(self, count_total):
        c = self.c
        sem = min(count_total, c.num_semantic_quantizers)
        return [("quantizer.semantic_residual_vector_quantizer", 0, sem),
                ("quantizer.acoustic_residual_vector_quantizer", sem, count_total - sem)]

    def codebook(self, prefix, i):
        p = f"{prefix}.layers.{i}.codebook."
        return self.w[p + "embed_sum"] / self.w[p + "cluster_usage"].clamp(min=1e-5)[:, None]

    def project(self, x, name):
        w = self.w.get(name)
        return x if w is None else F.conv1d(x, w)

    def encode(self, pcm, k):
        """pcm: float32 [samples] -> (codes int32 [frames, K], margin float32 [frames, K])."""
        x = pcm.view(1, 1, -1).float()
        e = self.encoder(x)
        e = self.transformer(e.transpose(1, 2), "encoder_transformer").transpose(1, 2)
        e = self.conv1d(e, "downsample", stride=2, replicate=True)
        codes, margins = [], []
        for prefix, _, count in self.rvq_parts(k):
            if count <= 0:
                continue
            residual = self.project(e, prefix + ".input_proj.weight")[0].T  # [frames, dim]
            for i in range(count):
                embed = self.codebook(prefix, i)
                d = ((residual.double()[:, None, :] - embed.double()[None, :, :]) ** 2).sum(-1)
                best = d.topk(2, dim=-1, largest=False)
                idx = best.indices[:, 0]
                codes.append(idx.to(torch.int32))
                margins.append((best.values[:, 1] - best.values[:, 0]).float())
                residual = residual - embed[idx]
        return torch.stack(codes, dim=1), torch.stack(margins, dim=1)

    def decode(self, codes):
        """codes: int [frames, K] -> float32 pcm [frames * samples_per_frame]."""
        codes = codes.long()
        emb = None
        for prefix, first, count in self.rvq_parts(codes.shape[1]):
            if count <= 0:
                continue
            q = torch.tensor(0.0)
            for i in range(count):
                q = q + self.codebook(prefix, i)[codes[:, first + i]]
            part = self.project(q.T[None], prefix + ".output_proj.weight")
            emb = part if emb is None else emb + part
        emb = self.conv_transpose1d(emb, "upsample", stride=2, groups=self.c.upsample_groups)
        emb = self.transformer(emb.transpose(1, 2), "decoder_transformer").transpose(1, 2)
        return self.decoder(emb).reshape(-1)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    d = sub.add_parser("decode")
    d.add_argument("--codec", required=True)
    d.add_argument("--codes", required=True)
    d.add_argument("-o", "--output", required=True)
    e = sub.add_parser("encode")
    e.add_argument("--codec", required=True)
    e.add_argument("--audio-f32", required=True)
    e.add_argument("--num-codebooks", type=int, required=True)
    e.add_argument("-o", "--output", required=True)
    args = parser.parse_args(argv)
    torch.set_grad_enabled(False)
    try:
        model = Mimi(args.codec)
        if args.command == "decode":
            codes = safetensors_io.load(args.codes)[0]["codes"]
            safetensors_io.save(args.output, {"pcm": model.decode(codes).contiguous()})
        else:
            if args.audio_f32.endswith(".safetensors"):
                pcm = safetensors_io.load(args.audio_f32)[0]["pcm"]
            else:
                pcm = torch.from_numpy(np.fromfile(args.audio_f32, dtype="<f4").astype(np.float32))
            codes, margin = model.encode(pcm, args.num_codebooks)
            safetensors_io.save(args.output, {"codes": codes.contiguous(), "margin": margin.contiguous()},
                                {"format": "drama-reference-codes/1"})
    except Exception as exc:  # one line, exit 1
        print(f"mimi.py: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
