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
        if is_expert and kept is not None and int(parts[5]) not in kept[int(parts[2])]:
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
        zero = nvfp4.quantize(torch.zeros(2, 16))
        self.assertEqual((zero[0].sum().item(), zero[1].tolist(), zero[2].item()), (0, [[0x38], [0x38]], 1.0))


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


# ----------------------------------------------------------------------------------------------
# The model


def prune_plan(config, keep):
    """Kept original ids per MoE layer: a different subset per layer."""
    moe = config["backbone"]["moe"]
    plan = {}
    for l in range(config["backbone"]["num_layers"]):
        if l not in moe["dense_layers"]:
            ids = list(range(moe["num_experts"]))
            plan[l] = ids[1 : keep + 1] if l % 2 else ids[-keep:]
    return plan


def mask_removed_experts(model, plan):
    """The unpruned model with the router logits of removed experts set to -inf (spec section 5)."""
    for l, kept in plan.items():
        mlp = model.backbone.layers[l].mlp
        mlp.logit_offset = torch.tensor([0.0 if e in kept else float("-inf") for e in mlp.original_ids])


class ModelTest(TinyCheckpoints):
    def test_pruned_checkpoint_equals_unpruned_with_removed_experts_masked(self):
        plan = prune_plan(TINY_CONFIG, keep=4)
        reference = drama3.Drama3(self.full_dir)
        mask_removed_experts(reference, plan)
        voice = make_voice(reference)
        codes = cli.random_codes(reference, 6, seed=11)
        want = drama3.teacher_forced_logits(reference, "Hello!", codes, voice)
        want_codes = drama3.generate(reference, "Hi", voice, seed=5, max_frames=4)
        for layout in ("full", "sliced"):
            with self.subTest(router_layout=layout):
                directory = self.path(f"pruned-{layout}")
                write_checkpoint(directory, TINY_CONFIG, self.weights, kept=plan, router_layout=layout)
                pruned = drama3.Drama3(directory)
                self.assertEqual(pruned.backbone.layers[1].mlp.original_ids, plan[1])
                got = drama3.teacher_forced_logits(pruned, "Hello!", codes, voice)
                for name in want:
                    self.assertTrue(torch.equal(got[name], want[name]), name)
                got_codes = drama3.generate(pruned, "Hi", voice, seed=5, max_frames=4)
                self.assertTrue(torch.equal(got_codes, want_codes))
        # The contract is not vacuous: masking changes the logits.
        plain = drama3.teacher_forced_logits(self.model, "Hello!", codes, voice)
        self.assertFalse(torch.equal(plain["cond.codebook0"], want["cond.codebook0"]))

    def test_top_k_ties_go_to_the_lower_original_id(self):
        mlp = drama3.MoeMlp.__new__(drama3.MoeMlp)
        mlp.original_ids, mlp.top_k, mlp.norm_topk_prob = [1, 3, 4, 5], 2, False
        mlp.router = torch.tensor([[1.0], [2.0], [2.0], [2.0]])
        mlp.logit_offset = torch.zeros(4)
        chosen, weights = mlp.route(torch.tensor([[1.0]]))
        self.assertEqual(chosen.tolist(), [[1, 2]])  # original ids 3 and 4, not 5
        self.assertEqual(weights[0, 0].item(), weights[0, 1].item())  # softmax probabilities (no renorm)
        self.assertLess(weights.sum().item(), 1.0)

    def test_greedy_generation_agrees_with_teacher_forced_logits(self):
        voice = make_voice(self.model)
        for with_voice, gamma in ((False, 1.5), (True, 1.0), (True, 2.0)):
            with self.subTest(voice=with_voice, gamma=gamma):
                v = voice if with_voice else None
                codes, logits = drama3.generate(self.model, "Say it.", v, seed=1, temperature=0.0,
                                                gamma=gamma, max_frames=6, return_logits=True)
                self.assertEqual(codes.shape, (6, 4))
                tf = drama3.teacher_forced_logits(self.model, "Say it.", codes, v)
                for key in ("codebook0", "tower"):
                    want = tf[f"cond.{key}"]
                    if with_voice and gamma != 1.0:
                        want = drama3.guide(tf[f"cond.{key}"], tf[f"uncond.{key}"], gamma)
                    torch.testing.assert_close(logits[key], want, atol=2e-5, rtol=2e-5)
                self.assertEqual(logits["codebook0"].argmax(-1).tolist(), codes[:, 0].tolist())
                self.assertEqual(logits["tower"].argmax(-1).tolist(), codes[:, 1:].tolist())

    def test_gamma_one_runs_the_conditional_branch_only(self):
        voice = make_voice(self.model)
        calls = []
        original = self.model.run_backbone
        self.model.run_backbone = lambda x, cache: calls.append(x.shape[0]) or original(x, cache)
        try:
            one = drama3.generate(self.model, "Go", voice, seed=9, gamma=1.0, max_frames=3)
            self.assertEqual(len(calls), 1 + 2)  # prompt + two frames, one branch
            calls.clear()
            guided = drama3.generate(self.model, "Go", voice, seed=9, gamma=3.0, max_frames=3)
            self.assertEqual(len(calls), 2 * (1 + 2))
        finally:
            del self.model.run_backbone
        self.assertFalse(torch.equal(one, guided))

    def test_sampling_is_deterministic_per_seed(self):
        voice = make_voice(self.model)
        a = drama3.generate(self.model, "Again", voice, seed=77, temperature=1.0, top_k=10, max_frames=5)
        b = drama3.generate(self.model, "Again", voice, seed=77, temperature=1.0, top_k=10, max_frames=5)
        c = drama3.generate(self.model, "Again", voice, seed=78, temperature=1.0, top_k=10, max_frames=5)
        self.assertTrue(torch.equal(a, b))
        self.assertFalse(torch.equal(a, c))
        self.assertTrue(bool((a >= 0).all() and (a < 32).all()))

    def test_eos_ends_the_utterance_without_emitting_its_frame(self):
        original = self.model.codebook0_logits
        counter = {"frame": 0}

        def eos_at_third_frame(h):
            logits = original(h).clone()
            if counter["frame"] == 2:
                logits[self.model.eos_code] = 1e4
            return logits

        def step_counter(x, cache):
            counter["frame"] += 1
            return drama3.Drama3.run_backbone(self.model, x, cache)

        self.model.codebook0_logits = eos_at_third_frame
        self.model.run_backbone = step_counter  # prompt = 0 -> 1; then one call per frame
        counter["frame"] = -1
        try:
            codes = drama3.generate(self.model, "Stop", None, seed=1, temperature=0.0, max_frames=10)
        finally:
            del self.model.codebook0_logits, self.model.run_backbone
        self.assertEqual(codes.shape, (2, 4))

    def test_frames_embed_the_sum_of_their_codebooks(self):
        m = self.model
        row = m.embed_frames([[1, 2, 3, 4]])[0]
        want = sum(m.audio_embed[k * 33 + c] for k, c in enumerate([1, 2, 3, 4]))
        torch.testing.assert_close(row, want)

    def test_refuses_inconsistent_pruned_checkpoints(self):
        plan = prune_plan(TINY_CONFIG, keep=3)
        directory = self.path("pruned-broken")
        write_checkpoint(directory, TINY_CONFIG, self.weights, kept=plan, use_nvfp4=False, shards=1)
        config_path = os.path.join(directory, "config.json")
        with open(config_path) as f:
            config = json.load(f)
        layer = sorted(plan)[0]
        listed = config["backbone"]["moe"]["kept_experts"][layer]
        removed = next(e for e in range(6) if e not in listed)
        config["backbone"]["moe"]["kept_experts"][layer] = sorted(listed[1:] + [removed])
        with open(config_path, "w") as f:
            json.dump(config, f)
        with self.assertRaisesRegex(ValueError, rf"layer {layer} experts differ.*missing \[{removed}\]"
                                                rf".*not listed \[{listed[0]}\]"):
            drama3.Drama3(directory)

    def test_refuses_a_router_of_the_wrong_size(self):
        directory = self.path("bad-router")
        weights = dict(self.weights)
        weights["backbone.layers.1.mlp.router.weight"] = weights["backbone.layers.1.mlp.router.weight"][:5]
        write_checkpoint(directory, TINY_CONFIG, weights, use_nvfp4=False, shards=1)
        with self.assertRaisesRegex(ValueError, "router.weight has 5 rows"):
            drama3.Drama3(directory)

    def test_refuses_an_incomplete_nvfp4_triple(self):
        directory = self.path("bad-nvfp4")
        write_checkpoint(directory, TINY_CONFIG, self.weights, shards=1)
        path = os.path.join(directory, "model-00001-of-00001.safetensors")
        tensors, _ = safetensors_io.load(path)
        kinds = safetensors_io.read_dtypes(path)
        name = "backbone.layers.2.mlp.experts.3.up_proj.weight_scale_2"
        del tensors[name]
        safetensors_io.save(path, {n: (kinds[n], t) for n, t in tensors.items()})
        with open(os.path.join(directory, "model.safetensors.index.json")) as f:
            index = json.load(f)
        del index["weight_map"][name]
        with open(os.path.join(directory, "model.safetensors.index.json"), "w") as f:
            json.dump(index, f)
        with self.assertRaisesRegex(ValueError, "lacks " + name.replace(".", r"\.")):
            drama3.Drama3(directory)


class CliTest(TinyCheckpoints):
    def run_cli(self, *args):
        self.assertEqual(cli.main([str(a) for a in args]), 0)

    def test_subcommands_write_files_the_engine_reads(self):
        voice, codes, logits, generated = (self.path(n) for n in ("v.st", "c.st", "l.st", "g.st"))
        self.run_cli("make-voice", "--checkpoint", self.full_dir, "--frames", 4, "--seed", 2,
                     "--transcript", "Reference words.", "-o", voice)
        self.run_cli("random-codes", "--checkpoint", self.full_dir, "--frames", 5, "--seed", 3, "-o", codes)
        self.run_cli("logits", "--checkpoint", self.full_dir, "--text", "Target", "--voice", voice,
                     "--codes", codes, "-o", logits)
        self.run_cli("generate", "--checkpoint", self.full_dir, "--text", "Target", "--voice", voice,
                     "--seed", 4, "--temperature", 0.9, "--top-k", 20, "--top-p", 0.95, "--gamma", 1.5,
                     "--max-frames", 3, "-o", generated)
        v, meta = safetensors_io.load(voice)
        self.assertEqual((meta["format"], meta["transcript"], meta["codec_sha256"]), ("drama-voice/1", "Reference words.", ""))
        self.assertEqual((v["codes"].dtype, tuple(v["codes"].shape)), (torch.int32, (4, 4)))
        out, _ = safetensors_io.load(logits)
        self.assertEqual({n: tuple(t.shape) for n, t in out.items()},
                         {"cond.codebook0": (5, 33), "cond.tower": (5, 3, 32),
                          "uncond.codebook0": (5, 33), "uncond.tower": (5, 3, 32)})
        self.assertTrue(all(t.dtype == torch.float32 for t in out.values()))
        g, meta = safetensors_io.load(generated)
        self.assertEqual((meta["format"], g["codes"].dtype, g["codes"].shape[1]), ("drama-codes/1", torch.int32, 4))

    def test_refusals_exit_1_with_one_line(self):
        codes = self.path("codes-for-refusal.st")
        self.run_cli("random-codes", "--checkpoint", self.full_dir, "--frames", 2, "--seed", 3, "-o", codes)
        args = ["logits", "--checkpoint", self.full_dir, "--text", "x", "--voice", codes, "--codes", codes,
                "-o", self.path("never.st")]
        self.assertEqual(cli.main(args), 1)  # a codes file is not a voice file
        self.assertFalse(os.path.exists(self.path("never.st")))

    def test_entry_point_runs_as_a_script(self):
        out = self.path("script-codes.st")
        result = subprocess.run([sys.executable, os.path.join(HERE, "cli.py"), "random-codes", "--checkpoint",
                                 self.full_dir, "--frames", "2", "--seed", "1", "-o", out],
                                capture_output=True, text=True)
        self.assertEqual(result.returncode, 0, result.stderr)

    def test_bad_arguments_exit_2(self):
        with self.assertRaises(SystemExit) as exit_info:
            cli.main(["generate", "--checkpoint", self.full_dir, "-o", self.path("x.st")])
        self.assertEqual(exit_info.exception.code, 2)


class BuildingBlocksTest(TinyCheckpoints):
    """The vectorised blocks against plain loops written straight from the spec's words."""

    def test_rope_rotates_first_half_against_second_half(self):
        x = torch.arange(1.0, 9.0).reshape(1, 1, 8)
        got = drama3.rope(x, torch.tensor([3]), 100.0)[0, 0]
        for i in range(4):
            angle = 3 * 100.0 ** (-2 * i / 8)
            c, s = np.cos(angle), np.sin(angle)
            self.assertAlmostEqual(got[i].item(), x[0, 0, i].item() * c - x[0, 0, i + 4].item() * s, places=5)
            self.assertAlmostEqual(got[i + 4].item(), x[0, 0, i + 4].item() * c + x[0, 0, i].item() * s, places=5)

    def test_attention_matches_a_loop_over_heads_and_positions(self):
        attn = self.model.backbone.layers[1].attn
        g = torch.Generator().manual_seed(SEED)
        h = torch.randn(5, 32, generator=g, dtype=torch.float64)
        cache = drama3.KVCache(3)
        first = attn(h[:2].float(), cache, 1)
        cache.length = 2  # Transformer.forward advances it after its last layer
        got = torch.cat([first, attn(h[2:].float(), cache, 1)])  # chunked through the KV cache

        def rms(v, w):
            return v / np.sqrt((v * v).mean() + attn.eps) * w

        def rot(v, pos):
            half = len(v) // 2
            out = np.empty_like(v)
            for i in range(half):
                a = pos * attn.theta ** (-2 * i / len(v))
                out[i] = v[i] * np.cos(a) - v[i + half] * np.sin(a)
                out[i + half] = v[i + half] * np.cos(a) + v[i] * np.sin(a)
            return out

        W = {n: getattr(attn, n).double().numpy() for n in ("q", "k", "v", "o", "q_norm", "k_norm")}
        hd, group = attn.head_dim, attn.heads // attn.kv_heads
        want = np.zeros((5, 32))
        for t in range(5):
            heads = []
            for head in range(attn.heads):
                kv = head // group
                q = rot(rms(W["q"][head * hd : (head + 1) * hd] @ h[t].numpy(), W["q_norm"]), t)
                scores, values = [], []
                for j in range(t + 1):  # causal: keys at positions <= t
                    k = rot(rms(W["k"][kv * hd : (kv + 1) * hd] @ h[j].numpy(), W["k_norm"]), j)
                    scores.append(q @ k / np.sqrt(hd))
                    values.append(W["v"][kv * hd : (kv + 1) * hd] @ h[j].numpy())
                p = np.exp(np.array(scores) - max(scores))
                heads.append((p / p.sum()) @ np.array(values))
            want[t] = W["o"] @ np.concatenate(heads)
        np.testing.assert_allclose(got.numpy(), want, atol=2e-5, rtol=1e-4)

    def test_moe_matches_a_loop_over_tokens(self):
        mlp = self.model.backbone.layers[2].mlp
        g = torch.Generator().manual_seed(SEED + 1)
        h = torch.randn(4, 32, generator=g)
        got = mlp(h)
        for t in range(4):
            logits = [float(mlp.router[s] @ h[t]) for s in range(6)]
            p = np.exp(np.array(logits) - max(logits))
            p /= p.sum()
            top = sorted(range(6), key=lambda s: (-p[s], s))[:2]
            weights = p[top] / p[top].sum()
            want = sum(w * mlp.experts[s](h[t : t + 1])[0] for w, s in zip(weights, top))
            want = want + torch.sigmoid(mlp.shared_gate @ h[t]) * mlp.shared_expert(h[t : t + 1])[0]
            torch.testing.assert_close(got[t], want.float(), atol=1e-5, rtol=1e-5)

    def test_prompt_layout(self):
        m = self.model
        voice = make_voice(m, frames=3, transcript="ab")
        cond = m.prompt("xyz", voice)
        uncond = m.prompt("xyz")
        text = m.text_embed
        self.assertEqual((cond.shape[0], uncond.shape[0]), (4 + 3 + 5, 5))
        expected_text = [256, ord("a"), ord("b"), 257]
        self.assertTrue(torch.equal(cond[:4], text[expected_text]))
        self.assertTrue(torch.equal(cond[4:7], m.embed_frames(voice["codes"])))
        self.assertTrue(torch.equal(cond[7:], uncond))
        self.assertTrue(torch.equal(uncond, text[[256, ord("x"), ord("y"), ord("z"), 257]]))
        self.assertEqual(m.prompt("é").shape[0], 4)  # UTF-8 bytes: two for é
