"""How well the voice-cloning check's speaker classifier names the corpus's own speakers.

    python3 tools/eval/speaker_check.py --corpus DIR [--train-per-speaker 40]
        [--test-per-speaker 40] [--json OUT]

The classifier of tools/eval/evaluate.py (tools/eval/speaker_id.py, trained on the first N
training utterances of every speaker, as evaluate.py trains it) scores (a) every held-out
utterance and (b) the next M training utterances of every speaker (sentences it did not see).
Printed / written: accuracy per set, per speaker, per voice (a voice's pitch/rate settings
counted as one, to tell "wrong setting of the right voice" from "wrong voice"), and the most
frequent confusions. This is the instrument's own accuracy: drama-mini's cloning figure means
little where the classifier cannot tell the source speakers apart.

With --codec DIR (a checkpoint's codec/ folder: config.json + model.safetensors), the first
--codec-per-speaker held-out utterances of every speaker are also scored after a round trip
through that codec (encode to every codebook, decode: tools/train/codec.py, whose decode
test_train holds to tools/reference/mimi.py) and through its autoencoder alone, beside the same
utterances as recorded: how much of a speaker's identity, as the classifier sees it, survives
the codec, which bounds what any model speaking through it can clone."""

import argparse
import collections
import json
import os
import platform
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import evaluate  # noqa: E402
import source_wer  # noqa: E402
import speaker_id  # noqa: E402


def score(clf, rows, corpus):
    pred = clf.predict([evaluate.feature_of(os.path.join(corpus, r["path"])) for r in rows])
    truth = [r["speaker"] for r in rows]
    per_speaker = collections.defaultdict(lambda: [0, 0])
    for p_, t in zip(pred, truth):
        per_speaker[t][0] += p_ == t
        per_speaker[t][1] += 1
    confusions = collections.Counter((t, p_) for p_, t in zip(pred, truth) if p_ != t)
    voice = source_wer.voice_of
    return {
        "utterances": len(rows),
        "accuracy": round(sum(p_ == t for p_, t in zip(pred, truth)) / len(rows), 4),
        "voice_accuracy": round(sum(voice(p_) == voice(t) for p_, t in zip(pred, truth)) / len(rows), 4),
        "per_speaker": {s: round(a / n, 4) for s, (a, n) in sorted(per_speaker.items())},
        "top_confusions": [{"speaker": t, "named": p_, "count": c} for (t, p_), c in confusions.most_common(8)],
    }


def codec_round_trip(clf, rows, corpus, codec_dir):
    """Accuracy on rows as recorded, after encode + decode through the codec at codec_dir, and
    through its autoencoder alone (the quantizer's projections without the codebooks: where the
    first loses a speaker and the second does not, the codebooks are what lose it)."""
    import numpy as np
    import torch
    for sub in ("reference", "corpus", "train"):
        sys.path.insert(0, os.path.join(HERE, "..", sub))
    import audio  # noqa: E402
    import codec as codec_lib  # noqa: E402
    import safetensors_io  # noqa: E402
    with open(os.path.join(codec_dir, "config.json")) as f:
        config = json.load(f)
    codec = codec_lib.Codec(config, 0)
    codec.load(safetensors_io.load(os.path.join(codec_dir, "model.safetensors"))[0])
    rate = config["sampling_rate"]
    feats = {"through_codec": [], "through_autoencoder": []}
    with torch.no_grad():
        for r in rows:
            x, got = audio.read_wav(os.path.join(corpus, r["path"]))
            x = torch.from_numpy(np.asarray(audio.resample(x, got, rate) if got != rate else x,
                                            dtype=np.float32))[None]
            for name, y in (("through_codec", codec.decode(codec.encode(x))),
                            ("through_autoencoder", codec.reconstruct_unquantized(x))):
                feats[name].append(speaker_id.features(audio.resample(y[0].numpy(), rate, 16000), 16000))
    truth = [r["speaker"] for r in rows]
    result = {"utterances": len(rows), "accuracy_recorded": score(clf, rows, corpus)["accuracy"]}
    for name, f in feats.items():
        pred = clf.predict(f)
        result["accuracy_" + name] = round(sum(p_ == t for p_, t in zip(pred, truth)) / len(rows), 4)
        result["voice_accuracy_" + name] = round(
            sum(source_wer.voice_of(p_) == source_wer.voice_of(t) for p_, t in zip(pred, truth)) / len(rows), 4)
    return result


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--corpus", required=True)
    p.add_argument("--train-per-speaker", type=int, default=40)
    p.add_argument("--test-per-speaker", type=int, default=40)
    p.add_argument("--codec", help="also score held-out utterances through this codec folder")
    p.add_argument("--codec-per-speaker", type=int, default=4)
    p.add_argument("--json")
    args = p.parse_args(argv)
    start = time.time()
    rows = source_wer.read_corpus(args.corpus)
    train, unseen, seen = [], [], collections.Counter()
    for r in rows:
        if r["split"] != "train":
            continue
        seen[r["speaker"]] += 1
        if seen[r["speaker"]] <= args.train_per_speaker:
            train.append(r)
        elif seen[r["speaker"]] <= args.train_per_speaker + args.test_per_speaker:
            unseen.append(r)
    heldout = [r for r in rows if r["split"] == "heldout"]
    clf = speaker_id.SpeakerClassifier().fit(
        [evaluate.feature_of(os.path.join(args.corpus, r["path"])) for r in train],
        [r["speaker"] for r in train])
    result = {
        "what": "speaker classifier of the cloning check on the corpus's own audio (tools/eval/speaker_check.py)",
        "settings": {"speakers": len(clf.classes), "train_per_speaker": args.train_per_speaker,
                     "test_per_speaker": args.test_per_speaker,
                     "features": "mean/std of 13 MFCCs and deltas at 16 kHz; logistic regression"},
        "heldout": score(clf, heldout, args.corpus) if heldout else None,
        "unseen_train_sentences": score(clf, unseen, args.corpus) if unseen else None,
        "codec_round_trip": None,
        "seconds": None,
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "machine": platform.machine(),
    }
    if args.codec:
        picked, per = [], collections.Counter()
        for r in heldout:  # the first codec_per_speaker held-out utterances of each speaker
            per[r["speaker"]] += 1
            if per[r["speaker"]] <= args.codec_per_speaker:
                picked.append(r)
        result["codec_round_trip"] = codec_round_trip(clf, picked, args.corpus, args.codec)
        result["settings"]["codec_per_speaker"] = args.codec_per_speaker
    result["seconds"] = round(time.time() - start, 1)
    text = json.dumps(result, indent=1)
    print(text)
    if args.json:
        with open(args.json + ".partial", "w") as f:
            f.write(text + "\n")
        os.replace(args.json + ".partial", args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
