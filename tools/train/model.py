"""Training the Drama-3 model (spec sections 1, 3, 6) as batched PyTorch. The layers use the
reference's own functions (tools/reference/drama3.py: rms_norm, rope) and the same tensor names;
test_train (tools/train/test_train.py) checks that the logits of this batched forward equal the
reference's teacher-forced logits for the exported checkpoint, so what is trained is what the
engine runs (its parity tests cover the reference).

Sequences follow the prompt layout of spec section 6: conditional = [bos, reference text, eos] +
reference frames + [bos, target text, eos] + target frames; unconditional (the reference dropped,
so guidance works) = [bos, target text, eos] + target frames. Position p predicts the next frame:
the target text's eos predicts frame 0, frame t-1 predicts frame t, the last frame predicts eos."""

import math
import os
import sys

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "reference"))

import drama3  # noqa: E402

import layout  # noqa: E402

rms_norm, rope = drama3.rms_norm, drama3.rope
HAS_SDPA = hasattr(F, "scaled_dot_product_attention")  # torch >= 2.0 (the GPU machine's 2.11)


class Drama3Train:
    def __init__(self, config, seed, device="cpu", attention="auto"):
        """attention: "explicit" (scores, causal mask and softmax as written: the reference's
        arithmetic, any torch), "sdpa" (F.scaled_dot_product_attention, causal: a fused kernel
        that never writes the [B, heads, T, T] scores; torch >= 2.0) or "auto" (sdpa on CUDA
        where torch has it, else explicit)."""
        self.config = config
        b, t, a = config["backbone"], config["tower"], config["audio"]
        self.b, self.t = b, t
        self.moe = b["moe"]
        self.k, self.cs = a["num_codebooks"], a["codebook_size"]
        self.eos_code = a.get("eos_code", self.cs)
        generator = torch.Generator().manual_seed(seed)
        values = layout.initial_values(layout.drama3_layout(config), generator)
        self.params = {n: torch.nn.Parameter(v.to(device)) for n, v in values.items()}
        self.device = device
        if attention == "auto":
            attention = "sdpa" if str(device).startswith("cuda") and HAS_SDPA else "explicit"
        if attention == "sdpa" and not HAS_SDPA:
            raise ValueError(f"attention 'sdpa' needs torch >= 2.0 (this is {torch.__version__})")
        self.attention_kind = attention
        self._masks = {}

    def w(self, name):
        return self.params[name]

    def tensors(self):
        return {n: p.detach() for n, p in self.params.items()}

    def load(self, tensors):
        with torch.no_grad():
            for n, p in self.params.items():
                p.copy_(tensors[n])

    # --- layers (batched over [B, T, H]) ---

    def attention(self, x, prefix, shape):
        """Causal self-attention (every sequence here is causal: the backbone's prompt + frames,
        the tower's codebook positions). Padding sits at the end of a sequence, so it changes
        no real position."""
        bsz, t, _ = x.shape
        nh, nkv, hd = shape["num_heads"], shape["num_kv_heads"], shape["head_dim"]
        pos = torch.arange(t, device=x.device)
        q = (x @ self.w(prefix + ".q_proj.weight").T).view(bsz, t, nh, hd)
        k = (x @ self.w(prefix + ".k_proj.weight").T).view(bsz, t, nkv, hd)
        v = (x @ self.w(prefix + ".v_proj.weight").T).view(bsz, t, nkv, hd)
        eps, theta = shape["rms_norm_eps"], shape["rope_theta"]
        q = rope_batched(rms_norm(q, self.w(prefix + ".q_norm.weight"), eps), pos, theta)
        k = rope_batched(rms_norm(k, self.w(prefix + ".k_norm.weight"), eps), pos, theta)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        k = k.repeat_interleave(nh // nkv, dim=1)
        v = v.repeat_interleave(nh // nkv, dim=1)
        if self.attention_kind == "sdpa":
            # One dtype for the fused kernel: v's, the projection's (bf16 under autocast, where
            # rms_norm and rope give q and k in float32).
            out = F.scaled_dot_product_attention(q.to(v.dtype), k.to(v.dtype), v, is_causal=True)
        else:
            scores = q @ k.transpose(2, 3) / math.sqrt(hd) + self.causal_mask(t, x.device)
            out = torch.softmax(scores, dim=-1) @ v
        return out.transpose(1, 2).reshape(bsz, t, nh * hd) @ self.w(prefix + ".o_proj.weight").T

    def causal_mask(self, t, device):
        key = (t, str(device))
        if key not in self._masks:  # built once per length (a CUDA graph's step adds no copies)
            self._masks[key] = torch.full((t, t), float("-inf"), device=device).triu(1)
        return self._masks[key]

    def mlp(self, x, prefix):
        return (F.silu(x @ self.w(prefix + ".gate_proj.weight").T) *
                (x @ self.w(prefix + ".up_proj.weight").T)) @ self.w(prefix + ".down_proj.weight").T

    def moe_mlp(self, x, prefix):
        """Softmax over all experts, top-k, renormalised (spec section 1); returns (out, balance
        loss): Switch-style num_experts * sum(fraction routed * mean probability)."""
        shape = x.shape
        h = x.reshape(-1, shape[-1])
        n, k = self.moe["num_experts"], self.moe["experts_per_token"]
        probs = torch.softmax(h @ self.w(prefix + ".router.weight").T, dim=-1)
        weights, chosen = probs.topk(k, dim=-1)
        if self.moe.get("norm_topk_prob", True):
            weights = weights / weights.sum(dim=-1, keepdim=True)
        # Every expert runs on every row and the combine weights are zero where an expert was not
        # chosen: with 12 small experts this costs a few extra products and no host reads (a
        # per-expert gather needs the row count of each expert on the host, 48 waits a step).
        # The experts side by side are one wide MLP: gate and up [rows, experts x inter] in one
        # product each, each expert's activations scaled by its combine weight, and the down
        # products summed by one product over experts x inter (no [experts, rows, hidden]).
        combine = torch.zeros(h.shape[0], n, dtype=torch.float32, device=h.device).scatter(
            1, chosen, weights.to(torch.float32))
        gate = torch.cat([self.w(f"{prefix}.experts.{e}.gate_proj.weight") for e in range(n)])
        up = torch.cat([self.w(f"{prefix}.experts.{e}.up_proj.weight") for e in range(n)])
        down = torch.cat([self.w(f"{prefix}.experts.{e}.down_proj.weight") for e in range(n)], dim=1)
        inter = gate.shape[0] // n
        act = F.silu(h @ gate.T) * (h @ up.T)  # [rows, experts x inter]
        act = (act.view(-1, n, inter) * combine[:, :, None].to(act.dtype)).view(-1, n * inter)
        out = act @ down.T
        if self.moe.get("shared_expert_intermediate_size", 0) > 0:
            gate = torch.sigmoid(h @ self.w(prefix + ".shared_expert_gate.weight").T)
            out = out + gate * self.mlp(h, prefix + ".shared_expert")
        # (scatter, not F.one_hot, which checks its input's range on the host)
        fraction = torch.zeros_like(combine).scatter_(1, chosen, 1.0).mean(dim=0) / k
        balance = n * (fraction * probs.mean(dim=0)).sum()
        return out.view(shape), balance

    def stack(self, x, prefix, shape, layers, dense_layers=None):
        balance = 0.0
        eps = shape["rms_norm_eps"]
        for l in range(layers):
            p = f"{prefix}.layers.{l}"
            x = x + self.attention(rms_norm(x, self.w(p + ".input_norm.weight"), eps), p + ".attn",
                                   shape)
            h = rms_norm(x, self.w(p + ".post_attn_norm.weight"), eps)
            if dense_layers is None or l in dense_layers:
                x = x + self.mlp(h, p + ".mlp")
            else:
                y, bal = self.moe_mlp(h, p + ".mlp")
                x, balance = x + y, balance + bal
        return x, balance

    # --- whole model ---

    def embed(self, tokens, codes, is_audio):
        """tokens [B, T] (text ids), codes [B, T, K], is_audio [B, T] -> [B, T, H]."""
        # F.embedding / embedding_bag, not indexing: the backward of `weight[ids]` (index_put_ with
        # accumulate) walks repeated ids one by one, and padding repeats id 0 tens of thousands
        # of times a batch; on the H200 its 4 calls a step (these 3 and forward's gather of the
        # predicting states) were the step's largest cost (33 ms of about 170,
        # results/train-bench-model-h200.json).
        text = F.embedding(tokens.clamp(min=0), self.w("text_embed.weight"))
        rows = codes + torch.arange(self.k, device=codes.device) * (self.cs + 1)
        audio = F.embedding_bag(rows.reshape(-1, self.k), self.w("audio_embed.weight"), mode="sum")
        return torch.where(is_audio[..., None], audio.view(*codes.shape[:2], -1), text)

    def forward(self, batch):
        """Losses of a batch (data.collate): codebook-0 cross-entropy over target frames + eos,
        tower cross-entropy over codebooks 1..K-1, MoE balance."""
        x = self.embed(batch["tokens"], batch["codes"], batch["is_audio"])
        h, balance = self.stack(x, "backbone", self.b, self.b["num_layers"],
                                self.moe.get("dense_layers", [0]))
        h = rms_norm(h, self.w("backbone.norm.weight"), self.b["rms_norm_eps"])
        # [N, H] states predicting frames, gathered as an embedding of the flat positions (the
        # padding rows all read position 0 of row 0: see embed()).
        sel = F.embedding(batch["pred_batch"] * h.shape[1] + batch["pred_pos"], h.reshape(-1, h.shape[-1]))
        logits0 = sel @ self.w("codebook0_head.weight").T
        loss0 = F.cross_entropy(logits0, batch["target_c0"], ignore_index=-100)  # -100: padding
        # Tower: frames that are not eos (nor padding rows of a fixed-shape batch); positions
        # [P(h), P(E0(c0)), ..., P(E_{K-2}(c_{K-2}))]. It runs on every predicting row and the
        # other rows' targets are ignored: no data-dependent shapes (the step is a CUDA graph).
        fc = batch["target_codes"]  # [N, K]
        real = (batch["target_c0"] != self.eos_code) & (batch["target_c0"] >= 0)
        rows = fc[:, :-1].clamp(min=0) + torch.arange(self.k - 1, device=fc.device) * (self.cs + 1)
        tin = torch.cat([sel[:, None], F.embedding(rows, self.w("audio_embed.weight"))], dim=1)
        tin = tin @ self.w("tower.input_proj.weight").T
        out, _ = self.stack(tin, "tower", self.t, self.t["num_layers"])
        out = rms_norm(out, self.w("tower.norm.weight"), self.t["rms_norm_eps"])
        heads = self.w("tower.heads.weight")  # [K-1, cs, Ht]
        logits_t = torch.einsum("mkh,kch->mkc", out[:, 1:], heads)
        targets_t = torch.where(real[:, None], fc[:, 1:], torch.full_like(fc[:, 1:], -100))
        loss_t = F.cross_entropy(logits_t.reshape(-1, self.cs), targets_t.reshape(-1), ignore_index=-100)
        return {"codebook0": loss0, "tower": loss_t, "balance": balance,
                "logits0": logits0, "logits_tower": logits_t, "tower_rows": real}


def rope_batched(x, positions, theta):
    """The reference's rope on [B, T, heads, hd] (its cos/sin broadcast over the batch)."""
    return rope(x, positions.cpu(), theta).to(x.dtype) if x.device.type == "cpu" else \
        _rope_device(x, positions, theta)


def _rope_device(x, positions, theta):
    # Same arithmetic as drama3.rope (angles in float64, applied in float32), on x's device.
    half = x.shape[-1] // 2
    inv_freq = theta ** (-torch.arange(half, dtype=torch.float64, device=x.device) * 2.0 / x.shape[-1])
    angle = positions.to(torch.float64)[:, None] * inv_freq[None, :]
    cos = torch.cat([angle.cos(), angle.cos()], dim=-1).to(torch.float32)[:, None, :]
    sin = torch.cat([angle.sin(), angle.sin()], dim=-1).to(torch.float32)[:, None, :]
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos + rotated * sin
