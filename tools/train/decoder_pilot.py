"""A CPU pilot of a loss for the decoder (docs/training.md, "A statistics loss for the decoder"):
does matching whole crops' log-mel statistics undo the colouring that hides speakers from the
cloning check?

    python3 tools/train/decoder_pilot.py --codec models/drama-mini/codec --train-corpus TRAIN \\
        --eval-corpus EVAL --weights 1,0 --steps 300 [--crops 512] [--batch 8] [--lr 1e-4] \\
        [--json OUT]

From the codec at --codec, one fine-tune per weight W of --weights, each from the same start on
the same crops in the same order: the decoding parameters (Codec.decoder_names: every code stays
what it was) under the decoder stage's spectral losses (codec.SpectralLoss) plus W times
stats_loss; no discriminator. The crops are 1.6 s of TRAIN's training utterances whose sentence
is nowhere in EVAL (so none of the classifier's own training audio), encoded once. Each result,
and the codec as it came, is scored on EVAL as speaker_check scores a codec: the cloning check's
classifier (trained on the first 40 training utterances of every speaker) on the round trips of
the first 4 held-out utterances of every speaker, and pocketsphinx's WER on the round trips of
the first 2 held-out utterances of every speaker, beside the recordings' own. Writes a receipt."""

import argparse
import os
import platform
import random
import sys
import tempfile
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
for sub in ("", "../reference", "../corpus", "../eval"):
    sys.path.insert(0, os.path.normpath(os.path.join(HERE, sub)))

import asr  # noqa: E402
import audio  # noqa: E402
import codec as codec_lib  # noqa: E402
import data  # noqa: E402
import evaluate  # noqa: E402
import receipts  # noqa: E402
import source_wer  # noqa: E402
import speaker_check  # noqa: E402
import speaker_id  # noqa: E402


def stats_loss(y_hat, y, filters, n_fft=1024):
    """L1 between the per-band mean and deviation over time of log-mel (filters [bands, bins])
    of y_hat and of y ([B, T] each): the crops' spectral statistics, which frame-wise losses do
    not constrain."""
    window = torch.hann_window(n_fft, device=y.device)

    def log_mel(s):
        return torch.log(filters @ torch.stft(s, n_fft, n_fft // 4, window=window,
                                              return_complex=True).abs() + 1e-5)

    a, b = log_mel(y_hat), log_mel(y)
    return (a.mean(-1) - b.mean(-1)).abs().mean() + (a.std(-1) - b.std(-1)).abs().mean()


def training_crops(train_corpus, eval_corpus, count, seconds, seed, rate=24000):
    """[count, seconds * rate] float32 crops of train_corpus's training utterances whose sentence
    is not in eval_corpus, drawn with a seeded generator."""
    unseen = {r["sentence"] for r in source_wer.read_corpus(eval_corpus)}
    rows = [r for r in data.read_corpus(train_corpus, "train") if r["sentence"] not in unseen]
    if not rows:
        raise SystemExit(f"{train_corpus}: no training utterance outside {eval_corpus}")
    waves = data.load_audio(train_corpus, rows)
    return data.CropSampler(waves, seconds, seed, rate).batch(count), len(rows)


def fine_tune(codec_dir, crops, codes, weight, steps, batch, lr, seed):
    """The codec at codec_dir with its decoding parameters trained `steps` steps on (crops,
    codes): spectral losses + weight * stats_loss. Returns (codec, losses of the last step)."""
    codec, rate = speaker_check.load_codec(codec_dir)
    names = set(codec.decoder_names())
    for n, p in codec.params.items():
        p.requires_grad_(n in names)
    trained = [codec.params[n] for n in sorted(names)]
    opt = torch.optim.AdamW(trained, lr=lr, betas=(0.8, 0.99))
    spectral = codec_lib.SpectralLoss(rate)
    filters = codec_lib._mel_filters(rate, 1024, 64)
    rng = random.Random(seed)
    last = {}
    for _ in range(steps):
        pick = [rng.randrange(len(crops)) for _ in range(batch)]
        x, c = crops[pick], codes[pick]
        y = codec._decode(c)[:, : x.shape[1]]
        mel, stft = spectral(y, x)
        stats = stats_loss(y, x, filters)
        loss = mel + stft + weight * stats
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(trained, 1.0)
        opt.step()
        last = {"mel": round(float(mel), 4), "stft": round(float(stft), 4), "stats": round(float(stats), 4)}
    for p in trained:
        p.requires_grad_(False)
    return codec, last


def score(codec, rate, clf, speaker_rows, wer_rows, corpus, work, name):
    """The cloning check's classifier on speaker_rows' round trips, and WER of wer_rows' round
    trips (wer_rows among speaker_rows; wavs written under work)."""
    with torch.no_grad():  # each utterance through the codec once: wer_rows are among speaker_rows
        trips = {r["path"]: codec.decode(codec.encode(speaker_check.read_pcm(corpus, r, rate)))[0].numpy()
                 for r in speaker_rows}
    feats = [speaker_id.features(audio.resample(trips[r["path"]], rate, 16000), 16000) for r in speaker_rows]
    items = []
    for i, r in enumerate(wer_rows):
        path = os.path.join(work, f"{name}-{i}.wav")
        audio.write_wav(path, trips[r["path"]], rate)
        items.append((f"{name}.{i}", path))
    accuracy, voice_accuracy = speaker_check.accuracies(clf.predict(feats), speaker_rows)
    hyp = asr.recognize(items)
    return {"speaker_accuracy": accuracy, "voice_accuracy": voice_accuracy,
            "wer": round(asr.wer((r["text"], hyp[uid]) for r, (uid, _) in zip(wer_rows, items)), 4)}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--codec", required=True)
    p.add_argument("--train-corpus", required=True)
    p.add_argument("--eval-corpus", required=True)
    p.add_argument("--weights", default="1,0")
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--crops", type=int, default=512)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--lr", type=float, default=1e-4)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--json")
    args = p.parse_args(argv)
    start = time.time()
    torch.manual_seed(args.seed)
    crops, utterances = training_crops(args.train_corpus, args.eval_corpus, args.crops, 1.6, args.seed)
    base, rate = speaker_check.load_codec(args.codec)
    with torch.no_grad():
        codes = torch.cat([base.encode(crops[i:i + 32]) for i in range(0, len(crops), 32)])
    rows = source_wer.read_corpus(args.eval_corpus)
    train_rows = speaker_check.first_per_speaker(rows, 40, "train")
    clf = speaker_id.SpeakerClassifier().fit(
        [evaluate.feature_of(os.path.join(args.eval_corpus, r["path"])) for r in train_rows],
        [r["speaker"] for r in train_rows])
    speaker_rows, wer_rows = (speaker_check.first_per_speaker(rows, 4, "heldout"),
                             speaker_check.first_per_speaker(rows, 2, "heldout"))
    recorded = asr.recognize([(f"recorded.{i}", os.path.join(args.eval_corpus, r["path"]))
                              for i, r in enumerate(wer_rows)])
    result = {
        "what": "decoder statistics-loss pilot on the CPU (tools/train/decoder_pilot.py)",
        "settings": {"weights": args.weights, "steps": args.steps, "crops": args.crops,
                     "crop_seconds": 1.6, "batch": args.batch, "lr": args.lr, "seed": args.seed,
                     "training_utterances": utterances, "speaker_utterances": len(speaker_rows),
                     "wer_utterances": len(wer_rows), "classifier_train_utterances": len(train_rows),
                     "stats_loss": "L1 of per-band mean and deviation over time of log-mel, n_fft 1024, 64 bands"},
        "recorded": {"speaker_accuracy": speaker_check.accuracies(
            clf.predict([evaluate.feature_of(os.path.join(args.eval_corpus, r["path"])) for r in speaker_rows]),
            speaker_rows)[0],
            "wer": round(asr.wer((r["text"], recorded[f"recorded.{i}"]) for i, r in enumerate(wer_rows)), 4)},
        "runs": {},
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, torch {torch.__version__}",
    }
    with tempfile.TemporaryDirectory(prefix="drama-pilot-") as work:
        result["runs"]["codec as it came"] = score(base, rate, clf, speaker_rows, wer_rows,
                                                   args.eval_corpus, work, "base")
        for w in (float(v) for v in args.weights.split(",")):
            t0 = time.time()
            codec, last = fine_tune(args.codec, crops, codes, w, args.steps, args.batch, args.lr, args.seed)
            seconds = round(time.time() - t0, 1)
            name = f"stats weight {w:g}"
            result["runs"][name] = {**score(codec, rate, clf, speaker_rows, wer_rows, args.eval_corpus,
                                            work, f"w{len(result['runs'])}"),
                                    "last_step_losses": last, "train_seconds": seconds}
            receipts.emit(result, args.json)  # written again after every run
    result["seconds"] = round(time.time() - start, 1)
    receipts.emit(result, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
