"""PyTorch baselines of the backbone decode step (issue 13), timed side by side in one run:

  hf     transformers' Qwen3MoeModel, eager BF16, random weights of the config's geometry
  plain  the strongest plain PyTorch step written here: BF16 weights, static shapes (a KV cache
         of fixed length, the position a device tensor), the selected experts gathered and run
         as two batched products, the whole step captured in a CUDA graph and replayed

    python3 bench/torch_baselines.py --config configs/bench-30b-a3b.json [--device cuda]
        [--batches 1,2] [--context 64] [--steps 30] [--only hf|plain] [--json OUT]

A step is one token per row through every layer (attention over the cache, MoE or dense MLP)
and the final norm, as `drama bench decode`'s backbone step. Each figure is the median of
--steps timed steps after warm-up, beside the device-to-device copy bandwidth measured in the
same run and the BF16 bytes a step must read (attention and router weights, the selected
experts' weights: the roofline of a BF16 step). The two run one after the other (the 30B
geometry's BF16 weights are 61 GB). On the CPU (no CUDA graph) it runs the tiny configs, which
the tests use; needs torch, and transformers for `hf` (skipped with a line when absent)."""

import argparse
import json
import math
import platform
import statistics
import sys
import time

import torch


def load_config(path):
    with open(path) as f:
        return json.load(f)


def sync(device):
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def copy_bandwidth(device, mib=1024):
    if not device.startswith("cuda"):
        return None
    a = torch.empty(mib << 20, dtype=torch.uint8, device=device)
    b = torch.empty_like(a)
    for _ in range(3):
        b.copy_(a)
    sync(device)
    times = []
    for _ in range(10):
        t0 = time.perf_counter()
        b.copy_(a)
        sync(device)
        times.append(time.perf_counter() - t0)
    del a, b
    return 2 * (mib << 20) / min(times) / 1e9  # GB/s, read + write


def step_bytes(cfg, batch):
    """BF16 bytes one step must read: attention and router weights once, the experts the rows
    choose (at most batch * k distinct per layer, counted as batch * k), dense MLPs once."""
    b = cfg["backbone"]
    h, hd = b["hidden_size"], b["head_dim"]
    attn = h * (b["num_heads"] + 2 * b["num_kv_heads"]) * hd + b["num_heads"] * hd * h
    moe = b["moe"]
    total = 0
    for layer in range(b["num_layers"]):
        total += attn
        if moe and layer not in moe["dense_layers"]:
            e, k, i = moe["num_experts"], moe["experts_per_token"], moe["expert_intermediate_size"]
            total += e * h + min(e, batch * k) * 3 * h * i
        else:
            total += 3 * h * b["intermediate_size"]
    return 2 * total


def timed(fn, device, steps, warm=3):
    for _ in range(warm):
        fn()
    sync(device)
    out = []
    for _ in range(steps):
        t0 = time.perf_counter()
        fn()
        sync(device)
        out.append(time.perf_counter() - t0)
    return statistics.median(out) * 1e3


# ---- transformers ----------------------------------------------------------------------------


def hf_model(cfg, device):
    import transformers

    b = cfg["backbone"]
    moe = b["moe"] or {}
    qc = transformers.Qwen3MoeConfig(
        vocab_size=cfg["text"]["vocab_size"], hidden_size=b["hidden_size"],
        intermediate_size=b["intermediate_size"], num_hidden_layers=b["num_layers"],
        num_attention_heads=b["num_heads"], num_key_value_heads=b["num_kv_heads"],
        head_dim=b["head_dim"], max_position_embeddings=b["max_position_embeddings"],
        rms_norm_eps=b["rms_norm_eps"], rope_theta=b["rope_theta"],
        num_experts=moe.get("num_experts", 1), num_experts_per_tok=moe.get("experts_per_token", 1),
        moe_intermediate_size=moe.get("expert_intermediate_size", b["intermediate_size"]),
        norm_topk_prob=moe.get("norm_topk_prob", True), decoder_sparse_step=1,
        mlp_only_layers=list(moe.get("dense_layers", [])) if moe else list(range(b["num_layers"])))
    with torch.device(device):
        try:  # transformers 5 names it dtype, 4.x torch_dtype
            model = transformers.Qwen3MoeModel._from_config(qc, dtype=torch.bfloat16,
                                                            attn_implementation="eager")
        except TypeError:
            model = transformers.Qwen3MoeModel._from_config(qc, torch_dtype=torch.bfloat16,
                                                            attn_implementation="eager")
    return model.eval(), transformers.__version__


def time_hf(model, cfg, device, batch, context, steps):
    h = cfg["backbone"]["hidden_size"]
    g = torch.Generator(device="cpu").manual_seed(1)
    with torch.no_grad():
        prompt = (torch.randn(batch, context, h, generator=g) * 0.1).to(device, torch.bfloat16)
        out = model(inputs_embeds=prompt, use_cache=True)
        cache = out.past_key_values
        token = (torch.randn(batch, 1, h, generator=g) * 0.1).to(device, torch.bfloat16)

        def step():
            model(inputs_embeds=token, past_key_values=cache, use_cache=True)

        return timed(step, device, steps)


# ---- plain PyTorch ---------------------------------------------------------------------------


class PlainStep:
    """The decode step in plain PyTorch with static shapes: one token per row at position
    self.pos (a device tensor), a KV cache of max_len positions per layer."""

    def __init__(self, cfg, device, batch, max_len, seed=1, dtype=torch.bfloat16, weights=None):
        """weights: None for random ones, else (per-layer dicts of ln1, ln2, q_norm, k_norm,
        wqkv, wo, router (MoE), gate_up, down; the final norm) in `dtype` on `device`."""
        b = cfg["backbone"]
        self.b, self.device, self.batch, self.max_len = b, device, batch, max_len
        h, hd, nkv = b["hidden_size"], b["head_dim"], b["num_kv_heads"]
        self.moe = b["moe"] or None
        if weights is None:
            weights = self.random_weights(b, device, dtype, seed)
        # Each layer's weights and its own KV cache (one per row: [batch, kv heads, max_len, hd]).
        self.layers = [dict(L, k=torch.zeros(batch, nkv, max_len, hd, dtype=dtype, device=device),
                            v=torch.zeros(batch, nkv, max_len, hd, dtype=dtype, device=device))
                       for L in weights[0]]
        self.norm = weights[1]
        inv = 1.0 / (b["rope_theta"] ** (torch.arange(0, hd, 2, dtype=torch.float32) / hd))
        ang = torch.arange(max_len, dtype=torch.float32)[:, None] * inv[None]
        self.cos, self.sin = ang.cos().to(device), ang.sin().to(device)
        self.pos = torch.zeros((), dtype=torch.long, device=device)
        self.x = torch.zeros(batch, h, dtype=dtype, device=device)  # the step's input rows
        self.positions = torch.arange(max_len, device=device)

    @staticmethod
    def random_weights(b, device, dtype, seed):
        """Random weights of the geometry, made on the CPU in slices (the seeded generator) and
        kept on the device: (per-layer dicts, final norm), as __init__ takes them."""
        h, hd, nq, nkv = b["hidden_size"], b["head_dim"], b["num_heads"], b["num_kv_heads"]
        moe = b["moe"] or None
        # A generator on the device itself: at the 30B geometry (61 GB of BF16) one made on the
        # CPU took minutes; the figures do not depend on the values.
        g = torch.Generator(device=device).manual_seed(seed)

        def w(*shape, std=0.02):
            t = torch.empty(*shape, dtype=dtype, device=device)
            flat = t.view(shape[0], -1)
            for i in range(0, shape[0], 8):  # float32 slices, so no float32 copy of a whole tensor
                flat[i:i + 8] = (torch.randn(flat[i:i + 8].shape, generator=g, device=device) * std).to(dtype)
            return t

        def ones(n):
            return torch.ones(n, dtype=dtype, device=device)

        layers = []
        for layer in range(b["num_layers"]):
            L = {"ln1": ones(h), "ln2": ones(h), "q_norm": ones(hd), "k_norm": ones(hd),
                 "wqkv": w((nq + 2 * nkv) * hd, h), "wo": w(h, nq * hd)}
            if moe and layer not in moe["dense_layers"]:
                e, i = moe["num_experts"], moe["expert_intermediate_size"]
                L.update(router=w(e, h), gate_up=w(e, 2 * i, h), down=w(e, h, i))
            else:
                L.update(gate_up=w(2 * b["intermediate_size"], h), down=w(h, b["intermediate_size"]))
            layers.append(L)
        return layers, ones(h)

    def rms(self, x, weight):
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.b["rms_norm_eps"])).to(x.dtype) * weight

    def rope(self, t):  # t [B, heads, hd], rotate-half layout
        # index_select with the position tensor: indexing by a 0-dim tensor reads it on the host,
        # which a CUDA graph capture refuses (the first H200 run, 2026-12-01).
        c = self.cos.index_select(0, self.pos.view(1))
        s = self.sin.index_select(0, self.pos.view(1))
        c, s = torch.cat([c, c], -1).to(t.dtype), torch.cat([s, s], -1).to(t.dtype)
        half = t.shape[-1] // 2
        rot = torch.cat([-t[..., half:], t[..., :half]], dim=-1)
        return t * c + rot * s

    def attention(self, L, x):
        b = self.b
        nq, nkv, hd = b["num_heads"], b["num_kv_heads"], b["head_dim"]
        qkv = x @ L["wqkv"].T
        q, k, v = qkv.split([nq * hd, nkv * hd, nkv * hd], dim=-1)
        q = self.rope(self.rms(q.view(-1, nq, hd), L["q_norm"]))
        k = self.rope(self.rms(k.view(-1, nkv, hd), L["k_norm"]))
        L["k"].index_copy_(2, self.pos.view(1), k.unsqueeze(2))
        L["v"].index_copy_(2, self.pos.view(1), v.view(-1, nkv, hd).unsqueeze(2))
        rep = nq // nkv
        B, _, T, _ = L["k"].shape  # each kv head serves rep query heads: [B, nq, T, hd]
        keys = L["k"].unsqueeze(2).expand(B, nkv, rep, T, hd).reshape(B, nq, T, hd)
        vals = L["v"].unsqueeze(2).expand(B, nkv, rep, T, hd).reshape(B, nq, T, hd)
        scores = (q.unsqueeze(2) @ keys.transpose(-1, -2)).float() / math.sqrt(hd)  # [B, nq, 1, T]
        scores = scores.masked_fill(self.positions > self.pos, float("-inf"))
        out = (scores.softmax(-1).to(x.dtype) @ vals).reshape(x.shape[0], nq * hd)
        return out @ L["wo"].T

    def mlp(self, L, x):
        if "router" not in L:
            gu = x @ L["gate_up"].T
            g, u = gu.chunk(2, dim=-1)
            return (torch.nn.functional.silu(g) * u) @ L["down"].T
        k = self.moe["experts_per_token"]
        probs = (x @ L["router"].T).float().softmax(-1)
        weight, idx = probs.topk(k, dim=-1)
        if self.moe["norm_topk_prob"]:
            weight = weight / weight.sum(-1, keepdim=True)
        flat = idx.reshape(-1)
        xs = x.unsqueeze(1).expand(x.shape[0], k, x.shape[1]).reshape(-1, x.shape[1], 1)  # row r at r*k..
        gu = torch.bmm(L["gate_up"].index_select(0, flat), xs).squeeze(-1)  # [B*k, 2I]
        g, u = gu.chunk(2, dim=-1)
        y = torch.bmm(L["down"].index_select(0, flat),
                      (torch.nn.functional.silu(g) * u).unsqueeze(-1)).squeeze(-1)  # [B*k, H]
        return (y.view(-1, k, y.shape[-1]).float() * weight.unsqueeze(-1)).sum(1).to(x.dtype)

    def forward(self):
        x = self.x
        for L in self.layers:
            x = x + self.attention(L, self.rms(x, L["ln1"]))
            x = x + self.mlp(L, self.rms(x, L["ln2"]))
        return self.rms(x, self.norm)


def time_plain(cfg, device, batch, context, steps, weights, graph=True):
    s = PlainStep(cfg, device, batch, max_len=context + 8, weights=weights)
    with torch.no_grad():
        s.pos.fill_(context)
        s.x.copy_(torch.randn(s.x.shape, generator=torch.Generator().manual_seed(2)).to(torch.bfloat16) * 0.1)
        if graph and device.startswith("cuda"):
            stream = torch.cuda.Stream()
            stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(stream):
                for _ in range(3):
                    s.forward()
            torch.cuda.current_stream().wait_stream(stream)
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                s.out = s.forward()
            ms = timed(g.replay, device, steps)
        else:
            graph = False
            ms = timed(s.forward, device, steps)
    return ms, graph


def build(which, cfg, device):
    """What every batch of one implementation runs on, made once: (transformers' model and its
    version) or (the plain step's random weights, None)."""
    if which == "hf":
        return hf_model(cfg, device)
    b = cfg["backbone"]
    return PlainStep.random_weights(b, device, torch.bfloat16, seed=1), None


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", required=True)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--batches", default="1,2")
    p.add_argument("--context", type=int, default=64)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--only", choices=["hf", "plain"])
    p.add_argument("--json")
    args = p.parse_args(argv)
    cfg = load_config(args.config)
    batches = [int(b) for b in args.batches.split(",")]
    bw = copy_bandwidth(args.device)
    receipt = {"bench": "torch-baselines", "config": args.config.rsplit("/", 1)[-1],
               "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
               "device": torch.cuda.get_device_name() if args.device.startswith("cuda") else platform.processor() or "cpu",
               "torch": torch.__version__, "context": args.context, "steps": args.steps,
               "copy_gb_s": round(bw, 1) if bw else None, "runs": []}
    def write():  # after every row: a run cut short still leaves what it measured
        if args.json:
            with open(args.json, "w") as f:
                json.dump(receipt, f, indent=1)
                f.write("\n")

    for which in ("hf", "plain"):
        if args.only and which != args.only:
            continue
        try:
            built, version = build(which, cfg, args.device)
        except ImportError:
            print("torch_baselines: hf skipped (no transformers here)", file=sys.stderr)
            continue
        for batch in batches:
            row = {"impl": which, "batch": batch, "bf16_bytes_per_step": step_bytes(cfg, batch)}
            try:  # an API change of transformers, a failed capture: say it, time the rest
                if which == "hf":
                    row["ms_per_step"] = time_hf(built, cfg, args.device, batch, args.context, args.steps)
                    row["mode"], row["transformers"] = "eager BF16", version
                else:
                    row["ms_per_step"], graphed = time_plain(cfg, args.device, batch, args.context,
                                                             args.steps, built)
                    row["mode"] = "static shapes, CUDA graph" if graphed else "static shapes, eager (no CUDA)"
            except Exception as e:
                row["error"] = f"{type(e).__name__}: {e}"[:300]
                receipt["runs"].append(row)
                print(json.dumps(row), flush=True)
                write()
                break
            row["ms_per_step"] = round(row["ms_per_step"], 3)
            if bw:
                row["roofline_ms"] = round(row["bf16_bytes_per_step"] / (bw / 2 * 1e9) * 1e3, 3)
            receipt["runs"].append(row)
            print(json.dumps(row), flush=True)
            write()
        del built
        if args.device.startswith("cuda"):
            torch.cuda.empty_cache()  # the weights (61 GB at the 30B geometry) go back
    write()
    return 0


if __name__ == "__main__":
    sys.exit(main())
