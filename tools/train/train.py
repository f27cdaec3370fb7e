"""drama-mini training driver: codec, then codes, then model, then export (docs/training.md).

    python3 tools/train/train.py next  --work DIR --corpus CORPUS [--minutes 9] [--device cuda]
    python3 tools/train/train.py codec|encode|model --work DIR --corpus CORPUS [--minutes M]
    python3 tools/train/train.py export --work DIR -o CHECKPOINT_DIR
    python3 tools/train/train.py eval-codec --work DIR --corpus CORPUS [--decoded]   reconstruction
                                                              mel L1 and WER (--decoded: of the
                                                              decodes in DIR/codec/eval)
    python3 tools/train/train.py bench --work DIR --corpus CORPUS [--json OUT]   steps/s by batch
    (--config tools/train/drama-mini.json, --recipe tools/train/recipe.json, --set KEY=VALUE
     overrides a recipe value, e.g. --set codec.steps=20)

`next` runs whatever comes next for at most --minutes of wall time and returns: each call is one
resumable chunk. Every stage saves its state under DIR (files of at most 16 MiB: state.py) when
its time is up or its steps are done, and resumes from there. Losses go to DIR/<stage>/losses.tsv,
time spent (wall seconds on the device) to DIR/progress.json. Same seed, same batches: every
batch is drawn from a generator seeded by (seed, step), whatever the chunking."""

import argparse
import contextlib
import hashlib
import json
import math
import os
import random
import shutil
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "reference"))

import codec as codec_lib  # noqa: E402
import cuda_graph  # noqa: E402
import data  # noqa: E402
import model as model_lib  # noqa: E402
import safetensors_io  # noqa: E402
import state  # noqa: E402

STAGES = ("codec", "encode", "model", "decoder", "export")


def load_json(path):
    with open(path) as f:
        return json.load(f)


def apply_overrides(recipe, sets):
    for item in sets or []:
        key, value = item.split("=", 1)
        node, parts = recipe, key.split(".")
        for p in parts[:-1]:
            node = node[p]
        node[parts[-1]] = json.loads(value)
    return recipe


class Progress:
    """DIR/progress.json: stages done, steps, wall seconds per stage (the GPU time record)."""

    def __init__(self, work):
        self.path = os.path.join(work, "progress.json")
        self.info = load_json(self.path) if os.path.exists(self.path) else {"done": [], "seconds": {}}

    def add_seconds(self, stage, seconds):
        self.info["seconds"][stage] = round(self.info["seconds"].get(stage, 0.0) + seconds, 1)

    def mark_done(self, stage):
        if stage not in self.info["done"]:
            self.info["done"].append(stage)

    def save(self):
        tmp = self.path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(self.info, f, indent=1)
        os.replace(tmp, self.path)


def log_row(path, row):
    new = not os.path.exists(path)
    with open(path, "a") as f:
        if new:
            f.write("\t".join(row) + "\n")
        else:
            f.write("\t".join(str(v) for v in row.values()) + "\n")


def append_losses(path, values):
    new = not os.path.exists(path)
    with open(path, "a") as f:
        if new:
            f.write("\t".join(values) + "\n")
        f.write("\t".join(f"{v:.5g}" if isinstance(v, float) else str(v) for v in values.values()) + "\n")


def lr_at(step, steps, base, warmup):
    if step < warmup:
        return base * (step + 1) / warmup
    return base * 0.5 * (1 + math.cos(math.pi * min(1.0, (step - warmup) / max(1, steps - warmup))))


def take_step(runner, fn, key, inputs, device, eager=False):
    """One training step: through runner (cuda_graph.GraphedStep: host inputs pinned for the
    asynchronous copy into the graph's) or, without one or when eager, fn on inputs moved to the
    device. fn(key, inputs) either way."""
    if runner is not None and not eager:
        return runner(key, {n: t.pin_memory() if t.device.type == "cpu" else t for n, t in inputs.items()})
    return fn(key, {n: t.to(device) for n, t in inputs.items()})


def make_codec(config, recipe, device):
    return codec_lib.Codec(config["codec"], recipe["seed"], device)


def load_codec_weights(work, config, recipe, device, decoder=True):
    """The codec of work's codec state, with the decoder stage's tensors over it where that stage
    has a state (decoder=False: the codec stage's alone). The decoder state records the codec
    step it was trained from and is refused with any other (its encoder is another)."""
    c = make_codec(config, recipe, device)
    tensors, info = state.load(os.path.join(work, "codec", "state"))
    if info is None:
        raise ValueError(f"{work}: no codec state (run the codec stage first)")
    values = {n[len("codec."):]: t for n, t in tensors.items() if n.startswith("codec.")}
    if decoder:
        values.update(decoder_tensors(work, info["step"]))
    c.load(values)
    return c


def decoder_tensors(work, codec_step):
    """{codec tensor name: value} of work's decoder state ({} without one)."""
    tensors, info = state.load(os.path.join(work, "decoder", "state"))
    if info is None:
        return {}
    if info["codec_step"] != codec_step:
        raise ValueError(f"{work}: the decoder state was trained from the codec at step "
                         f"{info['codec_step']}, the codec state is at step {codec_step}")
    return {n[len("decoder."):]: t for n, t in tensors.items() if n.startswith("decoder.")}


# ----------------------------------------------------------------------------------------------


def train_codec(args, config, recipe, deadline):
    r, device = recipe["codec"], args.device
    folder = os.path.join(args.work, "codec")
    os.makedirs(folder, exist_ok=True)
    graphed = device.startswith("cuda") and r.get("cuda_graph", False)
    spectral = codec_lib.SpectralLoss(config["audio"]["sample_rate"])
    codec, disc, opt, opt_d, step_fn, runner = codec_trainer(config, recipe, r, device, graphed, spectral)
    names = {p: n for n, p in codec.params.items()}
    dnames = {p: n for n, p in disc.named_parameters()}
    tensors, info = state.load(os.path.join(folder, "state"))
    if info:
        codec.load({n[6:]: t for n, t in tensors.items() if n.startswith("codec.")})
    step, rewarm_from = restore_adversarial(tensors, info, disc, opt, opt_d, names, dnames)
    if step >= r["steps"]:
        return True
    rows = data.read_corpus(args.corpus, "train")
    waves = data.load_audio(args.corpus, rows)
    k = config["codec"]["num_quantizers"]
    rewarm = r.get("rewarm", 200)
    start = time.time()
    while step < r["steps"] and time.time() < deadline:
        rng = random.Random(recipe["seed"] * 1_000_003 + step)
        x = data.CropSampler(waves, r["seconds"], rng.random()).batch(r["batch"])
        n_q = k if rng.random() >= r["quantizer_dropout"] else rng.randint(1, k)
        warming = bool(rewarm_from) and step - rewarm_from < rewarm
        if warming:  # resumed without optimizer moments: warm the learning rate up again
            for o in (opt, opt_d):
                for g in o.param_groups:
                    g["lr"] = r["lr"] * min(1.0, (step - rewarm_from + 1) / rewarm)
        elif rewarm_from:
            for o in (opt, opt_d):
                for g in o.param_groups:
                    g["lr"] = r["lr"]
        adv, keep = step >= r["adv_start"], codec.keep_mask(n_q)
        if adv and runner is not None:
            runner.drop(False)  # the step without the discriminator is not taken again
        # (the warm-up's changing rate stays eager)
        out = take_step(runner, step_fn, adv, {"x": x, "keep": keep}, device, eager=warming)
        step += 1
        if step % r["log_every"] == 0 or step == 1:
            append_losses(os.path.join(folder, "losses.tsv"), {
                "step": step, **{n: float(out[n]) for n in ("mel", "stft", "commit", "adv", "fm", "disc")},
                "n_q": n_q, "dead_restarts": int(out["dead_restarts"]),
                "codes_used_min": int(out["codes_used_min"]), "seconds": round(time.time() - start, 1)})
        if r.get("eval_every") and step % r["eval_every"] == 0:
            evaluate_codec(args, codec, r, step)
    save_codec(folder, codec, disc, opt, opt_d, names, dnames, step)
    return step >= r["steps"]


def codec_trainer(config, recipe, r, device, graphed, spectral):
    """The codec, its discriminator, their optimizers (recipe r's rate and betas; capturable when
    graphed: the step counts stay on the device, as a CUDA graph needs), the step function and,
    graphed, its cuda_graph.GraphedStep (else None). Training and `bench` both start here."""
    codec = make_codec(config, recipe, device)
    disc = codec_lib.StftDiscriminator(r.get("disc_channels", 32)).to(device)
    opt = torch.optim.AdamW(codec.params.values(), lr=r["lr"], betas=tuple(r["betas"]), capturable=graphed)
    opt_d = torch.optim.AdamW(disc.parameters(), lr=r["lr"], betas=tuple(r["betas"]), capturable=graphed)
    step_fn = codec_step_fn(codec, disc, opt, opt_d, spectral, r)
    runner = None
    if graphed:
        codec.rng = None  # the device's default generator: graph-safe
        runner = cuda_graph.GraphedStep(step_fn, (opt, opt_d))
    return codec, disc, opt, opt_d, step_fn, runner


def codec_step_fn(codec, disc, opt, opt_d, spectral, r, decoder_only=False):
    """One codec training step as fn(adv, {"x": crops on the device, "keep": keep_mask}) ->
    {name: device tensor}: codec forward, spectral + commitment losses, and from adv_start the
    discriminator's step and the adversarial + feature-matching losses; then the codec's step.
    decoder_only: the decoder stage's forward (Codec.forward_decoder: every codebook, nothing
    but the decoding parameters trained; keep is ignored). No host reads (cuda_graph.GraphedStep
    captures it)."""

    def fn(adv, inputs):
        x, keep = inputs["x"], inputs["keep"]
        y, _, commit, stats = codec.forward_decoder(x) if decoder_only else codec.forward(x, keep)
        mel, stft = spectral(y, x)
        loss = mel + stft + commit
        zero = torch.zeros((), device=x.device)
        adv_loss = fm = loss_d = zero
        if adv:
            # The discriminator sees the first disc_batch crops: on the H200 it takes a batch of
            # 24 from 21 to 7.9 steps/s and scales worse than the codec (train.py bench).
            db = r.get("disc_batch", x.shape[0])
            real, fake = disc(x[:db]), disc(y[:db].detach())
            loss_d = sum(torch.relu(1 - a[0]).mean() + torch.relu(1 + b[0]).mean()
                         for a, b in zip(real, fake)) / len(real)
            opt_d.zero_grad(set_to_none=True)
            loss_d.backward()
            opt_d.step()
            fake = disc(y[:db])
            adv_loss = sum(torch.relu(1 - b[0]).mean() for b in fake) / len(fake)
            fm = sum(torch.nn.functional.l1_loss(fb, ra.detach()) / (ra.detach().abs().mean() + 1e-5)
                     for a, b in zip(real, fake) for ra, fb in zip(a[1], b[1])) / (len(real) * len(real[0][1]))
            loss = loss + r["adv_weight"] * adv_loss + r["fm_weight"] * fm
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(codec.params.values(), 1.0)
        opt.step()
        return {"mel": mel.detach(), "stft": stft.detach(), "commit": commit.detach(),
                "adv": adv_loss.detach(), "fm": fm.detach(), "disc": loss_d.detach(),
                "dead_restarts": stats["dead_restarts"], "codes_used_min": stats["codes_used_min"]}

    return fn


def save_codec(folder, codec, disc, opt, opt_d, names, dnames, step):
    tensors = {"codec." + n: t for n, t in codec.tensors().items()}
    save_adversarial(folder, tensors, disc, opt, opt_d, names, dnames, {"stage": "codec", "step": step})


def save_adversarial(folder, tensors, disc, opt, opt_d, names, dnames, info):
    """folder/state: the generator's `tensors` with the discriminator's ("disc.") and the two
    optimizers' moments ("g.", "d."): the codec and decoder stages' common part."""
    tensors = dict(tensors, **{"disc." + n: t for n, t in disc.state_dict().items()})
    moments = {"g." + n: t for n, t in state.optimizer_tensors(opt, names).items()}
    moments.update({"d." + n: t for n, t in state.optimizer_tensors(opt_d, dnames).items()})
    state.save(os.path.join(folder, "state"), tensors, info, moments)


def restore_adversarial(tensors, info, disc, opt, opt_d, names, dnames):
    """The other half of save_adversarial: the discriminator and both optimizers from a loaded
    state (none: nothing); returns (step, the step to warm the rate up again from, 0 where the
    moments came back)."""
    if not info:
        return 0, 0
    step = info["step"]
    disc.load_state_dict({n[5:]: t for n, t in tensors.items() if n.startswith("disc.")})
    state.restore_optimizer(opt, names, {n[2:]: t for n, t in tensors.items() if n.startswith("g.")}, step)
    state.restore_optimizer(opt_d, dnames, {n[2:]: t for n, t in tensors.items() if n.startswith("d.")}, step)
    return step, (step if not info["has_moments"] else 0)


def train_decoder(args, config, recipe, deadline):
    """The decoder stage (recipe "decoder"; absent or steps 0: nothing to do): the finished codec's
    decoding parameters (Codec.decoder_names) train on, the encoder, quantizer and codebooks
    frozen, so every code, and the model trained on the codes, stays valid. Every batch decodes
    all codebooks (what the engine does; the codec stage's quantizer dropout trained the decoder
    for 1-8), under warmup + cosine (the codec stage's rate was constant), against the codec
    stage's STFT discriminator plus, with decoder.mpd_periods, a multi-period one trained from
    scratch. State in work/decoder/state: the decoding tensors, the discriminators, the codec
    step it started from (load_codec_weights lays it over the codec; export writes the result)."""
    r, device = recipe.get("decoder"), args.device
    if not r or r.get("steps", 0) <= 0:
        return True
    codec_done = codec_step(args.work)
    if codec_done is None or codec_done < recipe["codec"]["steps"]:
        raise ValueError(f"{args.work}: the decoder stage needs the finished codec "
                         f"(step {codec_done} of {recipe['codec']['steps']})")
    folder = os.path.join(args.work, "decoder")
    os.makedirs(folder, exist_ok=True)
    graphed = device.startswith("cuda") and r.get("cuda_graph", False)
    codec, disc, opt, opt_d, step_fn, runner, names = decoder_trainer(config, recipe, r, device, graphed)
    codec_tensors, _ = state.load(os.path.join(args.work, "codec", "state"))
    codec.load({n[6:]: t for n, t in codec_tensors.items() if n.startswith("codec.")})
    stft = {n[5:]: t for n, t in codec_tensors.items() if n.startswith("disc.")}
    if stft:  # the codec stage's STFT discriminator goes on (a first run: the MPD starts fresh)
        disc.parts["stft"].load_state_dict(stft)
    pnames = {codec.params[n]: n for n in names}
    dnames = {p: n for n, p in disc.named_parameters()}
    tensors, info = state.load(os.path.join(folder, "state"))
    if info:
        codec.load(dict(codec.tensors(), **decoder_tensors(args.work, codec_done)))
    step, rewarm_from = restore_adversarial(tensors, info, disc, opt, opt_d, pnames, dnames)
    if step >= r["steps"]:
        return True
    rows = data.read_corpus(args.corpus, "train")
    waves = data.load_audio(args.corpus, rows)
    keep = codec.keep_mask(config["codec"]["num_quantizers"])
    start = time.time()
    while step < r["steps"] and time.time() < deadline:
        rng = random.Random(f"decoder {recipe['seed']} {step}")  # other crops than the codec's
        x = data.CropSampler(waves, r["seconds"], rng.random()).batch(r["batch"])
        lr = lr_at(step, r["steps"], r["lr"], r["warmup"])
        if rewarm_from:  # resumed without optimizer moments: warm up again
            lr *= min(1.0, (step - rewarm_from + 1) / r.get("rewarm", 200))
        for o in (opt, opt_d):
            for g in o.param_groups:
                if graphed:
                    g["lr"].fill_(lr)
                else:
                    g["lr"] = lr
        out = take_step(runner, step_fn, step >= r.get("adv_start", 0), {"x": x, "keep": keep}, device)
        step += 1
        if step % r["log_every"] == 0 or step == 1:
            append_losses(os.path.join(folder, "losses.tsv"), {
                "step": step, **{n: float(out[n]) for n in ("mel", "stft", "adv", "fm", "disc")},
                "lr": lr, "seconds": round(time.time() - start, 1)})
        if r.get("eval_every") and step % r["eval_every"] == 0:
            evaluate_codec(args, codec, r, step, stage="decoder")
    save_adversarial(folder, {"decoder." + n: codec.params[n].detach() for n in names}, disc, opt, opt_d,
                     pnames, dnames, {"stage": "decoder", "step": step, "codec_step": codec_done})
    return step >= r["steps"]


def decoder_trainer(config, recipe, r, device, graphed):
    """The decoder stage's codec (only its decoding parameters trainable), discriminators (the
    STFT one, plus the multi-period one with r["mpd_periods"]), optimizers (the rate a device
    tensor when graphed, so the schedule changes it between replays), step function, runner
    (cuda_graph.GraphedStep, or None) and the trained names. Training and `bench` start here."""
    codec = make_codec(config, recipe, device)
    names = codec.decoder_names()
    for n, p in codec.params.items():
        p.requires_grad_(n in names)
    periods = r.get("mpd_periods") or []
    disc = codec_lib.Discriminators(
        stft=codec_lib.StftDiscriminator(r.get("disc_channels", 32)),
        mpd=codec_lib.PeriodDiscriminator(periods, r.get("mpd_channels", 32)) if periods else None).to(device)
    lr0 = (lambda: torch.tensor(r["lr"], device=device)) if graphed else (lambda: r["lr"])
    opt = torch.optim.AdamW([codec.params[n] for n in names], lr=lr0(), betas=tuple(r["betas"]),
                            capturable=graphed)
    opt_d = torch.optim.AdamW(disc.parameters(), lr=lr0(), betas=tuple(r["betas"]), capturable=graphed)
    step_fn = codec_step_fn(codec, disc, opt, opt_d, codec_lib.SpectralLoss(config["audio"]["sample_rate"]),
                            r, decoder_only=True)
    runner = cuda_graph.GraphedStep(step_fn, (opt, opt_d)) if graphed else None
    return codec, disc, opt, opt_d, step_fn, runner, names


def evaluate_codec(args, codec, r, step, decoded=False, stage="codec"):
    """Held-out reconstruction, the early warning for a collapsing codec: the log-mel L1 (the
    training's 4-resolution loss, mean over utterances) with every codebook, with the first one
    alone and with the latent unquantized (Codec.reconstruct_unquantized: the autoencoder alone),
    the log-STFT L1, and where pocketsphinx is present the WER beside the original audio's. In
    codec/eval-STEP.json (written before the recogniser runs, so a machine without it keeps the
    figures; the WER also in eval.tsv), the decodes in codec/eval/. decoded: codec may be None,
    and the wavs already in codec/eval (decoded on a machine without pocketsphinx, the GPU's) are
    scored, keeping the mel figures of its eval-STEP.json. stage: the folder of work the figures
    and decodes go to (the decoder stage's own: decoder/eval-STEP.json)."""
    sys.path.insert(0, os.path.join(HERE, "..", "eval"))
    import asr  # noqa: E402
    import audio  # noqa: E402

    rows = data.read_corpus(args.corpus, "heldout")[: r["eval_utterances"]]
    if not rows:
        return
    out = os.path.join(args.work, stage, "eval")
    report = os.path.join(args.work, stage, f"eval-{step}.json")
    os.makedirs(out, exist_ok=True)
    result = {"step": step, "utterances": len(rows)}
    items_rec, items_src = [], []
    for row in rows:
        uid = f"{row['speaker']}.{row['sentence']}"
        items_rec.append((uid, os.path.join(out, uid + ".wav")))
        items_src.append((uid, os.path.join(args.corpus, row["path"])))
    if decoded:
        missing = [p for _, p in items_rec if not os.path.exists(p)]
        if missing:
            raise ValueError(f"{out}: {len(missing)} of the {len(rows)} decodes are missing")
        if os.path.exists(report):
            result.update({k: v for k, v in load_json(report).items() if k.startswith(("mel_l1", "stft_l1"))})
    else:
        spectral = codec_lib.SpectralLoss(codec.raw.get("sampling_rate", 24000))
        sums = dict.fromkeys(("mel_l1", "mel_l1_first_codebook", "mel_l1_unquantized", "stft_l1"), 0.0)
        for (uid, path), wave in zip(items_rec, data.load_audio(args.corpus, rows)):
            x = torch.from_numpy(wave.astype("float32") / 32768.0)[None].to(codec.device)
            codes = codec.encode(x)
            y = codec.decode(codes)
            with torch.no_grad():
                for key, z in (("mel_l1", y), ("mel_l1_first_codebook", codec.decode(codes[..., :1])),
                               ("mel_l1_unquantized", codec.reconstruct_unquantized(x))):
                    n = min(x.shape[1], z.shape[1])  # decodes are whole frames
                    mel, stft = spectral(z[:, :n], x[:, :n])
                    sums[key] += float(mel)
                    if key == "mel_l1":
                        sums["stft_l1"] += float(stft)
            audio.write_wav(path, y[0].cpu().numpy(), 24000)
        result.update({k: round(v / len(rows), 4) for k, v in sums.items()})
        with open(report, "w") as f:
            json.dump(result, f, indent=1)
    try:
        rec, src = asr.recognize(items_rec), asr.recognize(items_src)
    except (OSError, RuntimeError) as error:
        print(f"codec eval at step {step}: {result}; no WER ({error})")
        return
    text = {f"{r_['speaker']}.{r_['sentence']}": r_["text"] for r_ in rows}
    result.update({"reconstruction_wer": round(asr.wer((text[u], rec[u]) for u in text), 4),
                   "source_wer": round(asr.wer((text[u], src[u]) for u in text), 4)})
    append_losses(os.path.join(args.work, stage, "eval.tsv"),
                  {k: result[k] for k in ("step", "reconstruction_wer", "source_wer", "utterances")})
    print(f"codec eval at step {step}: {result}")
    # By voice (the speaker without its pitch/rate setting): which voices the codec loses.
    voices = sorted({u.split(".")[0].rsplit("-", 1)[0] for u in text})
    by_voice = {v: {"reconstruction_wer": round(asr.wer((text[u], rec[u]) for u in text if u.startswith(v + "-")), 4),
                    "source_wer": round(asr.wer((text[u], src[u]) for u in text if u.startswith(v + "-")), 4)}
                for v in voices}
    with open(report, "w") as f:
        json.dump(dict(result, by_voice=by_voice), f, indent=1)
    for v, w in by_voice.items():
        print(f"codec eval at step {step}: {v}: reconstruction {w['reconstruction_wer']:.3f}, source {w['source_wer']:.3f}")


# ----------------------------------------------------------------------------------------------


def codec_step(work, stage="codec"):
    """The step of work's saved codec (or decoder) stage, None without one."""
    path = os.path.join(work, stage, "state", "state.json")
    return load_json(path)["step"] if os.path.exists(path) else None


def check_corpus(corpus_dir, wanted):
    """Refuses a corpus synthesized with other settings than the recipe's "corpus" (the
    synth.py counts in its corpus.json), so codes are never made from the wrong utterances."""
    path = os.path.join(corpus_dir, "corpus.json")
    if wanted is None or not os.path.exists(path):
        return
    made = load_json(path)
    have = {k: made.get(k, 0) for k in wanted}
    if have != wanted:
        raise ValueError(f"{corpus_dir}: synthesized with {have}, the recipe's corpus is {wanted} "
                         "(tools/corpus/synth.py with the recipe's counts)")


def encode_corpus(args, config, recipe, deadline):
    """The codes of every utterance, made by the codec at its saved step; made again when the
    codec has trained further since (a raised codec.steps), never silently reused."""
    folder = os.path.join(args.work, "codes")
    index_path = os.path.join(folder, "index.json")
    step = codec_step(args.work)
    wanted = recipe.get("corpus")  # the corpus the model stage trains on (None: any)
    if os.path.exists(index_path):
        index = load_json(index_path)
        made_at, made_from = index.get("codec_step"), index.get("corpus")
        if (step is None or made_at == step) and (wanted is None or made_from == wanted):
            return True
        if made_at != step:
            print(f"encode: the codes are from codec step {made_at}, the codec is at {step}: encoding again")
        else:
            print(f"encode: the codes are of corpus {made_from}, the recipe asks for {wanted}: encoding again")
    check_corpus(args.corpus, wanted)
    codec = load_codec_weights(args.work, config, recipe, args.device)
    hop = round(config["audio"]["sample_rate"] / config["audio"]["frame_rate"])  # samples a frame
    entries, codes = [], {}
    for split in ("train", "gloss", "heldout"):  # gloss: model-stage text (tools/corpus)
        rows = data.read_corpus(args.corpus, split)
        waves = data.load_audio(args.corpus, rows)
        # Batches of similar lengths, each utterance zero-padded to whole frames and then to
        # its batch's longest: the codec is causal and every strided layer then sees a length
        # it divides (no extra padding), so an utterance's frames do not depend on its batch
        # (test_train checks batched against one at a time). 199 s one at a time on the H200.
        order = sorted(range(len(rows)), key=lambda i: len(waves[i]))
        for b0 in range(0, len(order), 64):
            ids = order[b0:b0 + 64]
            frames = [-(-len(waves[i]) // hop) for i in ids]
            x = torch.zeros(len(ids), max(frames) * hop)
            for j, i in enumerate(ids):
                x[j, :len(waves[i])] = torch.from_numpy(waves[i].astype("float32") / 32768.0)
            c = codec.encode(x.to(args.device)).to(torch.int16).cpu()
            for j, i in enumerate(ids):
                codes[f"{rows[i]['speaker']}.{rows[i]['sentence']}"] = c[j, :frames[j]].clone()
        for row in rows:
            key = f"{row['speaker']}.{row['sentence']}"
            entries.append({"key": key, "speaker": row["speaker"], "split": split,
                            "text": row["text"], "tokens": data.text_tokens(config, row["text"]),
                            "frames": int(codes[key].shape[0])})
    tmp = folder + ".partial"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    files = state.save_tensors_split(tmp, "codes", codes)
    with open(os.path.join(tmp, "index.json"), "w") as f:
        json.dump({"files": files, "codec_step": step, "corpus": wanted, "utterances": entries}, f)
    if os.path.exists(folder):
        shutil.rmtree(folder)
    os.replace(tmp, folder)
    return True


def load_codes(work):
    folder = os.path.join(work, "codes")
    index = load_json(os.path.join(folder, "index.json"))
    codes = state.load_tensors_split(folder, index["files"])
    out = []
    for e in index["utterances"]:
        out.append(dict(e, codes=codes[e["key"]].to(torch.int64)))
    return out


def model_step_fn(m, opt, r, autocast, graphed):
    """One model training step as fn(_, batch on the device) -> {loss name: device tensor}, no
    host reads (cuda_graph.GraphedStep captures it; autocast's weight cache is off then, as
    graph capture requires)."""

    def fn(_key, batch):
        ctx = (torch.autocast("cuda", dtype=torch.bfloat16, cache_enabled=not graphed) if autocast
               else contextlib.nullcontext())
        with ctx:
            losses = m.forward(batch)
        loss = losses["codebook0"] + losses["tower"] + r["balance_weight"] * losses["balance"]
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(m.params.values(), 1.0)
        opt.step()
        return {n: losses[n].detach() for n in ("codebook0", "tower", "balance")}

    return fn


def model_batch(config, sampler, seed, step, r, longest, padded):
    """Step `step`'s model batch on the host and its padded length (None: unpadded): the examples
    of data.step_batch (r["group"] steps sharing one draw), padded to data.padded_shape (a
    multiple of r["bucket"] positions, at most twice the longest utterance) when `padded` (a CUDA
    graph's fixed shapes) or r["bucket"] asks. The training and `bench` both build batches here."""
    examples = data.step_batch(sampler, seed, step, r["batch"], r.get("group", 1))
    shape = None
    if padded or r.get("bucket", 0):
        shape = data.padded_shape(examples, r.get("bucket", 0), 2 * longest, r["max_frames"])
    return data.collate(config, examples, "cpu", shape), (shape[0] if shape else None)


def train_model(args, config, recipe, deadline):
    r, device = recipe["model"], args.device
    folder = os.path.join(args.work, "model")
    os.makedirs(folder, exist_ok=True)
    graphed = device.startswith("cuda") and r.get("cuda_graph", False)
    m, opt, step_fn, runner = model_trainer(config, recipe["seed"], r, device, graphed)
    names = {p: n for n, p in m.params.items()}
    tensors, info = state.load(os.path.join(folder, "state"))
    step = rewarm_from = 0
    if info:
        step = info["step"]
        rewarm_from = step if not info["has_moments"] else 0
        m.load({n[6:]: t for n, t in tensors.items() if n.startswith("model.")})
        state.restore_optimizer(opt, names, {n[4:]: t for n, t in tensors.items() if n.startswith("opt.")}, step)
    if step >= r["steps"] or (info and info.get("stopped_early")):
        return True
    everything = load_codes(args.work)
    utterances = trainable(everything, r)
    monitor = HeldoutMonitor(folder, config, r, everything, recipe["seed"], device)
    # Shapes (model_batch): graphed, every batch is padded to a multiple of model.bucket positions
    # (0: to the longest pair of utterances the sampler can draw, one shape), a CUDA graph per
    # shape; model.group steps share one draw sorted by length.
    longest = max(len(u["tokens"]) + 2 + len(u["codes"]) for u in utterances)
    sampler = data.PairSampler(utterances, 0, r["drop_reference"], r["max_frames"])
    start = time.time()
    while step < r["steps"] and time.time() < deadline:
        batch, length = model_batch(config, sampler, recipe["seed"] * 1_000_003, step, r, longest, graphed)
        lr = lr_at(step, r["steps"], r["lr"], r["warmup"])
        if rewarm_from:  # resumed without optimizer moments: warm up again
            lr *= min(1.0, (step - rewarm_from + 1) / r.get("rewarm", 200))
        for g in opt.param_groups:
            if graphed:
                g["lr"].fill_(lr)
            else:
                g["lr"] = lr
        losses = take_step(runner, step_fn, length, batch, device)
        step += 1
        if step % r["log_every"] == 0 or step == 1:
            append_losses(os.path.join(folder, "losses.tsv"), {
                "step": step, "codebook0": float(losses["codebook0"]), "tower": float(losses["tower"]),
                "balance": float(losses["balance"]), "lr": lr,
                "seconds": round(time.time() - start, 1)})
        if monitor.due(step) and monitor.evaluate(m, step):
            break  # no held-out improvement for model.patience evaluations: stopped early
    monitor.save()
    tensors = {"model." + n: t for n, t in m.tensors().items()}
    moments = {"opt." + n: t for n, t in state.optimizer_tensors(opt, names).items()}
    state.save(os.path.join(folder, "state"), tensors,
               {"stage": "model", "step": step, "stopped_early": monitor.stopped}, moments)
    return step >= r["steps"] or monitor.stopped


def evaluate_model(args, config, recipe):
    """The HeldoutMonitor's figures for the last saved model state (and the best one, where
    kept), as JSON on stdout (and --json)."""
    result = {}
    monitor = HeldoutMonitor(os.path.join(args.work, "model"), config, recipe["model"],
                             load_codes(args.work), recipe["seed"], args.device)
    for name in ("state", "best"):
        tensors, info = state.load(os.path.join(args.work, "model", name))
        if info is None:
            continue
        m = model_lib.Drama3Train(config, recipe["seed"], args.device)
        m.load({n[6:]: t for n, t in tensors.items() if n.startswith("model.")})
        result[name] = {"step": info["step"], "pairs": len(monitor.pairs["heldout"])}
        for split, pairs in monitor.pairs.items():
            result[name].update({f"{split}_{k}": round(v, 4) for k, v in monitor.losses(m, pairs).items()})
    print(json.dumps(result))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)


def trainable(utterances, r):
    """The model's training utterances (splits train and gloss) of at most model.max_frames
    frames and model.max_positions positions (text + bos/eos + frames; 0: no limit). Every
    batch of a CUDA graph is padded to twice the longest, so one long gloss would make every
    step pay for it: the limit keeps the padded length where the example sentences put it."""
    limit = r.get("max_positions", 0)
    return [u for u in utterances if u["split"] in ("train", "gloss") and len(u["codes"]) <= r["max_frames"]
            and (not limit or len(u["tokens"]) + 2 + len(u["codes"]) <= limit)]


class HeldoutMonitor:
    """Teacher-forced losses on sentences never trained on, every model.eval_every steps
    (0: never): each held-out utterance of the codes (split "heldout") paired with a fixed
    training utterance of its speaker as the reference, beside as many fixed training pairs.
    Logged to model/heldout.tsv; the weights of the lowest held-out loss (codebook 0 + tower)
    are kept in BF16 as model/best/ (what `export` writes: the BF16 checkpoint loses nothing
    to the copy); model.patience evaluations (0: off) without a new best stop the stage. On
    2026-12-02 the first model trained without this had memorised its training set: 0.015
    nats of codebook-0 loss on training pairs, 11.5 on held-out ones (docs/training.md)."""

    def __init__(self, folder, config, r, utterances, seed, device):
        self.folder, self.config, self.device = folder, config, device
        self.every, self.patience = r.get("eval_every", 0), r.get("patience", 0)
        self.path = os.path.join(folder, "heldout.tsv")
        self.best_path = os.path.join(folder, "best")
        _, info = state.load(self.best_path)
        self.best_loss = info["heldout"] if info else float("inf")
        self.best_step = info["step"] if info else 0
        self.best, self.stopped, self.since = None, False, 0
        if os.path.exists(self.path):  # evaluations since the best, across chunks
            with open(self.path) as f:
                self.since = sum(1 for line in list(f)[1:] if int(line.split("\t")[0]) > self.best_step)
        rng = random.Random(seed)
        train = sorted((u for u in utterances if u["split"] == "train"), key=lambda u: u["key"])
        by_speaker = {}
        for u in train:
            by_speaker.setdefault(u["speaker"], []).append(u)
        held = sorted((u for u in utterances if u["split"] == "heldout" and u["speaker"] in by_speaker),
                      key=lambda u: u["key"])
        self.pairs = {"heldout": [(rng.choice(by_speaker[u["speaker"]]), u) for u in held]}
        targets = rng.sample(train, min(len(held), len(train)))
        self.pairs["train"] = [(rng.choice([v for v in by_speaker[u["speaker"]] if v is not u] or [u]), u)
                               for u in targets]

    def due(self, step):
        return self.every > 0 and bool(self.pairs["heldout"]) and step % self.every == 0

    def losses(self, m, pairs):
        ctx = (torch.autocast("cuda", dtype=torch.bfloat16) if self.device.startswith("cuda")
               else contextlib.nullcontext())
        total = {"codebook0": 0.0, "tower": 0.0}
        with torch.no_grad(), ctx:
            for b0 in range(0, len(pairs), 16):
                part = pairs[b0:b0 + 16]
                batch = data.collate(self.config, part, "cpu")
                out = m.forward({n: t.to(self.device) for n, t in batch.items()})
                for k in total:
                    total[k] += float(out[k]) * len(part)
        return {k: v / len(pairs) for k, v in total.items()}

    def evaluate(self, m, step):
        """Logs one evaluation; True when the stage should stop (patience spent)."""
        held, train = self.losses(m, self.pairs["heldout"]), self.losses(m, self.pairs["train"])
        loss = held["codebook0"] + held["tower"]
        if loss < self.best_loss:
            self.best_loss, self.best_step, self.since = loss, step, 0
            self.best = {"model." + n: t.detach().to(torch.bfloat16).cpu().clone() for n, t in m.tensors().items()}
        else:
            self.since += 1
        append_losses(self.path, {"step": step, "heldout_codebook0": round(held["codebook0"], 4),
                                  "heldout_tower": round(held["tower"], 4),
                                  "train_codebook0": round(train["codebook0"], 4),
                                  "train_tower": round(train["tower"], 4), "best_step": self.best_step})
        self.stopped = self.patience > 0 and self.since >= self.patience
        if self.stopped:
            print(f"model: stopped early at step {step}: held-out loss {loss:.3f}, best "
                  f"{self.best_loss:.3f} at step {self.best_step} ({self.patience} evaluations ago)")
        return self.stopped

    def save(self):
        if self.best is not None:
            state.save(self.best_path, self.best, {"stage": "model-best", "step": self.best_step,
                                                   "heldout": self.best_loss})


# ----------------------------------------------------------------------------------------------


def model_trainer(config, seed, r, device, graphed, attention="auto"):
    """The model, its optimizer, the step function and, graphed, its GraphedStep (else None).
    A CUDA graph bakes a float learning rate in: graphed, the rate is a device tensor that each
    step fills (AdamW takes a tensor rate when capturable). Training and `bench` start here;
    attention as model.Drama3Train's (bench compares them)."""
    m = model_lib.Drama3Train(config, seed, device, attention)
    lr0 = torch.tensor(r["lr"], device=device) if graphed else r["lr"]
    opt = torch.optim.AdamW(m.params.values(), lr=lr0, betas=(0.9, 0.95),
                            weight_decay=r["weight_decay"], capturable=graphed)
    step_fn = model_step_fn(m, opt, r, autocast=device.startswith("cuda"), graphed=graphed)
    runner = cuda_graph.GraphedStep(step_fn, (opt,)) if graphed else None
    return m, opt, step_fn, runner


# ----------------------------------------------------------------------------------------------


def export(args, config, recipe, out_dir):
    """BF16 checkpoint directory (spec section 2): config.json, shards of at most 16 MiB with
    model.safetensors.index.json, codec/config.json + codec/model.safetensors (float32), and its
    manifest.json (write_manifest). Then,
    where drama is built: `drama quantize OUT OUT-nvfp4` writes the NVFP4 checkpoint + manifest."""
    # The weights of the lowest held-out loss where the stage kept them (HeldoutMonitor), else
    # the last ones.
    tensors, info = state.load(os.path.join(args.work, "model", "best"))
    if info is None:
        tensors, info = state.load(os.path.join(args.work, "model", "state"))
    if info is None:
        raise ValueError(f"{args.work}: no model state")
    print(f"export: the model at step {info['step']}"
          + (f" (lowest held-out loss, {info['heldout']:.3f})" if "heldout" in info else ""))
    model_tensors = {n[6:]: t.to(torch.bfloat16) for n, t in tensors.items() if n.startswith("model.")}
    codec = load_codec_weights(args.work, config, recipe, "cpu")
    if os.path.exists(out_dir):
        raise ValueError(f"{out_dir} exists")
    tmp = out_dir + ".partial"
    os.makedirs(os.path.join(tmp, "codec"))
    model_config = {k: v for k, v in config.items() if k != "codec"}
    with open(os.path.join(tmp, "config.json"), "w") as f:
        json.dump(model_config, f, indent=2)
    parts, current, size = [], {}, 0
    for name in sorted(model_tensors):
        t = model_tensors[name].contiguous()
        b = t.numel() * 2
        if current and size + b > (15 << 20):
            parts.append(current)
            current, size = {}, 0
        current[name] = t
        size += b
    parts.append(current)
    weight_map, total = {}, 0
    for i, part in enumerate(parts):
        fname = f"model-{i + 1:05d}-of-{len(parts):05d}.safetensors"
        safetensors_io.save(os.path.join(tmp, fname), part, {"format": "pt"})
        for n, t in part.items():
            weight_map[n] = fname
            total += t.numel() * 2
    with open(os.path.join(tmp, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2)
    codec_config = dict(config["codec"], model_type="mimi", architectures=["MimiModel"],
                        frame_rate=config["audio"]["frame_rate"])
    with open(os.path.join(tmp, "codec", "config.json"), "w") as f:
        json.dump(codec_config, f, indent=2)
    safetensors_io.save(os.path.join(tmp, "codec", "model.safetensors"),
                        {n: t.float().contiguous() for n, t in codec.tensors().items()}, {"format": "pt"})
    write_manifest(tmp, "drama-mini-bf16")
    os.rename(tmp, out_dir)
    return True


def write_manifest(folder, name):
    """folder/manifest.json over every file in it, as drama pins the checkpoints it writes
    (src/format/manifest.h, pin_local_checkpoint): files sorted by path with sha256 and size, the
    revision the first 40 hex digits of SHA-256 over one "path sha256\n" line per file. So the
    BF16 export runs in `drama say --checkpoint DIR --manifest DIR/manifest.json` as it is (the
    NVFP4 vs BF16 evaluation, docs/training.md). drama has no command that pins a directory it
    did not write, hence this copy of the rule; test_train.py checks it with `drama verify`."""
    files = []
    for top, _, names in os.walk(folder):
        for n in names:
            path = os.path.relpath(os.path.join(top, n), folder).replace(os.sep, "/")
            if path != "manifest.json":
                digest = hashlib.sha256()
                with open(os.path.join(top, n), "rb") as f:
                    for block in iter(lambda: f.read(1 << 20), b""):
                        digest.update(block)
                files.append({"path": path, "sha256": digest.hexdigest(),
                              "size": os.path.getsize(os.path.join(top, n))})
    files.sort(key=lambda e: e["path"].encode())
    lines = "".join(f"{e['path']} {e['sha256']}\n" for e in files)
    manifest = {"files": files, "name": name, "repo": "local/" + name,
                "revision": hashlib.sha256(lines.encode()).hexdigest()[:40], "weights": name}
    with open(os.path.join(folder, "manifest.json"), "w") as f:
        f.write(json.dumps(manifest, indent=2) + "\n")


# ----------------------------------------------------------------------------------------------


def bench_steps(args, config, recipe):
    """Steps per second of the codec (before and with the discriminator), of the decoder stage and
    of the model at several batch sizes, on this device: what the recipe's batch sizes are chosen from
    (docs/training.md). The codec reads the corpus; the model runs on random codes of the
    corpus's lengths (3.2-8.8 s: 40-110 frames at 12.5 frames/s, 80-220 at 25; 40-110 tokens), so
    no encoder is needed. With --profile N, N eager model steps of each batch size also run under
    torch.profiler, and the operators that took the most device (else CPU) time go into the
    result: where a model step's time goes."""
    device = args.device
    sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
    result = {"device": torch.cuda.get_device_name() if device.startswith("cuda") else "cpu",
              "torch": torch.__version__, "codec": [], "model": []}
    rc, rm = recipe["codec"], recipe["model"]
    codec_batches = [int(b) for b in args.batches_codec.split(",") if b]  # "": no codec (no corpus)
    rd = recipe.get("decoder")
    decoder_batches = ([rd["batch"]] if rd and rd.get("steps", 0) > 0 and args.batches_decoder is None else
                       [int(b) for b in (args.batches_decoder or "").split(",") if b])
    waves = (data.load_audio(args.corpus, data.read_corpus(args.corpus, "train")[:2000])
             if codec_batches or decoder_batches else [])
    spectral = codec_lib.SpectralLoss(config["audio"]["sample_rate"])

    def timed(step, warm=min(5, args.bench_steps), count=args.bench_steps):
        for _ in range(warm):
            step()
        sync()
        t0 = time.time()
        for _ in range(count):
            step()
        sync()
        return count / (time.time() - t0)

    variants = (False, True) if device.startswith("cuda") else (False,)
    for batch in codec_batches:
        for adv in (False, True):
            for graphed in variants:  # eager and CUDA graph side by side, one run
                codec, _, _, _, fn, runner = codec_trainer(
                    config, recipe, dict(rc, disc_batch=min(batch, rc.get("disc_batch", batch))),
                    device, graphed, spectral)
                rng = random.Random(1)

                def step():
                    x = data.CropSampler(waves, rc["seconds"], rng.random()).batch(batch)
                    take_step(runner, fn, adv, {"x": x, "keep": codec.keep_mask(rng.randint(1, 8))}, device)
                rate = timed(step)
                result["codec"].append({"batch": batch, "discriminator": adv, "cuda_graph": graphed,
                                        "graph_failed": runner.failed if runner else None,
                                        "steps_per_s": round(rate, 2),
                                        "audio_s_per_s": round(rate * batch * rc["seconds"], 1)})
                print("bench codec", result["codec"][-1], flush=True)
    for batch in decoder_batches:  # the decoder stage's step (with both
        for graphed in variants:  # discriminators from its adv_start on, as it trains)
            codec, _, _, _, fn, runner, _ = decoder_trainer(
                config, recipe, dict(rd, disc_batch=min(batch, rd.get("disc_batch", batch))), device, graphed)
            rng = random.Random(1)
            keep = codec.keep_mask(config["codec"]["num_quantizers"])

            def step():
                x = data.CropSampler(waves, rd["seconds"], rng.random()).batch(batch)
                take_step(runner, fn, True, {"x": x, "keep": keep}, device)
            rate = timed(step)
            result.setdefault("decoder", []).append({
                "batch": batch, "cuda_graph": graphed, "graph_failed": runner.failed if runner else None,
                "mpd_periods": rd.get("mpd_periods") or [], "steps_per_s": round(rate, 2)})
            print("bench decoder", result["decoder"][-1], flush=True)
    g = random.Random(2)
    k, cs = config["audio"]["num_codebooks"], config["audio"]["codebook_size"]
    per_frame = config["audio"]["frame_rate"] / 12.5
    utterances = []
    for i in range(400):
        n = round(g.randint(40, 110) * per_frame)
        utterances.append({"speaker": f"s{i % 20}", "tokens": [g.randrange(256) for _ in range(g.randint(40, 110))],
                           "codes": torch.randint(0, cs, (n, k))})
    # Padded as the training pads: twice its longest utterance, which model.max_positions bounds.
    longest = rm.get("max_positions") or max(len(u["tokens"]) + 2 + len(u["codes"]) for u in utterances)
    # Attention as written and fused (model.Drama3Train), side by side where torch has the fused;
    # batches padded to one shape and grouped by length into bucketed shapes (--grouped G,B:
    # model.group and model.bucket), each eager and as CUDA graphs.
    attentions = ("explicit", "sdpa") if device.startswith("cuda") and model_lib.HAS_SDPA else ("explicit",)
    layouts = [(1, 0)] + ([tuple(int(v) for v in args.grouped.split(","))] if args.grouped else [])
    sampler = data.PairSampler(utterances, 0, rm["drop_reference"], rm["max_frames"])
    for batch, (group, bucket), graphed, attention in [
            (int(b), lay, g_, a) for b in args.batches_model.split(",") if b for lay in layouts
            for g_ in variants for a in attentions]:
        _, _, fn, runner = model_trainer(config, 1, rm, device, graphed, attention)
        r = dict(rm, batch=batch, group=group, bucket=bucket)
        counter = [0]

        def step():
            counter[0] += 1
            b, length = model_batch(config, sampler, 0, counter[0], r, longest, graphed)
            take_step(runner, fn, length, b, device)
        # every shape captured (graphed) or planned (cuDNN's attention) before the timing
        shapes = -(-2 * longest // bucket) if bucket else 1
        rate = timed(step, warm=shapes * (4 if graphed else 1) + min(5, args.bench_steps))
        result["model"].append({"batch": batch, "group": group, "bucket": bucket, "cuda_graph": graphed,
                                "attention": attention, "graph_failed": runner.failed if runner else None,
                                "graphs": len(runner.graphs) if runner else None,
                                "steps_per_s": round(rate, 2), "examples_per_s": round(rate * batch, 1)})
        if args.profile and not graphed:
            result["model"][-1]["profile"] = profile_steps(step, args.profile, device)
        print("bench model", result["model"][-1], flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    return result


def profile_steps(step, count, device, top=15):
    """`count` calls of `step` under torch.profiler: the `top` operators by total device time (CPU
    time where the device is the CPU), each with its calls and its share of the profiled time."""
    from torch.profiler import ProfilerActivity, profile
    on_cuda = device.startswith("cuda")
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if on_cuda else [])
    with profile(activities=activities) as prof:
        for _ in range(count):
            step()
        if on_cuda:
            torch.cuda.synchronize()
    rows = []
    for e in prof.key_averages():  # self times: an operator's own, not its callees' (no double count)
        if on_cuda:
            us = getattr(e, "self_device_time_total", None)
            us = e.self_cuda_time_total if us is None else us  # torch before 2.4
        else:
            us = e.self_cpu_time_total
        rows.append((us, e.key, e.count))
    total = sum(r[0] for r in rows) or 1
    rows.sort(key=lambda r: -r[0])
    return {"steps": count, "clock": "device (self)" if on_cuda else "cpu (self)",
            "ms_per_step": round(total / 1e3 / count, 3),
            "top": [{"op": key, "calls_per_step": round(calls / count, 1),
                     "ms_per_step": round(us / 1e3 / count, 3), "share": round(us / total, 4)}
                    for us, key, calls in rows[:top]]}


# ----------------------------------------------------------------------------------------------


def main(argv=None):
    p = argparse.ArgumentParser(description="drama-mini training driver")
    p.add_argument("stage", choices=("next",) + STAGES + ("eval-codec", "eval-model", "bench"))
    p.add_argument("--work", required=True)
    p.add_argument("--corpus")
    p.add_argument("-o", "--output", help="export: the checkpoint directory to write")
    p.add_argument("--config", default=os.path.join(HERE, "drama-mini.json"))
    p.add_argument("--recipe", default=os.path.join(HERE, "recipe.json"))
    p.add_argument("--set", action="append", help="recipe override KEY=JSON, e.g. codec.steps=20")
    p.add_argument("--minutes", type=float)
    p.add_argument("--until", choices=STAGES, help="next: stop after this stage (even with time left)")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--batches-codec", default="24,64,128", help="bench: codec batch sizes")
    p.add_argument("--batches-model", default="32,64,128", help="bench: model batch sizes")
    p.add_argument("--batches-decoder", default=None,
                   help="bench: decoder-stage batch sizes (default: the recipe's decoder batch, if any)")
    p.add_argument("--json", help="bench, eval-model: where to write the figures")
    p.add_argument("--decoded", action="store_true",
                   help="eval-codec: score the decodes already in WORK/codec/eval (no codec weights)")
    p.add_argument("--bench-steps", type=int, default=20, help="bench: timed steps per setting")
    p.add_argument("--grouped", default="8,128",
                   help="bench: also time batches grouped by length, G,B (model.group, model.bucket); '' not")
    p.add_argument("--profile", type=int, default=0,
                   help="bench: profile this many eager model steps per batch size (torch.profiler)")
    args = p.parse_args(argv)
    config = load_json(args.config)
    recipe = apply_overrides(load_json(args.recipe), args.set)
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(recipe["seed"])
    os.makedirs(args.work, exist_ok=True)
    minutes = args.minutes if args.minutes is not None else recipe["minutes_per_chunk"]
    began = time.time()
    deadline = began + 60 * minutes
    progress = Progress(args.work)
    # `next` asks every stage in order; a finished one returns at once (its saved step count has
    # reached the recipe's), so raising a recipe's steps continues that stage.
    stages = list(STAGES) if args.stage == "next" else [args.stage]
    if args.stage == "bench":
        bench_steps(args, config, recipe)
        return 0
    if args.stage == "eval-codec":  # reconstruction WER of the saved codec (on any machine)
        # The codec as training left it: with the decoder stage's state, that stage's figures
        # (decoder/eval-STEP.json), else the codec stage's.
        stage = "decoder" if codec_step(args.work, "decoder") is not None else "codec"
        r = recipe[stage] if stage in recipe else recipe["codec"]
        if args.decoded:  # the decodes another machine wrote: no codec weights needed
            evaluate_codec(args, None, r, codec_step(args.work, stage), decoded=True, stage=stage)
        else:
            evaluate_codec(args, load_codec_weights(args.work, config, recipe, args.device),
                           r, codec_step(args.work, stage), stage=stage)
        return 0
    if args.stage == "eval-model":  # held-out vs training losses of the saved model (any machine)
        evaluate_model(args, config, recipe)
        return 0
    for stage in stages:
        if args.stage == "next" and stage in ("codec", "model", "decoder", "export") and (
                stage in progress.info["done"] or stage == "export") and not os.path.exists(
                os.path.join(args.work, "codec" if stage == "export" else stage, "state", "state.json")):
            # The GPU machine gets only what the later stages need (docs/training.md): a stage
            # done elsewhere whose state stayed there is skipped, and export waits for a machine
            # with the codec state.
            print(f"train: {stage} skipped ({'no codec state here' if stage == 'export' else 'done; its state is not here'})")
            continue
        if stage != "export" and not args.corpus:
            p.error("--corpus is required for " + stage)
        t0 = time.time()
        if stage == "codec":
            done = train_codec(args, config, recipe, deadline)
        elif stage == "encode":
            done = encode_corpus(args, config, recipe, deadline)
        elif stage == "model":
            done = train_model(args, config, recipe, deadline)
        elif stage == "decoder":
            done = train_decoder(args, config, recipe, deadline)
        else:
            out = args.output or os.path.join(args.work, "export")
            done = True if args.stage == "next" and os.path.exists(out) else export(args, config, recipe, out)
        # progress.json records GPU time; a stage run on the CPU (the encode, on the development
        # machine) is recorded under "<stage>@cpu" so the two are never summed by mistake.
        progress.add_seconds(stage if args.device.startswith("cuda") else f"{stage}@cpu", time.time() - t0)
        if done:
            progress.mark_done(stage)
        if args.device.startswith("cuda"):
            progress.info["device"] = torch.cuda.get_device_name()
            progress.info["torch"] = torch.__version__
        progress.save()
        print(f"train: {stage} {'done' if done else 'paused'} after {time.time() - t0:.0f} s")
        if not done or time.time() >= deadline or stage == args.until:
            break
    print(f"train: progress {json.dumps(progress.info)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
