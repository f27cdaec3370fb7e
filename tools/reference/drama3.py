"""Reference Drama-3 model: the executable form of spec /work/shared/spec/drama3-model.md,
sections 1 (architecture), 4 (tensors, NVFP4), 5 (pruned experts) and 6 (prompt, guidance, sampling).

Plain PyTorch, float32 everywhere: BF16 weights are upcast and NVFP4 experts dequantized at load.
Written to be read, not to be fast; meant for the tiny checkpoints of the tests.
"""

import json
import math
import os

import torch

import nvfp4
import safetensors_io
import text_frontend
from sampling import counter_uniform, sample_logits

F32 = torch.float32


# ----------------------------------------------------------------------------------------------
# Checkpoint: config.json + tensors (spec sections 2-5)


class Checkpoint:
    """config.json and every tensor of a checkpoint directory, weights as float32."""

    def __init__(self, directory):
        self.dir = directory
        with open(os.path.join(directory, "config.json")) as f:
            self.config = json.load(f)
        if self.config.get("model_type") != "drama3":
            raise ValueError(f"{directory}/config.json: model_type must be \"drama3\"")
        quant_path = os.path.join(directory, "hf_quant_config.json")
        self.quant = None
        if os.path.exists(quant_path):  # informative only: quantization is read per tensor
            with open(quant_path) as f:
                self.quant = json.load(f).get("quantization")
        self.tensors, self.dtypes = safetensors_io.load_dir(directory)

    def has(self, name):
        return name in self.tensors

    def vector(self, name):
        """A BF16/F32 tensor (norm weight, embedding table), as float32."""
        if name not in self.tensors:
            raise ValueError(f"{self.dir}: tensor {name} is missing")
        return self.tensors[name].to(F32)

    def linear(self, prefix):
        """Weight [out, in] of linear `prefix`, float32: an NVFP4 triple (U8 weight + weight_scale
        + weight_scale_2; spec section 4) or a plain BF16/F32 weight. Decided by the stored dtype."""
        name = prefix + ".weight"
        if name not in self.tensors:
            raise ValueError(f"{self.dir}: tensor {name} is missing")
        if self.dtypes[name] == "U8":
            for part in (".weight_scale", ".weight_scale_2"):
                if prefix + part not in self.tensors:
                    raise ValueError(f"{self.dir}: NVFP4 linear {prefix} lacks {prefix + part}")
            if self.dtypes[prefix + ".weight_scale"] != "F8_E4M3":
                raise ValueError(f"{self.dir}: {prefix}.weight_scale must be F8_E4M3")
            return nvfp4.dequantize(
                self.tensors[name],
                self.tensors[prefix + ".weight_scale"],
                self.tensors[prefix + ".weight_scale_2"],
            )
        if self.dtypes[name] not in ("BF16", "F32", "F16"):
            raise ValueError(f"{self.dir}: tensor {name} has unsupported dtype {self.dtypes[name]}")
        return self.tensors[name].to(F32)


# ----------------------------------------------------------------------------------------------
# Building blocks (spec section 1: Qwen3-style layers)


def rms_norm(x, weight, eps):
    """x / sqrt(mean(x^2) + eps) * w over the last dimension."""
    return x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps) * weight


def rope(x, positions, theta):
    """Rotary embedding, rotate-half convention: x [T, heads, hd], pairs (i, i + hd/2).
    inv_freq_i = theta^(-2i/hd), angle = pos * inv_freq (angles in float64, applied in float32)."""
    half = x.shape[-1] // 2
    inv_freq = theta ** (-torch.arange(half, dtype=torch.float64) * 2.0 / x.shape[-1])
    angle = positions.to(torch.float64)[:, None] * inv_freq[None, :]
    cos = torch.cat([angle.cos(), angle.cos()], dim=-1).to(F32)[:, None, :]
    sin = torch.cat([angle.sin(), angle.sin()], dim=-1).to(F32)[:, None, :]
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos + rotated * sin


class KVCache:
    """Keys and values per layer, [kv_heads, length, head_dim]; `length` = next position."""

    def __init__(self, num_layers):
        self.keys = [None] * num_layers
        self.values = [None] * num_layers
        self.length = 0

    def append(self, layer, k, v):
        if self.keys[layer] is not None:
            k = torch.cat([self.keys[layer], k], dim=1)
            v = torch.cat([self.values[layer], v], dim=1)
        self.keys[layer], self.values[layer] = k, v
        return k, v


class Attention:
    """GQA with per-head RMS QK-norm and RoPE; head h uses kv head h // (num_heads / num_kv_heads)."""

    def __init__(self, ckpt, prefix, shape):
        self.q = ckpt.linear(prefix + ".q_proj")
        self.k = ckpt.linear(prefix + ".k_proj")
        self.v = ckpt.linear(prefix + ".v_proj")
        self.o = ckpt.linear(prefix + ".o_proj")
        self.q_norm = ckpt.vector(prefix + ".q_norm.weight")
        self.k_norm = ckpt.vector(prefix + ".k_norm.weight")
        self.heads, self.kv_heads, self.head_dim = shape["num_heads"], shape["num_kv_heads"], shape["head_dim"]
        self.eps, self.theta = shape["rms_norm_eps"], shape["rope_theta"]

    def __call__(self, h, cache, layer):
        t, start = h.shape[0], cache.length
        positions = torch.arange(start, start + t)
        q = (h @ self.q.T).reshape(t, self.heads, self.head_dim)
        k = (h @ self.k.T).reshape(t, self.kv_heads, self.head_dim)
        v = (h @ self.v.T).reshape(t, self.kv_heads, self.head_dim)
        q = rope(rms_norm(q, self.q_norm, self.eps), positions, self.theta)
        k = rope(rms_norm(k, self.k_norm, self.eps), positions, self.theta)
        keys, values = cache.append(layer, k.transpose(0, 1), v.transpose(0, 1))
        group = self.heads // self.kv_heads
        keys = keys.repeat_interleave(group, dim=0)  # [heads, length, hd]
        values = values.repeat_interleave(group, dim=0)
        scores = q.transpose(0, 1) @ keys.transpose(1, 2) / math.sqrt(self.head_dim)
        causal = torch.arange(keys.shape[1])[None, :] > positions[:, None]  # key after query
        scores = scores.masked_fill(causal[None], float("-inf"))
        out = torch.softmax(scores, dim=-1) @ values  # [heads, t, hd]
        return out.transpose(0, 1).reshape(t, self.heads * self.head_dim) @ self.o.T


class DenseMlp:
    """SwiGLU: down(silu(gate(h)) * up(h))."""

    def __init__(self, ckpt, prefix):
        self.gate = ckpt.linear(prefix + ".gate_proj")
        self.up = ckpt.linear(prefix + ".up_proj")
        self.down = ckpt.linear(prefix + ".down_proj")

    def __call__(self, h):
        return (torch.nn.functional.silu(h @ self.gate.T) * (h @ self.up.T)) @ self.down.T


class MoeMlp:
    """Mixture of experts with original-id routing over the stored experts (spec sections 1, 5)."""

    def __init__(self, ckpt, prefix, original_ids, moe):
        self.original_ids = list(original_ids)  # stored index -> original expert id, increasing
        self.top_k = min(moe["experts_per_token"], len(self.original_ids))
        self.norm_topk_prob = moe.get("norm_topk_prob", True)
        self.router = self._router_rows(ckpt, prefix + ".router", moe["num_experts"])
        self.experts = [DenseMlp(ckpt, f"{prefix}.experts.{e}") for e in self.original_ids]
        self.shared_expert, self.shared_gate = None, None
        if ckpt.has(prefix + ".shared_expert.gate_proj.weight"):
            self.shared_expert = DenseMlp(ckpt, prefix + ".shared_expert")
            self.shared_gate = ckpt.linear(prefix + ".shared_expert_gate")
        self.logit_offset = torch.zeros(len(self.original_ids))  # tests set -inf here (section 5)

    def _router_rows(self, ckpt, name, num_experts):
        """Router rows in stored order: layout [num_experts, H] (row = original id) or
        [len(kept), H] (row = stored index), told apart by the row count."""
        router = ckpt.linear(name)
        if router.shape[0] == num_experts:
            return router[self.original_ids]
        if router.shape[0] == len(self.original_ids):
            return router
        raise ValueError(f"{ckpt.dir}: {name}.weight has {router.shape[0]} rows; expected "
                         f"{num_experts} (all experts) or {len(self.original_ids)} (kept experts)")

    def route(self, h):
        """(stored indices [T, k], weights [T, k]) in rank order."""
        logits = h @ self.router.T + self.logit_offset  # FP32
        exps = torch.exp(logits - logits.max(dim=-1, keepdim=True).values)
        total = torch.zeros(h.shape[0])
        for s in range(exps.shape[1]):  # sequential sum: exact whatever -inf columns are added
            total = total + exps[:, s]
        probs = exps / total[:, None]
        chosen = []
        for row in probs.tolist():  # top-k; ties to the lower ORIGINAL id
            order = sorted(range(len(row)), key=lambda s: (-row[s], self.original_ids[s]))
            chosen.append(order[: self.top_k])
        chosen = torch.tensor(chosen, dtype=torch.int64).reshape(h.shape[0], self.top_k)
        weights = torch.gather(probs, 1, chosen)
        if self.norm_topk_prob:
            weights = weights / weights.sum(dim=-1, keepdim=True)
        return chosen, weights

    def __call__(self, h):
        chosen, weights = self.route(h)
        out = torch.zeros_like(h)
        for rank in range(self.top_k):  # sum in rank order
            expert_out = torch.zeros_like(h)
            for s in chosen[:, rank].unique().tolist():
                rows = chosen[:, rank] == s
                expert_out[rows] = self.experts[s](h[rows])
            out = out + weights[:, rank : rank + 1] * expert_out
        if self.shared_expert is not None:
            out = out + torch.sigmoid(h @ self.shared_gate.T) * self.shared_expert(h)
        return out


class Layer:
    """Pre-norm block: x += attn(input_norm(x)); x += mlp(post_attn_norm(x))."""

    def __init__(self, ckpt, prefix, shape, mlp):
        self.input_norm = ckpt.vector(prefix + ".input_norm.weight")
        self.attn = Attention(ckpt, prefix + ".attn", shape)
        self.post_attn_norm = ckpt.vector(prefix + ".post_attn_norm.weight")
        self.mlp = mlp
        self.eps = shape["rms_norm_eps"]

    def __call__(self, x, cache, index):
        x = x + self.attn(rms_norm(x, self.input_norm, self.eps), cache, index)
        return x + self.mlp(rms_norm(x, self.post_attn_norm, self.eps))


class Transformer:
    """A stack of layers and a final norm; forward() takes the embeddings of new positions."""

    def __init__(self, layers, norm, eps):
        self.layers, self.norm, self.eps = layers, norm, eps

    def new_cache(self):
        return KVCache(len(self.layers))

    def forward(self, x, cache):
        """x [T, H] at positions cache.length.. -> final-normed hidden states [T, H]."""
        for index, layer in enumerate(self.layers):
            x = layer(x, cache, index)
        cache.length += x.shape[0]
        return rms_norm(x, self.norm, self.eps)


# ----------------------------------------------------------------------------------------------
# The model


def stored_experts(config, layer):
    """Original expert ids stored for a MoE layer (spec section 5)."""
    moe = config["backbone"]["moe"]
    kept = moe.get("kept_experts")
    if kept is None:
        return list(range(moe["num_experts"]))
    return list(kept[layer])


def check_stored_experts(ckpt, layer, kept):
    """Refuse a pruned layer whose files lack a kept expert or hold one that is not listed."""
    prefix = f"backbone.layers.{layer}.mlp.experts."
    present = {int(name[len(prefix):].split(".")[0]) for name in ckpt.tensors if name.startswith(prefix)}
    missing, extra = sorted(set(kept) - present), sorted(present - set(kept))
    if missing or extra:
        raise ValueError(f"{ckpt.dir}: layer {layer} experts differ from kept_experts: "
                         f"missing {missing}, not listed {extra}")


class Drama3:
    def __init__(self, directory):
        ckpt = Checkpoint(directory)
        config = self.config = ckpt.config
        self.frontend = config["text"].get("frontend", "bytes")
        self.language = config["text"].get("language", "en-us")
        if self.frontend not in ("bytes", "espeak-ipa"):
            raise ValueError(f"{directory}/config.json: text.frontend \"{self.frontend}\" is not supported")
        audio, backbone, tower = config["audio"], config["backbone"], config["tower"]
        self.num_codebooks, self.codebook_size = audio["num_codebooks"], audio["codebook_size"]
        self.eos_code = audio.get("eos_code", self.codebook_size)
        self.bos_id, self.eos_id = config["text"]["bos_id"], config["text"]["eos_id"]
        self.max_positions = backbone.get("max_position_embeddings", 1 << 62)
        self.text_embed = ckpt.vector("text_embed.weight")
        self.audio_embed = ckpt.vector("audio_embed.weight")
        self.backbone = Transformer(
            [self._backbone_layer(ckpt, l) for l in range(backbone["num_layers"])],
            ckpt.vector("backbone.norm.weight"), backbone["rms_norm_eps"])
        self.codebook0_head = ckpt.linear("codebook0_head")
        self.tower_input_proj = ckpt.linear("tower.input_proj")
        self.tower = Transformer(
            [Layer(ckpt, f"tower.layers.{l}", tower, DenseMlp(ckpt, f"tower.layers.{l}.mlp"))
             for l in range(tower["num_layers"])],
            ckpt.vector("tower.norm.weight"), tower["rms_norm_eps"])
        self.tower_heads = ckpt.vector("tower.heads.weight")  # [K-1, codebook_size, Ht]

    def _backbone_layer(self, ckpt, l):
        prefix, moe = f"backbone.layers.{l}", self.config["backbone"]["moe"]
        if l in moe.get("dense_layers", [0]):
            mlp = DenseMlp(ckpt, prefix + ".mlp")
        else:
            kept = stored_experts(self.config, l)
            check_stored_experts(ckpt, l, kept)
            mlp = MoeMlp(ckpt, prefix + ".mlp", kept, moe)
        return Layer(ckpt, prefix, self.config["backbone"], mlp)

    # --- embeddings and prompt (spec section 6)

    def audio_row(self, codebook, code):
        return codebook * (self.codebook_size + 1) + code

    def embed_text(self, ids):
        return self.text_embed[torch.tensor(ids, dtype=torch.int64)]

    def embed_frames(self, codes):
        """codes [F, K] -> [F, H]: each frame embeds the sum over k of its codebooks' rows."""
        codes = torch.as_tensor(codes, dtype=torch.int64).reshape(-1, self.num_codebooks)
        out = torch.zeros(codes.shape[0], self.audio_embed.shape[1])
        for k in range(self.num_codebooks):
            out = out + self.audio_embed[self.audio_row(k, codes[:, k])]
        return out

    def text_segment(self, text):
        """[bos, UTF-8 bytes..., eos] embedded."""
        tokens = text_frontend.text_tokens(text, self.frontend, self.language)
        return self.embed_text([self.bos_id, *tokens, self.eos_id])

    def prompt(self, text, voice=None):
        """Conditional branch: segment(transcript, reference codes) + [bos, target, eos];
        without a voice, the unconditional prompt [bos, target, eos]."""
        target = self.text_segment(text)
        if voice is None:
            return target
        return torch.cat([self.text_segment(voice["transcript"]), self.embed_frames(voice["codes"]), target])

    def run_backbone(self, x, cache):
        if cache.length + x.shape[0] > self.max_positions:
            raise ValueError(f"sequence exceeds backbone.max_position_embeddings = {self.max_positions}")
        return self.backbone.forward(x, cache)

    # --- heads and tower (spec section 1)

    def codebook0_logits(self, h):
        return h @ self.codebook0_head.T  # [.., codebook_size + 1]

    def tower_input(self, x):
        return x @ self.tower_input_proj.T

    def tower_head(self, out, codebook):
        """Tower output (already tower-normed) of the position holding codebook-1 -> codebook's logits."""
        return out @ self.tower_heads[codebook - 1].T

    def tower_logits_teacher_forced(self, h, frame_codes):
        """h [H] (final-normed backbone state), frame_codes [K] -> logits [K-1, codebook_size]."""
        codes = torch.as_tensor(frame_codes, dtype=torch.int64)
        rows = [self.audio_row(k, codes[k]) for k in range(self.num_codebooks - 1)]
        x = torch.cat([h[None], self.audio_embed[torch.stack(rows)]])  # [h, E0(c0), .., E_{K-2}]
        out = self.tower.forward(self.tower_input(x), self.tower.new_cache())
        return torch.stack([self.tower_head(out[i], i) for i in range(1, self.num_codebooks)])


# ----------------------------------------------------------------------------------------------
# Teacher-forced logits (`drama logits`)


def branch_logits(model, prompt, codes):
    """Logits of one branch for every frame of codes [F, K], teacher-forced."""
    frames = codes.shape[0]
    x = torch.cat([prompt, model.embed_frames(codes[: max(frames - 1, 0)])])
    h = model.run_backbone(x, model.backbone.new_cache())
    h = h[prompt.shape[0] - 1 : prompt.shape[0] - 1 + frames]  # row t predicts frame t
    tower = [model.tower_logits_teacher_forced(h[t], codes[t]) for t in range(frames)]
    tower = torch.stack(tower) if tower else torch.zeros(0, model.num_codebooks - 1, model.codebook_size)
    return {"codebook0": model.codebook0_logits(h), "tower": tower}


def teacher_forced_logits(model, text, codes, voice=None):
    """{cond.codebook0 [F, cs+1], cond.tower [F, K-1, cs]} (+ uncond.* when a voice is given)."""
    codes = torch.as_tensor(codes, dtype=torch.int64)
    out = {}
    branches = [("cond", voice)] + ([("uncond", None)] if voice is not None else [])
    for name, branch_voice in branches:
        for key, value in branch_logits(model, model.prompt(text, branch_voice), codes).items():
            out[f"{name}.{key}"] = value.to(F32).contiguous()
    return out


# ----------------------------------------------------------------------------------------------
# Generation with reference-conditioned guidance (spec section 6)


def guide(cond, uncond, gamma):
    """l_uncond + gamma * (l_cond - l_uncond) in FP32; a single branch passes through."""
    if uncond is None:
        return cond
    return uncond + torch.tensor(gamma, dtype=F32) * (cond - uncond)


def generate(model, text, voice=None, seed=0, temperature=0.9, top_k=50, top_p=1.0, gamma=1.5,
             max_frames=100, return_logits=False):
    """Codes [F, K] (int32), the eos frame not included. With return_logits, also the guided
    logits that each emitted code was sampled from ({"codebook0": [F, cs+1], "tower": [F, K-1, cs]})."""
    guided = voice is not None and gamma != 1.0
    prompts = [model.prompt(text, voice)] + ([model.prompt(text)] if guided else [])
    caches = [model.backbone.new_cache() for _ in prompts]
    hidden = [model.run_backbone(p, c)[-1] for p, c in zip(prompts, caches)]

    def pick(per_branch, frame, codebook):
        logits = guide(per_branch[0], per_branch[1] if guided else None, gamma)
        u = counter_uniform(seed, frame, codebook)
        return sample_logits(logits.numpy(), temperature, top_k, top_p, u), logits

    frames, trace0, trace_tower = [], [], []
    for frame in range(max_frames):
        c0, logits0 = pick([model.codebook0_logits(h) for h in hidden], frame, 0)
        if c0 == model.eos_code:
            break
        codes, tower_logits = tower_step(model, hidden, c0, lambda l, k: pick(l, frame, k))
        frames.append(codes)
        trace0.append(logits0)
        trace_tower.append(torch.stack(tower_logits))
        if frame + 1 < max_frames:  # the next frame's input, into both branches
            x = model.embed_frames([codes])
            hidden = [model.run_backbone(x, c)[-1] for c in caches]
    result = torch.tensor(frames, dtype=torch.int32).reshape(len(frames), model.num_codebooks)
    if not return_logits:
        return result
    cs, k = model.codebook_size, model.num_codebooks
    return result, {
        "codebook0": torch.stack(trace0) if trace0 else torch.zeros(0, cs + 1),
        "tower": torch.stack(trace_tower) if trace_tower else torch.zeros(0, k - 1, cs),
    }


def tower_step(model, hidden, c0, pick):
    """Codebooks 1..K-1 of one frame. Each branch runs its own tower (fresh KV cache) on its h and
    the shared sampled codes; at each position the branches' logits are guided, then sampled."""
    caches = [model.tower.new_cache() for _ in hidden]
    for h, cache in zip(hidden, caches):  # position 0: P(h); its output feeds no head
        model.tower.forward(model.tower_input(h[None]), cache)
    codes, logits_per_codebook = [c0], []
    for codebook in range(1, model.num_codebooks):
        previous = model.audio_embed[model.audio_row(codebook - 1, codes[-1])][None]
        outputs = [model.tower.forward(model.tower_input(previous), c) for c in caches]
        code, logits = pick([model.tower_head(o[0], codebook) for o in outputs], codebook)
        codes.append(code)
        logits_per_codebook.append(logits)
    return codes, logits_per_codebook


# ----------------------------------------------------------------------------------------------
# Voice files and codes files (spec section 8): int32 `codes` [frames, K] + string metadata

VOICE_FORMAT, CODES_FORMAT = "drama-voice/1", "drama-codes/1"


def read_codes_file(path, expected_format, model):
    """Returns {"codes": int64 [F, K], **metadata}; refuses a wrong format, shape or code."""
    tensors, metadata = safetensors_io.load(path)
    if metadata.get("format") != expected_format:
        raise ValueError(f"{path}: metadata format is {metadata.get('format')!r}, expected {expected_format!r}")
    codes, k = tensors.get("codes"), model.num_codebooks
    if codes is None or codes.dtype != torch.int32 or codes.dim() != 2 or codes.shape[1] != k:
        raise ValueError(f"{path}: tensor codes must be int32 [frames, {k}]")
    if codes.numel() and (codes.min() < 0 or codes.max() >= model.codebook_size):
        raise ValueError(f"{path}: codes must lie in 0..{model.codebook_size - 1}")
    return {**metadata, "codes": codes.to(torch.int64)}


def read_voice(path, model):
    voice = read_codes_file(path, VOICE_FORMAT, model)
    if "transcript" not in voice:
        raise ValueError(f"{path}: voice metadata lacks transcript")
    return voice


def audio_metadata(model, fmt):
    audio = model.config["audio"]
    return {"format": fmt, "num_codebooks": str(model.num_codebooks),
            "sample_rate": str(audio.get("sample_rate", 24000)), "frame_rate": repr(float(audio.get("frame_rate", 12.5)))}


def write_codes_file(path, codes, metadata):
    safetensors_io.save(path, {"codes": torch.as_tensor(codes, dtype=torch.int32).contiguous()}, metadata)
