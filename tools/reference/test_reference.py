"""Self-tests of the reference model. Run from tools/reference:  /usr/bin/python3 -m unittest

They build their own tiny random checkpoints (seeded) in a temporary directory, so they do not
depend on `drama make-checkpoint`."""

import copy
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import unittest

import numpy as np
import torch

import cli
import drama3
import nvfp4
import safetensors_io
import sampling

HERE = os.path.dirname(os.path.abspath(__file__))
SEED = 20261129

TINY_CONFIG = {
    "model_type": "drama3",
    "text": {"frontend": "bytes", "vocab_size": 260, "bos_id": 256, "eos_id": 257, "pad_id": 258},
    "audio": {"num_codebooks": 4, "codebook_size": 32, "eos_code": 32, "frame_rate": 12.5, "sample_rate": 24000},
    "backbone": {"hidden_size": 32, "num_layers": 3, "num_heads": 4, "num_kv_heads": 2, "head_dim": 8,
                 "intermediate_size": 48, "rms_norm_eps": 1e-6, "rope_theta": 10000.0,
                 "max_position_embeddings": 512,
                 "moe": {"num_experts": 6, "experts_per_token": 2, "expert_intermediate_size": 16,
                         "norm_topk_prob": True, "shared_expert_intermediate_size": 16,
                         "dense_layers": [0], "kept_experts": None}},
    "tower": {"hidden_size": 32, "num_layers": 2, "num_heads": 4, "num_kv_heads": 2, "head_dim": 8,
              "intermediate_size": 48, "rms_norm_eps": 1e-6, "rope_theta": 10000.0},
    "guidance": {"default_gamma": 1.5},
    "sampling": {"temperature": 0.9, "top_k": 50, "top_p": 1.0},
}


# ----------------------------------------------------------------------------------------------
# A tiny random checkpoint writer (spec sections 2-5), independent of the C++ make-checkpoint


def random_weights(config, seed):
    """name -> float32 tensor for an unpruned checkpoint of `config`."""
    g = torch.Generator().manual_seed(seed)
    b, t, a = config["backbone"], config["tower"], config["audio"]
    H, Ht, K, cs = b["hidden_size"], t["hidden_size"], a["num_codebooks"], a["codebook_size"]
    w = {}

    def linear(name, out_features, in_features):
        w[name] = torch.randn(out_features, in_features, generator=g) / in_features**0.5

    def norm(name, size):
        w[name] = 1.0 + 0.1 * torch.randn(size, generator=g)

    def mlp(prefix, hidden, inner):
        linear(prefix + ".gate_proj.weight", inner, hidden)
        linear(prefix + ".up_proj.weight", inner, hidden)
        linear(prefix + ".down_proj.weight", hidden, inner)

    def layer(prefix, shape):
        hidden, hd = shape["hidden_size"], shape["head_dim"]
        norm(prefix + ".input_norm.weight", hidden)
        linear(prefix + ".attn.q_proj.weight", shape["num_heads"] * hd, hidden)
        linear(prefix + ".attn.k_proj.weight", shape["num_kv_heads"] * hd, hidden)
        linear(prefix + ".attn.v_proj.weight", shape["num_kv_heads"] * hd, hidden)
        linear(prefix + ".attn.o_proj.weight", hidden, shape["num_heads"] * hd)
        norm(prefix + ".attn.q_norm.weight", hd)
        norm(prefix + ".attn.k_norm.weight", hd)
        norm(prefix + ".post_attn_norm.weight", hidden)

    w["text_embed.weight"] = torch.randn(config["text"]["vocab_size"], H, generator=g)
    w["audio_embed.weight"] = torch.randn(K * (cs + 1), H, generator=g) / K**0.5
    moe = b["moe"]
    for l in range(b["num_layers"]):
        prefix = f"backbone.layers.{l}"
        layer(prefix, b)
        if l in moe["dense_layers"]:
            mlp(prefix + ".mlp", H, b["intermediate_size"])
            continue
        linear(prefix + ".mlp.router.weight", moe["num_experts"], H)
        w[prefix + ".mlp.router.weight"] *= 4.0  # confident routing, so routes differ by token
        for e in range(moe["num_experts"]):
            mlp(f"{prefix}.mlp.experts.{e}", H, moe["expert_intermediate_size"])
        if moe.get("shared_expert_intermediate_size", 0):
            mlp(prefix + ".mlp.shared_expert", H, moe["shared_expert_intermediate_size"])
            linear(prefix + ".mlp.shared_expert_gate.weight", 1, H)
    norm("backbone.norm.weight", H)
    linear("codebook0_head.weight", cs + 1, H)
    w["codebook0_head.weight"][a["eos_code"]] *= 0.0  # eos logit 0: greedy runs rarely stop early
    linear("tower.input_proj.weight", Ht, H)
    for l in range(t["num_layers"]):
        layer(f"tower.layers.{l}", t)
        mlp(f"tower.layers.{l}.mlp", Ht, t["intermediate_size"])
    norm("tower.norm.weight", Ht)
    w["tower.heads.weight"] = torch.randn(K - 1, cs, Ht, generator=g) / Ht**0.5
    return w


def write_checkpoint(directory, config, weights, use_nvfp4=True, kept=None, router_layout="full", shards=2):
    """Writes config.json (+ hf_quant_config.json), shards and the index. `kept` maps MoE layer ->
    kept original expert ids (pruning); router_layout "full" or "sliced"."""
    os.makedirs(directory)
    config = copy.deepcopy(config)
    tensors = {}
    for name, value in weights.items():
        parts = name.split(".")
        is_expert = ".mlp.experts." in name
        if is_expert and kept is not None and int(parts[4]) not in kept[int(parts[2])]:
            continue  # pruned away
        if name.endswith("mlp.router.weight") and kept is not None and router_layout == "sliced":
            value = value[kept[int(parts[2])]]
        if is_expert and use_nvfp4:
            prefix = name[: -len(".weight")]
            q, scale, scale_2 = nvfp4.quantize(value)
            tensors[prefix + ".weight"] = q
            tensors[prefix + ".weight_scale"] = ("F8_E4M3", scale)
            tensors[prefix + ".weight_scale_2"] = scale_2
        else:
            tensors[name] = value.to(torch.bfloat16)
    if kept is not None:
        config["backbone"]["moe"]["kept_experts"] = [
            kept.get(l) for l in range(config["backbone"]["num_layers"])]
    with open(os.path.join(directory, "config.json"), "w") as f:
        json.dump(config, f, indent=1)
    if use_nvfp4:
        with open(os.path.join(directory, "hf_quant_config.json"), "w") as f:
            json.dump({"quantization": {"quant_algo": "NVFP4", "group_size": 16, "exclude_modules": []}}, f)
    names = list(tensors)
    weight_map = {}
    for i in range(shards):
        shard = f"model-{i + 1:05d}-of-{shards:05d}.safetensors"
        part = {n: tensors[n] for n in names[i::shards]}
        safetensors_io.save(os.path.join(directory, shard), part)
        weight_map.update({n: shard for n in part})
    with open(os.path.join(directory, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": 0}, "weight_map": weight_map}, f)


def make_voice(model, frames=5, seed=3, transcript="hi there"):
    return {"codes": cli.random_codes(model, frames, seed), "transcript": transcript}


class TinyCheckpoints(unittest.TestCase):
    """One temporary directory for the whole class; checkpoints written once."""

    @classmethod
    def setUpClass(cls):
        torch.set_num_threads(1)
        print(f"\ntest_reference seed {SEED}", file=sys.stderr)
        cls.tmp = tempfile.mkdtemp(prefix="drama-reference-")
        cls.weights = random_weights(TINY_CONFIG, SEED)
        cls.full_dir = os.path.join(cls.tmp, "full")
        write_checkpoint(cls.full_dir, TINY_CONFIG, cls.weights)
        cls.model = drama3.Drama3(cls.full_dir)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp)

    def path(self, name):
        return os.path.join(self.tmp, name)


# ----------------------------------------------------------------------------------------------
# File formats and number formats


class SafetensorsTest(unittest.TestCase):
    def test_round_trip_keeps_dtypes_order_and_metadata(self):
        tensors = {
            "b": torch.randn(3, 5).to(torch.bfloat16),
            "a": torch.arange(6, dtype=torch.int32).reshape(2, 3),
            "s": ("F8_E4M3", torch.tensor([0x38, 0xB8], dtype=torch.uint8)),
            "scalar": torch.tensor(0.25),
        }
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "x.safetensors")
            safetensors_io.save(path, tensors, {"format": "test"})
            with open(path, "rb") as f:
                blob = f.read()
            (n,) = struct.unpack("<Q", blob[:8])
            self.assertEqual(n % 8, 0)
            header = json.loads(blob[8 : 8 + n])
            self.assertEqual([k for k in header if k != "__metadata__"], ["b", "a", "s", "scalar"])
            self.assertEqual(header["b"]["data_offsets"], [0, 30])
            loaded, metadata = safetensors_io.load(path)
            self.assertEqual(metadata, {"format": "test"})
            self.assertTrue(torch.equal(loaded["b"], tensors["b"]))
            self.assertTrue(torch.equal(loaded["a"], tensors["a"]))
            self.assertEqual(loaded["s"].dtype, torch.uint8)
            self.assertEqual(safetensors_io.read_dtypes(path)["s"], "F8_E4M3")
            self.assertEqual(loaded["scalar"].shape, torch.Size([]))

    def test_refuses_a_header_past_the_end(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "bad.safetensors")
            with open(path, "wb") as f:
                f.write(struct.pack("<Q", 1000) + b"{}")
            with self.assertRaisesRegex(ValueError, "runs past the end"):
                safetensors_io.load(path)

    def test_e4m3_decoding(self):
        raw = torch.tensor([0x00, 0x38, 0x40, 0x7E, 0x01, 0x08, 0xB8, 0x7F, 0xFF, 0x80], dtype=torch.uint8)
        got = safetensors_io.e4m3_to_float(raw)
        want = [0.0, 1.0, 2.0, 448.0, 2.0**-9, 2.0**-6, -1.0]
        self.assertEqual(got[:7].tolist(), want)
        self.assertTrue(torch.isnan(got[7]) and torch.isnan(got[8]))
        self.assertEqual(got[9].item(), 0.0)


class Nvfp4Test(unittest.TestCase):
    def test_dequantize_hand_made_values(self):
        # One row of 32 inputs: two blocks. Byte j holds element 2j (low) and 2j+1 (high).
        packed = torch.zeros(1, 16, dtype=torch.uint8)
        packed[0, 0] = 0x21  # elements 0, 1: codes 1 (0.5), 2 (1.0)
        packed[0, 1] = 0xF7  # elements 2, 3: codes 7 (6.0), 15 (-6.0)
        packed[0, 8] = 0x9B  # elements 16, 17: codes 11 (-1.5), 9 (-0.5)
        scales = torch.tensor([[0x38, 0x40]], dtype=torch.uint8)  # 1.0, 2.0
        w = nvfp4.dequantize(packed, scales, torch.tensor(0.5))
        self.assertEqual(w.shape, (1, 32))
        self.assertEqual(w[0, :4].tolist(), [0.25, 0.5, 3.0, -3.0])
        self.assertEqual(w[0, 16:18].tolist(), [-1.5, -0.5])
        self.assertEqual(w[0, 4:16].abs().sum().item(), 0.0)

    def test_e2m1_rounds_to_nearest_even_and_keeps_the_sign(self):
        x = torch.tensor([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 9.0, -0.1, 0.0, -2.9, 0.26])
        self.assertEqual(nvfp4.float_to_e2m1(x).tolist(), [0, 2, 2, 4, 4, 6, 6, 7, 8, 0, 13, 1])

    def test_e4m3_rounds_to_nearest_even_and_saturates(self):
        x = torch.tensor([1.0625, 1.1875, 500.0, -1.0, 2.0**-10, 1.5 * 2.0**-9])
        self.assertEqual(nvfp4.float_to_e4m3(x).tolist(), [0x38, 0x3A, 0x7E, 0xB8, 0x00, 0x02])

    def test_quantize_follows_modelopt(self):
        g = torch.Generator().manual_seed(SEED)
        w = torch.randn(6, 48, generator=g)
        w[2, 16:32] = 0.0  # an all-zero block: its scale is stored as 1.0
        q, scale, scale_2 = nvfp4.quantize(w)
        self.assertEqual((q.shape, scale.shape, scale_2.shape), ((6, 24), (6, 3), torch.Size([])))
        self.assertEqual(scale_2.item(), (w.abs().max() / torch.tensor(6.0 * 448.0)).item())
        self.assertEqual(scale[2, 1].item(), 0x38)
        back = nvfp4.dequantize(q, scale, scale_2)
        self.assertLess(((back - w).norm() / w.norm()).item(), 0.15)
        # Values already on the grid survive a second round trip unchanged.
        q2, scale2, scale_22 = nvfp4.quantize(back)
        self.assertTrue(torch.equal(nvfp4.dequantize(q2, scale2, scale_22), back))


class SamplingTest(unittest.TestCase):
    # Golden values printed by a small C++ program calling src/util/sampling.h.
    def test_counter_uniform_matches_cpp(self):
        self.assertEqual(sampling.counter_uniform(0, 0, 0), 0.21662948810239513)
        self.assertEqual(sampling.counter_uniform(1, 2, 3), 0.50189084443314369)
        self.assertEqual(sampling.counter_uniform(2**64 - 1, 7, 1), 0.54185246686330524)
        self.assertEqual(sampling.counter_uniform(12345, 100000, 7), 0.94321978627780745)

    def test_sample_logits_matches_cpp(self):
        logits = np.array([((i * 37) % 23 - 11) for i in range(40)], dtype=np.float32) * np.float32(0.37)
        want = ("18 18 18 18 18 18 18 18 18 18 18 18 18 18 18 18 36 31 18 18 18 18 18 18 18 8 18 18 16 21 "
                "18 18 13 36 18 18 18 18 18 18 8 8 18 18 26 26 13 18 34 16 36 18 18 18 18 18 18 31 13 18 "
                "36 31 36 18")
        got = []
        for t in (0.0, 0.7, 1.0, 1.3):
            for k in (0, 1, 5, 50):
                for p in (1.0, 0.9, 0.3, 0.0):
                    frame = int(np.float32(t) * np.float32(10)) + k
                    u = sampling.counter_uniform(42, frame, int(np.float32(p) * np.float32(10)))
                    got.append(sampling.sample_logits(logits, t, k, p, u))
        self.assertEqual(" ".join(map(str, got)), want)

    def test_ties_go_to_the_lower_id(self):
        flat = np.zeros(5, dtype=np.float32)
        self.assertEqual(sampling.sample_logits(flat, 0.0, 0, 1.0, 0.9), 0)
        self.assertEqual(sampling.sample_logits(flat, 1.0, 1, 1.0, 0.9), 0)
        self.assertEqual(sampling.sample_logits(flat, 1.0, 0, 1.0, 0.99), 4)
        self.assertEqual(sampling.sample_logits(flat, 1.0, 0, 0.3, 0.99), 1)
