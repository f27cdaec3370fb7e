"""Self-tests of tools/train/ on CPU (torch 1.13 here, 2.x on the GPU machine), a few seconds
each; tests/train/test_train_smoke.cpp runs them in CTest.

- The layouts equal the tensors `drama make-checkpoint` writes for the same config ($DRAMA_BIN).
- The batched training forward gives the reference's teacher-forced logits (tools/reference/
  drama3.py) on the exported checkpoint, and the training codec decodes as tools/reference/mimi.py.
- A few steps of every stage run on a tiny synthetic corpus, resume from their saved state, and
  the export loads and speaks in `drama` (quantize, then say).
- bundle.py turns that state into a bundled model with built-in voices, whose pinned manifest
  verifies it; `drama say` with a built-in voice gives the same bytes twice; it refuses an
  existing destination and a model over its size limit, leaving nothing behind."""

import contextlib
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "reference"))
sys.path.insert(0, os.path.join(HERE, "..", "corpus"))

import audio  # noqa: E402
import bundle  # noqa: E402
import codec as codec_lib  # noqa: E402
import data  # noqa: E402
import drama3  # noqa: E402
import layout  # noqa: E402
import mimi  # noqa: E402
import model as model_lib  # noqa: E402
import safetensors_io  # noqa: E402
import state as state_lib  # noqa: E402
import train  # noqa: E402

TINY = os.path.join(HERE, "tiny.json")
DRAMA = os.environ.get("DRAMA_BIN")
TEXTS = ["The cat sat on the mat.", "Dr. Smith has 3 dogs, really!", "I can breathe better now",
         "Exhale when you lift the weight", "She sighed sadly at the table"]


DECODER = train.load_json(os.path.join(HERE, "recipe-25.json"))["decoder"]


def tiny_config():
    with open(TINY) as f:
        return json.load(f)


def relative_l2(a, b):
    return float((a - b).norm() / b.norm().clamp(min=1e-30))


def cpu_args(work, corpus, *sets):
    """train.py arguments for a few tiny CPU steps on write_corpus's corpus, plus `--set` of each
    KEY=VALUE in sets (in order: a later one overrides)."""
    args = ["--work", work, "--corpus", corpus, "--config", TINY, "--threads", "1", "--device", "cpu",
            "--set", "codec.batch=2", "--set", "codec.seconds=0.4"]
    for item in sets:
        args += ["--set", item]
    return args


def write_corpus(folder):
    """2 speakers x 5 utterances of 1-1.6 s tone sweeps (24 kHz), the last one of each held out."""
    os.makedirs(os.path.join(folder, "wav"), exist_ok=True)
    rows = ["speaker\tsentence\tsplit\tseconds\tpath\ttext\n"]
    g = torch.Generator().manual_seed(5)
    for s in range(2):
        for i, text in enumerate(TEXTS):
            n = 24000 + 4800 * (i % 3)
            t = torch.arange(n) / 24000.0
            f0 = 120.0 + 60 * s + 20 * i
            x = 0.3 * torch.sin(2 * math.pi * f0 * t * (1 + 0.2 * t)) + 0.01 * torch.randn(n, generator=g)
            rel = f"wav/s{s}-{i}.wav"
            audio.write_wav(os.path.join(folder, rel), x.numpy(), 24000)
            split = "heldout" if i == len(TEXTS) - 1 else "train"
            rows.append(f"spk{s}\tu{i}\t{split}\t{n / 24000:.3f}\t{rel}\t{text}\n")
    with open(os.path.join(folder, "corpus.tsv"), "w") as f:
        f.writelines(rows)


class Layouts(unittest.TestCase):
    @unittest.skipUnless(DRAMA, "DRAMA_BIN is not set")
    def test_layouts_equal_make_checkpoint(self):
        # The tiny config, drama-mini's, its 25 frames/s variant (codec strides 8, 6, 5, 2: the
        # engine derives the frame rate from them; make-checkpoint refuses a config whose audio
        # frame_rate disagrees), its 16-codebook variant and the wider codecs (32 filters, 2
        # residual layers) at 12.5 and 25 frames/s.
        for path in (TINY, os.path.join(HERE, "drama-mini.json"),
                     os.path.join(HERE, "drama-mini-25.json"),
                     os.path.join(HERE, "drama-mini-16q.json"),
                     os.path.join(HERE, "drama-mini-wide.json"),
                     os.path.join(HERE, "drama-mini-wide-25.json")):
            with open(path) as f:
                config = json.load(f)
            with tempfile.TemporaryDirectory() as tmp, self.subTest(config=os.path.basename(path)):
                out = os.path.join(tmp, "ckpt")
                subprocess.run([DRAMA, "make-checkpoint", "--config", path, "--seed", "1", "-o", out],
                               check=True, capture_output=True)
                tensors, _ = safetensors_io.load_dir(out)
                mine = {n: s for n, s, _ in layout.drama3_layout(config)}
                self.assertEqual(mine, {n: list(t.shape) for n, t in tensors.items()})
                codec, _ = safetensors_io.load(os.path.join(out, "codec", "model.safetensors"))
                mine = {n: s for n, s, _ in layout.mimi_layout(config["codec"])}
                self.assertEqual(mine, {n: list(t.shape) for n, t in codec.items()})


class Parity(unittest.TestCase):
    def test_training_forward_equals_reference_logits(self):
        config = tiny_config()
        m = model_lib.Drama3Train(config, 3)
        m.load({n: t.to(torch.bfloat16).float() for n, t in m.tensors().items()})  # as exported
        g = torch.Generator().manual_seed(2)
        k, cs = config["audio"]["num_codebooks"], config["audio"]["codebook_size"]
        ref = {"tokens": data.text_tokens(config, TEXTS[1]), "codes": torch.randint(0, cs, (4, k), generator=g).tolist()}
        target = {"tokens": data.text_tokens(config, TEXTS[0]), "codes": torch.randint(0, cs, (5, k), generator=g).tolist()}
        with tempfile.TemporaryDirectory() as tmp:
            os.makedirs(os.path.join(tmp, "codec"))
            with open(os.path.join(tmp, "config.json"), "w") as f:
                json.dump({k_: v for k_, v in config.items() if k_ != "codec"}, f)
            safetensors_io.save(os.path.join(tmp, "model.safetensors"),
                                {n: t.to(torch.bfloat16) for n, t in m.tensors().items()})
            reference = drama3.Drama3(tmp)
            for voice in (ref, None):
                batch = data.collate(config, [(voice, target)], "cpu")
                with torch.no_grad():
                    out = m.forward(batch)
                v = None if voice is None else {"transcript": TEXTS[1], "codes": torch.tensor(ref["codes"])}
                expected = drama3.branch_logits(reference, reference.prompt(TEXTS[0], v),
                                                torch.tensor(target["codes"]))
                self.assertLess(relative_l2(out["logits0"][:5], expected["codebook0"]), 1e-5)
                tower = out["logits_tower"][out["tower_rows"]]  # the rows of real frames
                self.assertLess(relative_l2(tower, expected["tower"]), 1e-5)

    def test_forward_and_backward_run_under_bf16_autocast(self):
        """The CUDA path trains under bf16 autocast; the CPU's autocast exercises the same casts."""
        config = tiny_config()
        m = model_lib.Drama3Train(config, 1)
        g = torch.Generator().manual_seed(0)
        codes = lambda n: torch.randint(0, 64, (n, 8), generator=g).tolist()  # noqa: E731
        batch = data.collate(config, [({"tokens": [1, 2], "codes": codes(3)}, {"tokens": [4], "codes": codes(4)}),
                                      (None, {"tokens": [5, 6], "codes": codes(2)})], "cpu")
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out = m.forward(batch)
        (out["codebook0"] + out["tower"] + 0.01 * out["balance"]).backward()
        for name in ("codebook0_head.weight", "tower.heads.weight", "audio_embed.weight"):
            grad = m.params[name].grad
            self.assertTrue(grad is not None and bool(torch.isfinite(grad).all()), name)
        self.assertTrue(torch.isfinite(out["codebook0"]))

    @unittest.skipUnless(model_lib.HAS_SDPA, "torch without scaled_dot_product_attention (< 2.0)")
    def test_fused_attention_equals_attention_as_written(self):
        """The GPU's fused causal attention (sdpa) gives the explicit path's losses and gradients
        (run on the GPU machine's torch 2.x; Debian's torch 1.13 has no sdpa), padding included."""
        config = tiny_config()
        g = torch.Generator().manual_seed(4)
        codes = lambda n: torch.randint(0, 64, (n, 8), generator=g)  # noqa: E731
        examples = [({"tokens": [1, 2, 3], "codes": codes(3)}, {"tokens": [4], "codes": codes(4)}),
                    (None, {"tokens": [5, 6], "codes": codes(2)})]
        batch = data.collate(config, examples, "cpu", pad_to=(20, 16))
        grads = {}
        for kind in ("explicit", "sdpa"):
            m = model_lib.Drama3Train(config, 5, "cpu", kind)
            out = m.forward(batch)
            (out["codebook0"] + out["tower"]).backward()
            grads[kind] = (out, {n: p.grad for n, p in m.params.items()})
        (a, ga), (b, gb) = grads["explicit"], grads["sdpa"]
        for name in ("logits0", "logits_tower"):
            self.assertLess(relative_l2(b[name], a[name]), 1e-5, name)
        for name in ("backbone.layers.1.attn.q_proj.weight", "tower.layers.0.attn.k_proj.weight"):
            self.assertLess(relative_l2(gb[name], ga[name]), 1e-4, name)

    def test_sdpa_is_refused_where_torch_lacks_it(self):
        if model_lib.HAS_SDPA:
            self.skipTest("this torch has sdpa")
        with self.assertRaisesRegex(ValueError, "sdpa"):
            model_lib.Drama3Train(tiny_config(), 1, "cpu", "sdpa")

    def test_training_codec_decodes_as_the_reference(self):
        config = tiny_config()
        c = codec_lib.Codec(config["codec"], 4)
        g = torch.Generator().manual_seed(1)
        codes = torch.randint(0, config["codec"]["codebook_size"], (6, 8), generator=g)
        ref = mimi.Mimi(None, mimi.config_from_dict(config["codec"]), c.tensors())
        with torch.no_grad():
            self.assertLess(relative_l2(c.decode(codes[None])[0], ref.decode(codes)), 1e-6)
            x = torch.randn(1, 9600, generator=g) * 0.1
            mine = c.encode(x)[0]
            theirs, margin = ref.encode(x[0], 8)
            near_tie = margin < 1e-4
            self.assertTrue(torch.equal(mine[~near_tie], theirs.long()[~near_tie]))


class Encode(unittest.TestCase):
    def test_batched_encode_equals_one_at_a_time(self):
        """train.py's encode pads utterances to whole frames and batches them: each one's codes
        are those it gets alone, padded to whole frames (the codec is causal; no layer pads
        differently)."""
        config = tiny_config()
        c = codec_lib.Codec(config["codec"], 6)
        g = torch.Generator().manual_seed(5)
        c.forward(torch.randn(2, 9600, generator=g) * 0.1, 8)  # initialise the codebooks
        hop = round(config["audio"]["sample_rate"] / config["audio"]["frame_rate"])
        lengths = [hop * 3, hop * 5 - 7, hop * 2 + 100]
        waves = [torch.randn(n, generator=g) * 0.1 for n in lengths]
        frames = [-(-n // hop) for n in lengths]
        x = torch.zeros(len(waves), max(frames) * hop)
        for j, w in enumerate(waves):
            x[j, :len(w)] = w
        batched = c.encode(x)
        for j, w in enumerate(waves):
            alone = c.encode(torch.nn.functional.pad(w, (0, frames[j] * hop - len(w)))[None])[0]
            self.assertEqual(alone.shape[0], frames[j])
            self.assertTrue(torch.equal(batched[j, :frames[j]], alone), j)


class PlainSgd:
    """p -= 1e-4 grad, without host reads: a stand-in for AdamW(capturable=True), which CPU
    torch cannot run (its own reads are torch's)."""

    def __init__(self, params):
        self.params = list(params)

    def zero_grad(self, set_to_none=True):
        for p in self.params:
            p.grad = None

    @torch.no_grad()
    def step(self):
        for p in self.params:
            if p.grad is not None:
                p.sub_(1e-4 * p.grad)


@contextlib.contextmanager
def no_host_reads():
    """Every read of a tensor's value on the host raises inside (what a CUDA graph forbids)."""
    def refuse(*_args, **_kwargs):
        raise AssertionError("a host read inside the step")
    names = ("item", "tolist", "numpy", "__bool__", "__int__", "__float__")
    saved = {n: getattr(torch.Tensor, n) for n in names}
    try:
        for n in names:
            setattr(torch.Tensor, n, refuse)
        yield
    finally:
        for n, f in saved.items():
            setattr(torch.Tensor, n, f)


class GraphSafety(unittest.TestCase):
    def test_codec_step_reads_nothing_from_the_host(self):
        """The codec step is captured as a CUDA graph on the GPU (tools/train/cuda_graph.py):
        after its first call (k-means initialisation) it must not read a tensor's value on the
        host. Checked here by making every such read raise. (The optimizer is a stand-in: on the
        GPU it is AdamW(capturable=True), which CPU torch cannot run; its own reads are torch's.)"""
        config = tiny_config()
        recipe = train.load_json(os.path.join(HERE, "recipe.json"))
        r = dict(recipe["codec"], disc_channels=4, disc_batch=1)
        c = codec_lib.Codec(config["codec"], 4)
        disc = codec_lib.StftDiscriminator(4)

        opt, opt_d = PlainSgd(c.params.values()), PlainSgd(disc.parameters())
        fn = train.codec_step_fn(c, disc, opt, opt_d, codec_lib.SpectralLoss(24000), r)
        g = torch.Generator().manual_seed(3)
        x = lambda: torch.randn(2, 9600, generator=g) * 0.1  # noqa: E731
        fn(False, {"x": x(), "keep": c.keep_mask(8)})  # initialises the codebooks
        fn(True, {"x": x(), "keep": c.keep_mask(8)})  # optimizer state of the discriminator

        with no_host_reads():
            for adv, n_q in ((False, 3), (True, 1), (True, 8)):
                out = fn(adv, {"x": x(), "keep": c.keep_mask(n_q)})
        self.assertTrue(all(bool(torch.isfinite(v)) for v in out.values()))

    def test_decoder_step_reads_nothing_from_the_host_and_trains_only_decoding(self):
        """The decoder stage's step (both discriminators) captures as the codec's does, and its
        optimizer holds only the tensors encode() never reads."""
        config = tiny_config()
        r = dict(DECODER, disc_channels=4, mpd_channels=4, disc_batch=1)
        c, disc, _, _, _, _, names = train.decoder_trainer(config, {"seed": 4}, r, "cpu", False)
        self.assertTrue(names and all(n.startswith(("decoder", "upsample", "quantizer.")) for n in names))
        self.assertTrue(all(n.endswith("output_proj.weight") for n in names if n.startswith("quantizer.")))
        self.assertEqual({n for n, p in c.params.items() if p.requires_grad}, set(names))
        self.assertEqual(list(disc.parts), ["stft", "mpd"])
        opt, opt_d = PlainSgd([c.params[n] for n in names]), PlainSgd(disc.parameters())
        fn = train.codec_step_fn(c, disc, opt, opt_d, codec_lib.SpectralLoss(24000), r, decoder_only=True)
        g = torch.Generator().manual_seed(3)
        x = lambda: torch.randn(2, 9600, generator=g) * 0.1  # noqa: E731
        keep = c.keep_mask(8)
        fn(True, {"x": x(), "keep": keep})
        with no_host_reads():
            out = fn(True, {"x": x(), "keep": keep})
        self.assertTrue(all(bool(torch.isfinite(v)) for v in out.values()))

    def test_model_step_reads_nothing_from_the_host_and_padding_changes_no_loss(self):
        config = tiny_config()
        m = model_lib.Drama3Train(config, 2)
        g = torch.Generator().manual_seed(6)
        codes = lambda n: torch.randint(0, 64, (n, 8), generator=g)  # noqa: E731
        examples = [({"tokens": [1, 2, 3], "codes": codes(3)}, {"tokens": [4], "codes": codes(4)}),
                    (None, {"tokens": [5, 6], "codes": codes(2)})]
        plain = data.collate(config, examples, "cpu")
        padded = data.collate(config, examples, "cpu", pad_to=(20, 16))
        with torch.no_grad():
            a, b = m.forward(plain), m.forward(padded)
        for name in ("codebook0", "tower"):
            self.assertLess(abs(float(a[name]) - float(b[name])), 1e-5 * abs(float(a[name])), name)

        fn = train.model_step_fn(m, PlainSgd(m.params.values()), {"balance_weight": 0.01},
                                 autocast=False, graphed=True)
        with no_host_reads():
            out = fn(None, padded)
        self.assertTrue(all(bool(torch.isfinite(v)) for v in out.values()))

    def test_kept_codebooks_alone_make_the_embedding(self):
        """Quantizer dropout by mask: with n_q kept, the embedding is the first n_q codes' sum
        through the output projections, as decode() makes it from those codes."""
        config = tiny_config()
        c = codec_lib.Codec(config["codec"], 5)
        g = torch.Generator().manual_seed(4)
        pcm = torch.randn(1, 9600, generator=g) * 0.1
        c.forward(pcm, 8)  # initialise
        with torch.no_grad():
            e = c.encode_latent(pcm)
            for n_q in (1, 2, 5):
                emb, codes, _, _ = c.quantize(e, n_q, False)
                expected = 0.0
                for prefix, first, count in c.model.rvq_parts(n_q):
                    if count <= 0:
                        continue
                    q = sum(c._codebook(prefix, i)[codes[..., first + i]] for i in range(count))
                    expected = expected + c.model.project(q.transpose(1, 2), prefix + ".output_proj.weight")
                self.assertLess(relative_l2(emb, expected), 1e-6, n_q)


class Sampler(unittest.TestCase):
    def test_reseeded_sampler_draws_what_a_new_one_draws(self):
        utterances = [{"speaker": f"s{i % 3}", "tokens": [i], "codes": [[0] * 8] * (i % 7 + 1)}
                      for i in range(30)]
        one = data.PairSampler(utterances, 0, 0.3, 5)
        for seed in (11, 12, 11):
            fresh = data.PairSampler(utterances, seed, 0.3, 5).batch(6)
            self.assertEqual(one.reseed(seed).batch(6), fresh)


class Batches(unittest.TestCase):
    def utterances(self):
        return [{"speaker": f"s{i % 3}", "tokens": [1] * (i % 5 + 1), "codes": [[0] * 8] * (i % 7 + 1)}
                for i in range(60)]

    def test_one_step_a_draw_is_the_batches_of_runs_1_to_5(self):
        sampler = data.PairSampler(self.utterances(), 0, 0.3, 6)
        for step in (0, 7, 3):
            mine = data.step_batch(sampler, 100, step, 4)
            self.assertEqual(mine, data.PairSampler(self.utterances(), 100 + step, 0.3, 6).batch(4))

    def test_grouped_batches_partition_one_draw_by_length_and_depend_on_their_step_alone(self):
        utterances = self.utterances()
        sampler = data.PairSampler(utterances, 0, 0.3, 6)
        group, size = 4, 5
        batches = {s: data.step_batch(sampler, 9, s, size, group) for s in (6, 4, 7, 5)}  # out of order
        again = {s: data.step_batch(sampler, 9, s, size, group) for s in (4, 5, 6, 7)}
        self.assertEqual(batches, again)
        pool = data.PairSampler(utterances, 9 + 4, 0.3, 6).batch(size * group)
        drawn = sorted(id(e[1]) for b in batches.values() for e in b)
        self.assertEqual(drawn, sorted(id(e[1]) for e in pool))
        spans = sorted((min(map(data.example_positions, b)), max(map(data.example_positions, b)))
                       for b in batches.values())
        for (_, hi), (lo, _) in zip(spans, spans[1:]):
            self.assertLessEqual(hi, lo)  # sorted by length: the batches do not overlap

    def test_padded_shape_holds_every_batch_it_is_given(self):
        config = tiny_config()
        g = torch.Generator().manual_seed(3)
        utterances = [{"speaker": f"s{i % 2}", "tokens": [1] * (i % 9 + 1),
                       "codes": torch.randint(0, 64, (i % 11 + 1, 8), generator=g)} for i in range(40)]
        sampler = data.PairSampler(utterances, 0, 0.2, 11)
        for step in range(12):
            examples = data.step_batch(sampler, 0, step, 3, 4)
            positions, rows = data.padded_shape(examples, 8, 48, 11)
            self.assertEqual(positions % 8, 0)
            self.assertGreaterEqual(positions, max(map(data.example_positions, examples)))
            batch = data.collate(config, examples, "cpu", (positions, rows))  # raises if short
            self.assertEqual(tuple(batch["tokens"].shape), (3, positions))
        self.assertEqual(data.padded_shape(examples, 0, 48, 11), (48, 3 * 12))


class Monitor(unittest.TestCase):
    def test_best_weights_and_patience_carry_across_chunks(self):
        config = train.load_json(TINY)
        utterances = [{"key": f"s{s}.{i}", "speaker": f"s{s}", "split": "heldout" if i == 0 else "train",
                       "tokens": [1, 2, 3], "codes": torch.zeros(3, 8, dtype=torch.int64)}
                      for s in range(2) for i in range(3)]
        r = {"eval_every": 10, "patience": 2}
        m = model_lib.Drama3Train(config, 1, "cpu")
        with tempfile.TemporaryDirectory() as folder:
            def monitor(sequence):
                mon = train.HeldoutMonitor(folder, config, r, utterances, 1, "cpu")
                self.assertEqual(len(mon.pairs["heldout"]), 2)
                for ref, target in mon.pairs["heldout"]:  # a training reference of its speaker
                    self.assertEqual((ref["split"], ref["speaker"]), ("train", target["speaker"]))
                values = iter(sequence)
                mon.losses = lambda _m, pairs: next(values) if pairs is mon.pairs["heldout"] else loss(0.5)
                return mon

            def loss(x):
                return {"codebook0": x, "tower": 0.0}

            mon = monitor([loss(3.0), loss(9.0), loss(2.0), loss(9.0), loss(1.0), loss(9.0)])
            self.assertFalse(mon.due(5))
            self.assertTrue(mon.due(10))
            self.assertFalse(mon.evaluate(m, 10))  # best: 3 at step 10
            self.assertFalse(mon.evaluate(m, 20))  # one without a better loss
            self.assertFalse(mon.evaluate(m, 30))  # best: 2 at step 30
            mon.save()
            # The next chunk reads the best and the evaluations since it from the files.
            mon = monitor([loss(9.0), loss(9.0), loss(9.0)])
            self.assertEqual((mon.best_step, mon.best_loss, mon.since), (30, 2.0, 0))
            self.assertFalse(mon.evaluate(m, 40))
            mon.save()
            mon = monitor([loss(9.0), loss(9.0)])
            self.assertEqual(mon.since, 1)
            self.assertTrue(mon.evaluate(m, 50))  # patience 2 spent: stop
            tensors, info = state_lib.load(os.path.join(folder, "best"))
            self.assertEqual((info["step"], info["heldout"]), (30, 2.0))
            self.assertTrue(all(t.dtype == torch.bfloat16 for t in tensors.values()))


class Trainable(unittest.TestCase):
    def test_splits_frames_and_positions_limit_the_training_utterances(self):
        def u(key, split, tokens, frames):
            return {"key": key, "split": split, "tokens": [0] * tokens, "codes": torch.zeros(frames, 8)}

        items = [u("a", "train", 10, 20), u("b", "gloss", 10, 20), u("c", "heldout", 10, 20),
                 u("d", "gloss", 200, 20), u("e", "train", 10, 130)]
        keys = [x["key"] for x in train.trainable(items, {"max_frames": 120, "max_positions": 100})]
        self.assertEqual(keys, ["a", "b"])  # no held-out; d over 100 positions; e over 120 frames
        keys = [x["key"] for x in train.trainable(items, {"max_frames": 120})]
        self.assertEqual(keys, ["a", "b", "d"])


class Pipeline(unittest.TestCase):
    def test_bench_times_both_stages_and_profiles_the_model_step(self):
        # `train.py bench --profile N`: steps per second of the codec and the model, and for the
        # model the operators a step spends its time in (the first thing a GPU session measures).
        with tempfile.TemporaryDirectory() as tmp:
            corpus, work = os.path.join(tmp, "corpus"), os.path.join(tmp, "work")
            write_corpus(corpus)
            out = os.path.join(tmp, "bench.json")
            self.assertEqual(train.main([
                "bench", "--work", work, "--corpus", corpus, "--config", TINY, "--threads", "1",
                "--device", "cpu", "--set", "codec.seconds=0.4", "--set", "model.max_frames=120",
                "--batches-codec", "2", "--batches-model", "2", "--bench-steps", "1",
                "--set", "decoder=" + json.dumps(dict(DECODER, seconds=0.4, disc_channels=4, mpd_channels=4)),
                "--batches-decoder", "2", "--profile", "2", "--json", out]), 0)
            with open(out) as f:
                result = json.load(f)
            self.assertEqual(len(result["codec"]), 2)  # before and with the discriminator
            (decoder,) = result["decoder"]  # the decoder stage's step, both discriminators
            self.assertEqual((decoder["batch"], decoder["mpd_periods"]), (2, DECODER["mpd_periods"]))
            self.assertGreater(decoder["steps_per_s"], 0)
            model, grouped = result["model"]  # one shape, then grouped by length (8,128)
            self.assertEqual((model["group"], model["bucket"], grouped["group"], grouped["bucket"]),
                             (1, 0, 8, 128))
            self.assertGreater(model["steps_per_s"], 0)
            self.assertGreater(grouped["steps_per_s"], 0)
            prof = model["profile"]
            self.assertEqual(prof["steps"], 2)
            self.assertTrue(prof["top"])
            self.assertLessEqual(sum(r["share"] for r in prof["top"]), 1.0001)
            self.assertTrue(all(r["ms_per_step"] >= 0 for r in prof["top"]))

    def test_eval_codec_keeps_mel_figures_without_a_recogniser_and_scores_decodes_later(self):
        # On the GPU machine (no pocketsphinx) eval-codec still writes the held-out mel figures
        # and the decodes; `eval-codec --decoded` scores those decodes elsewhere without the
        # codec's weights, and refuses when one is missing.
        with tempfile.TemporaryDirectory() as tmp:
            corpus, work = os.path.join(tmp, "corpus"), os.path.join(tmp, "work")
            write_corpus(corpus)
            common = cpu_args(work, corpus, "codec.adv_start=5", "codec.eval_every=0", "codec.steps=1")
            saved = os.environ.get("DRAMA_ASR_ROOT")
            os.environ["DRAMA_ASR_ROOT"] = os.path.join(tmp, "no-recogniser")
            try:
                self.assertEqual(train.main(["codec"] + common), 0)
                self.assertEqual(train.main(["eval-codec"] + common), 0)
                path = os.path.join(work, "codec", "eval-1.json")
                with open(path) as f:
                    figures = json.load(f)
                for key in ("mel_l1", "mel_l1_first_codebook", "mel_l1_unquantized", "stft_l1"):
                    self.assertTrue(math.isfinite(figures[key]) and figures[key] > 0, key)
                self.assertNotIn("reconstruction_wer", figures)
                self.assertFalse(os.path.exists(os.path.join(work, "codec", "eval.tsv")))
                self.assertEqual(sorted(os.listdir(os.path.join(work, "codec", "eval"))),
                                 ["spk0.u4.wav", "spk1.u4.wav"])
                state = os.path.join(work, "codec", "state")
                for name in os.listdir(state):  # only state.json (the step) is left
                    if name != "state.json":
                        os.remove(os.path.join(state, name))
                self.assertEqual(train.main(["eval-codec", "--decoded"] + common), 0)
                with open(path) as f:
                    self.assertEqual(json.load(f), figures)
                os.remove(os.path.join(work, "codec", "eval", "spk1.u4.wav"))
                with self.assertRaises(ValueError):
                    train.main(["eval-codec", "--decoded"] + common)
            finally:
                if saved is None:
                    os.environ.pop("DRAMA_ASR_ROOT", None)
                else:
                    os.environ["DRAMA_ASR_ROOT"] = saved

    def test_decoder_stage_keeps_every_code_resumes_and_exports(self):
        """The decoder stage trains the decoding tensors alone: the encoder, quantizer and
        codebooks stay bit for bit the codec stage's, so every code is unchanged (the model's
        training data stays valid), while the decodes change; it resumes across chunks, its
        state is refused over another codec step, and export writes the codec with it."""
        with tempfile.TemporaryDirectory() as tmp:
            corpus, work = os.path.join(tmp, "corpus"), os.path.join(tmp, "work")
            write_corpus(corpus)
            common = cpu_args(work, corpus, "codec.adv_start=1", "codec.disc_channels=4",
                              "codec.eval_every=0", "codec.steps=2")
            decoder = lambda steps: ["--set", "decoder=" + json.dumps(dict(  # noqa: E731
                DECODER, steps=steps, batch=2, seconds=0.4, warmup=1, disc_channels=4, mpd_channels=4,
                disc_batch=1, log_every=1, eval_every=0))]
            config = tiny_config()
            recipe = train.load_json(os.path.join(HERE, "recipe.json"))
            with self.assertRaises(ValueError):  # no finished codec yet
                train.main(["decoder"] + common + decoder(2))
            self.assertEqual(train.main(["codec"] + common), 0)
            before = train.load_codec_weights(work, config, recipe, "cpu")
            waves = [torch.from_numpy(w.astype("float32") / 32768.0)[None]
                     for w in data.load_audio(corpus, data.read_corpus(corpus, "heldout"))]
            codes = [before.encode(w) for w in waves]
            self.assertEqual(train.main(["decoder"] + common + decoder(2)), 0)
            self.assertEqual(train.main(["next"] + common + decoder(3) + ["--until", "decoder",
                                                                          "--set", "model.steps=0"]), 0)
            with open(os.path.join(work, "decoder", "losses.tsv")) as f:
                self.assertEqual([line.split("\t")[0] for line in f][1:], ["1", "2", "3"])
            with open(os.path.join(work, "progress.json")) as f:
                self.assertIn("decoder", json.load(f)["done"])
            after = train.load_codec_weights(work, config, recipe, "cpu")
            plain = train.load_codec_weights(work, config, recipe, "cpu", decoder=False)
            trained = set(after.decoder_names())
            for n, t in after.tensors().items():
                same = torch.equal(t, before.tensors()[n])
                self.assertEqual(same, n not in trained, n)
                self.assertTrue(torch.equal(plain.tensors()[n], before.tensors()[n]), n)
            for w, c in zip(waves, codes):
                self.assertTrue(torch.equal(after.encode(w), c))
                self.assertGreater(relative_l2(after.decode(c), before.decode(c)), 0.0)
            # export writes the codec as the two stages left it
            out = os.path.join(tmp, "export")
            self.assertEqual(train.main(["model"] + common + ["--set", "model.steps=1", "--set", "model.batch=2",
                                                              "--set", "model.warmup=1", "--set", "model.eval_every=0"]), 0)
            self.assertEqual(train.main(["export", "-o", out] + common), 0)
            exported, _ = safetensors_io.load(os.path.join(out, "codec", "model.safetensors"))
            for n, t in after.tensors().items():
                self.assertTrue(torch.equal(exported[n], t.float()), n)
            # the decoder state belongs to the codec step it was trained from
            self.assertEqual(train.main(["codec"] + common[:-1] + ["codec.steps=3"]), 0)
            with self.assertRaises(ValueError):
                train.load_codec_weights(work, config, recipe, "cpu")

    def test_stats_loss_sees_a_crop_statistics_and_not_its_order(self):
        import decoder_pilot
        filters = codec_lib._mel_filters(24000, 1024, 64)
        g = torch.Generator().manual_seed(3)
        x = torch.randn(2, 24000, generator=g)
        self.assertEqual(float(decoder_pilot.stats_loss(x, x, filters)), 0.0)
        # louder (a shifted log-mel mean) and a reordered crop (the same statistics, other frames)
        self.assertGreater(float(decoder_pilot.stats_loss(2 * x, x, filters)), 0.5)
        halves = torch.cat([x[:, 12000:], x[:, :12000]], dim=1)
        self.assertLess(float(decoder_pilot.stats_loss(halves, x, filters)), 0.05)

    def test_unquantized_reconstruction_is_the_projections_without_codebooks(self):
        config = tiny_config()
        c = codec_lib.Codec(config["codec"], 1)
        x = torch.randn(1, 4800, generator=torch.Generator().manual_seed(2)) * 0.1
        e = c.encode_latent(x)
        emb = sum(c.model.project(c.model.project(e, p + ".input_proj.weight"), p + ".output_proj.weight")
                  for p, _, n in c.model.rvq_parts(c.c.num_quantizers) if n > 0)
        self.assertEqual(relative_l2(c.reconstruct_unquantized(x), c.decode_latent(emb)), 0.0)

    def test_stages_run_resume_and_export_loads_in_drama(self):
        with tempfile.TemporaryDirectory() as tmp:
            corpus, work = os.path.join(tmp, "corpus"), os.path.join(tmp, "work")
            write_corpus(corpus)
            common = cpu_args(work, corpus, "codec.adv_start=1", "codec.disc_channels=4",
                              "codec.eval_every=0", "codec.log_every=1", "model.batch=2", "model.warmup=1",
                              "model.log_every=1", "model.eval_every=1", "model.patience=0")
            # Chunk 1 stops after 2 codec steps (codec.steps=2 of a planned 3: then resumed).
            self.assertEqual(train.main(["codec"] + common + ["--set", "codec.steps=2"]), 0)
            self.assertEqual(train.main(["next"] + common + ["--set", "codec.steps=3", "--set", "model.steps=2"]), 0)
            with open(os.path.join(work, "progress.json")) as f:
                progress = json.load(f)
            self.assertEqual(progress["done"], ["codec", "encode", "model", "decoder", "export"])
            with open(os.path.join(work, "codec", "losses.tsv")) as f:
                steps = [line.split("\t")[0] for line in f][1:]
            self.assertEqual(steps, ["1", "2", "3"])  # resumed at step 2, not restarted
            # The state as it travels between machines (BF16, no optimizer moments: state.py
            # travel) still resumes: the model goes on from step 2 to 3.
            model_state = os.path.join(work, "model", "state")
            state_lib.travel_copy(model_state, model_state + ".travel")
            shutil.rmtree(model_state)
            os.rename(model_state + ".travel", model_state)
            with open(os.path.join(model_state, "state.json")) as f:
                travelled = json.load(f)
            self.assertEqual((travelled["travel"], travelled["moment_files"]), ("bfloat16", []))
            self.assertEqual(train.main(["model"] + common + ["--set", "model.steps=3"]), 0)
            with open(os.path.join(work, "model", "losses.tsv")) as f:
                self.assertEqual([line.split("\t")[0] for line in f][1:], ["1", "2", "3"])
            # The held-out monitor evaluated every step (model.eval_every=1) and kept the best.
            with open(os.path.join(work, "model", "heldout.tsv")) as f:
                rows = [line.rstrip("\n").split("\t") for line in f]
            self.assertEqual(rows[0][:3], ["step", "heldout_codebook0", "heldout_tower"])
            self.assertEqual([r[0] for r in rows[1:]], ["1", "2", "3"])
            with open(os.path.join(work, "model", "best", "state.json")) as f:
                best = json.load(f)
            self.assertEqual(best["step"], int(rows[-1][-1]))
            # Training the codec further makes its codes stale: `encode` makes them again from
            # the codec's new step instead of reusing them.
            with open(os.path.join(work, "codes", "index.json")) as f:
                self.assertEqual(json.load(f)["codec_step"], 3)
            self.assertEqual(train.main(["next", "--until", "codec"] + common + ["--set", "codec.steps=4"]), 0)
            with open(os.path.join(work, "codes", "index.json")) as f:
                self.assertEqual(json.load(f)["codec_step"], 3)  # --until codec: no encode yet
            self.assertEqual(train.main(["encode"] + common + ["--set", "codec.steps=4"]), 0)
            with open(os.path.join(work, "codes", "index.json")) as f:
                self.assertEqual(json.load(f)["codec_step"], 4)
            with open(os.path.join(work, "progress.json")) as f:
                self.assertIn("encode@cpu", json.load(f)["seconds"])
            for folder, _, files in os.walk(work):
                for name in files:
                    self.assertLessEqual(os.path.getsize(os.path.join(folder, name)), 16 << 20, name)
            export = os.path.join(work, "export")
            reference = drama3.Drama3(export)  # the reference loads it
            self.assertEqual(reference.frontend, "espeak-ipa")
            if DRAMA:  # the export's own manifest pins it as drama would (train.write_manifest)
                subprocess.run([DRAMA, "verify", export, "--manifest", os.path.join(export, "manifest.json")],
                               check=True, capture_output=True)
                quantized = os.path.join(tmp, "nvfp4")
                subprocess.run([DRAMA, "quantize", export, quantized], check=True, capture_output=True)
                wav = os.path.join(tmp, "out.wav")
                env = dict(os.environ, DRAMA_LOCK_DIR=os.path.join(tmp, "locks"),
                           DRAMA_CACHE=os.path.join(tmp, "cache"))
                subprocess.run([DRAMA, "say", "Hello, 42 cats.", "--checkpoint", quantized,
                                "--manifest", os.path.join(quantized, "manifest.json"),
                                "--backend", "cpu", "--threads", "1", "--seed", "1",
                                "--max-frames", "6", "-o", wav], check=True, capture_output=True,
                               env=env)
                x, rate = audio.read_wav(wav)
                self.assertEqual(rate, 24000)
                self.assertGreater(len(x), 0)
                self.check_bundle(tmp, work, corpus, env)

    def check_bundle(self, tmp, work, corpus, env):
        out, pin = os.path.join(tmp, "models", "drama-mini"), os.path.join(tmp, "pin", "drama-mini.json")
        argv = [work, out, "--corpus", corpus, "--voices", "spk1,spk0", "--drama", DRAMA,
                "--config", TINY, "--pin", pin]
        saved = dict(os.environ)
        os.environ.update(env)  # drama's device lock and cache inside tmp
        try:
            with self.assertRaises(SystemExit) as too_big:
                bundle.main(argv + ["--max-mib", "0.01"])
            self.assertIn("over the 0.01 MiB limit", str(too_big.exception))
            self.assertEqual(sorted(os.listdir(os.path.join(tmp, "models"))), [])  # no temp left
            self.assertFalse(os.path.exists(pin))
            self.assertEqual(bundle.main(argv), 0)
            with self.assertRaises(SystemExit) as exists:
                bundle.main(argv)
            self.assertIn("already exists", str(exists.exception))
        finally:
            os.environ.clear()
            os.environ.update(saved)
        with open(pin) as f:
            manifest = json.load(f)
        with open(os.path.join(out, "manifest.json")) as f:
            self.assertEqual(json.load(f), manifest)
        self.assertEqual((manifest["name"], manifest["weights"]), ("drama-mini", "drama-mini"))
        paths = [f["path"] for f in manifest["files"]]
        for s in ("spk0", "spk1"):
            self.assertIn(f"voices/{s}.voice", paths)
            self.assertIn(f"voices/{s}.json", paths)
        subprocess.run([DRAMA, "verify", out, "--manifest", pin], check=True, capture_output=True)
        outputs = []
        for i in range(2):
            wav = os.path.join(tmp, f"bundled-{i}.wav")
            subprocess.run([DRAMA, "say", "Hello there.", "--checkpoint", out, "--manifest", pin,
                            "--voice", "spk0", "--gamma", "1.5", "--backend", "cpu", "--threads", "1",
                            "--seed", "3", "--max-frames", "6", "-o", wav], check=True,
                           capture_output=True, env=env, cwd=tmp)
            with open(wav, "rb") as f:
                outputs.append(f.read())
        self.assertGreater(len(outputs[0]), 44)
        self.assertEqual(outputs[0], outputs[1])


class BundleReferences(unittest.TestCase):
    def test_voices_come_from_the_sentence_the_evaluation_uses(self):
        """bundle.references takes the smallest held-out sentence every voice recorded (as
        tools/eval/evaluate.py's reference), not each speaker's own smallest, and refuses a corpus
        whose voices share none."""
        with tempfile.TemporaryDirectory() as tmp:
            def corpus(rows):
                with open(os.path.join(tmp, "corpus.tsv"), "w") as f:
                    f.write("speaker\tsentence\tsplit\tseconds\tpath\ttext\n")
                    for spk, sid, split in rows:
                        f.write(f"{spk}\t{sid}\t{split}\t1.0\twav/{spk}-{sid}.wav\ttext {sid}\n")
            corpus([("a", "01", "heldout"), ("a", "05", "heldout"), ("b", "02", "heldout"),
                    ("b", "05", "heldout"), ("b", "00", "train"), ("c", "00", "heldout")])
            refs = bundle.references(tmp, ["a", "b"])
            self.assertEqual(refs["a"], (os.path.join(tmp, "wav/a-05.wav"), "text 05"))
            self.assertEqual(refs["b"], (os.path.join(tmp, "wav/b-05.wav"), "text 05"))
            with self.assertRaises(SystemExit) as none_shared:
                bundle.references(tmp, ["a", "c"])
            self.assertIn("--heldout-same", str(none_shared.exception))
            with self.assertRaises(SystemExit) as missing:
                bundle.references(tmp, ["a", "d"])
            self.assertIn("no held-out recording of d", str(missing.exception))


if __name__ == "__main__":
    torch.set_num_threads(1)
    unittest.main()
