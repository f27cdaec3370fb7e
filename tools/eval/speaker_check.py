"""How well the voice-cloning check's speaker classifier names the corpus's own speakers.

    python3 tools/eval/speaker_check.py --corpus DIR [--train-per-speaker 40]
        [--test-per-speaker 40] [--heldout-per-speaker N] [--codec DIR [--codec-per-speaker 4]
        [--codec-probes] [--codec-colour] [--outputs WORK]] [--json OUT]

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
the codec, which bounds what any model speaking through it can clone. --codec-probes adds two
classifiers trained after the codec (codec_probes): on the codes themselves, and on the training
utterances' round trips: whether the codes still carry the speaker, and whether the decoded audio
still tells speakers apart, only coloured. --codec-colour asks what kind of colouring it is
(codec_colour). --outputs WORK names the model's outputs of a finished
evaluate.py run with both the cloning check's classifier and the round-trip one (model_outputs)."""

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
import receipts  # noqa: E402
import source_wer  # noqa: E402
import speaker_id  # noqa: E402


def score(clf, rows, corpus):
    pred = clf.predict([evaluate.feature_of(os.path.join(corpus, r["path"])) for r in rows])
    return named(pred, [r["speaker"] for r in rows])


def named(pred, truth):
    """Accuracy of the speakers named (pred) against the true ones, by voice too (a voice's
    pitch/rate settings counted as one), per speaker, and the most frequent confusions."""
    per_speaker = collections.defaultdict(lambda: [0, 0])
    for p_, t in zip(pred, truth):
        per_speaker[t][0] += p_ == t
        per_speaker[t][1] += 1
    confusions = collections.Counter((t, p_) for p_, t in zip(pred, truth) if p_ != t)
    voice = source_wer.voice_of
    return {
        "utterances": len(truth),
        "accuracy": round(sum(p_ == t for p_, t in zip(pred, truth)) / len(truth), 4),
        "voice_accuracy": round(sum(voice(p_) == voice(t) for p_, t in zip(pred, truth)) / len(truth), 4),
        "per_speaker": {s: round(a / n, 4) for s, (a, n) in sorted(per_speaker.items())},
        "top_confusions": [{"speaker": t, "named": p_, "count": c} for (t, p_), c in confusions.most_common(8)],
    }


def load_codec(codec_dir):
    """tools/train/codec.py's Codec with the weights of a checkpoint's codec/ folder."""
    for sub in ("reference", "corpus", "train"):
        sys.path.insert(0, os.path.join(HERE, "..", sub))
    import codec as codec_lib  # noqa: E402
    import safetensors_io  # noqa: E402
    with open(os.path.join(codec_dir, "config.json")) as f:
        config = json.load(f)
    codec = codec_lib.Codec(config, 0)
    codec.load(safetensors_io.load(os.path.join(codec_dir, "model.safetensors"))[0])
    return codec, config["sampling_rate"]


def read_pcm(corpus, row, rate):
    """A corpus recording as a [1, samples] float32 tensor at the codec's rate."""
    import numpy as np
    import torch
    import audio  # noqa: E402 (tools/corpus, on the path after load_codec)
    x, got = audio.read_wav(os.path.join(corpus, row["path"]))
    return torch.from_numpy(np.asarray(audio.resample(x, got, rate) if got != rate else x, dtype=np.float32))[None]


def accuracies(pred, rows):
    truth = [r["speaker"] for r in rows]
    return (round(sum(p_ == t for p_, t in zip(pred, truth)) / len(rows), 4),
            round(sum(source_wer.voice_of(p_) == source_wer.voice_of(t) for p_, t in zip(pred, truth)) / len(rows), 4))


def codec_round_trip(clf, rows, corpus, codec_dir):
    """Accuracy on rows as recorded, after encode + decode through the codec at codec_dir, and
    through its autoencoder alone (the quantizer's projections without the codebooks: where the
    first loses a speaker and the second does not, the codebooks are what lose it)."""
    import torch
    import audio  # noqa: E402
    codec, rate = load_codec(codec_dir)
    feats = {"through_codec": [], "through_autoencoder": []}
    with torch.no_grad():
        for r in rows:
            x = read_pcm(corpus, r, rate)
            for name, y in (("through_codec", codec.decode(codec.encode(x))),
                            ("through_autoencoder", codec.reconstruct_unquantized(x))):
                feats[name].append(speaker_id.features(audio.resample(y[0].numpy(), rate, 16000), 16000))
    result = {"utterances": len(rows), "accuracy_recorded": score(clf, rows, corpus)["accuracy"]}
    for name, f in feats.items():
        result["accuracy_" + name], result["voice_accuracy_" + name] = accuracies(clf.predict(f), rows)
    return result


def round_trip_features(codec, rate, corpus, rows):
    """Per row: the codes' embedding statistics (mean and deviation over frames of the decoder's
    input) and the MFCC features of the decoded round trip."""
    import numpy as np
    import torch
    import audio  # noqa: E402
    codes_f, decoded_f = [], []
    with torch.no_grad():
        for r in rows:
            codes = codec.encode(read_pcm(corpus, r, rate))
            emb = codec.embedding(codes)[0].numpy()
            codes_f.append(np.concatenate([emb.mean(1), emb.std(1)]))
            y = codec.decode(codes)[0].numpy()
            decoded_f.append(speaker_id.features(audio.resample(y, rate, 16000), 16000))
    return codes_f, decoded_f


def model_outputs(clf, train_rows, corpus, codec_dir, work):
    """The model's outputs of a finished evaluate.py run (WORK/audio/VOICE-gGAMMA/*.wav, VOICE a
    corpus speaker), named by two classifiers: the cloning check's (trained on the recordings:
    the figure of evaluate.py's receipt, recomputed) and the matched one (trained on the same
    training utterances' round trips through the codec the outputs were decoded with, codec_dir):
    whether the model says the voice's speaker as the codec hears that speaker, apart from how
    the decoder colours every speaker."""
    codec, rate = load_codec(codec_dir)
    _, train_decoded = round_trip_features(codec, rate, corpus, train_rows)
    matched = speaker_id.SpeakerClassifier().fit(train_decoded, [r["speaker"] for r in train_rows])
    result = {"train_utterances": len(train_rows), "folders": []}
    audio_dir = os.path.join(work, "audio")
    by_gamma = collections.defaultdict(list)  # gamma -> [(voice, features)]
    for name in sorted(os.listdir(audio_dir)):
        voice, _, gamma = name.rpartition("-g")
        if voice not in clf.classes or not gamma:
            continue  # "none-g1" (no voice) and the codec's round trips
        result["folders"].append(name)
        folder = os.path.join(audio_dir, name)
        for f in sorted(os.listdir(folder)):
            if f.endswith(".wav"):
                by_gamma[gamma].append((voice, evaluate.feature_of(os.path.join(folder, f))))
    if not by_gamma:
        raise SystemExit(f"{audio_dir}: no outputs of a corpus speaker's voice")
    for gamma, items in sorted(by_gamma.items()):
        truth, feats = [v for v, _ in items], [f for _, f in items]
        result["gamma " + gamma] = {"recorded_classifier": named(clf.predict(feats), truth),
                                    "matched_classifier": named(matched.predict(feats), truth)}
    return result


def codec_probes(train_rows, rows, corpus, codec_dir):
    """Where the codec loses a speaker: two classifiers trained (as the cloning check's is) on the
    training utterances, but after the codec, and scored on rows after it too.
    - codes: mean and deviation over frames of the decoder's input (Codec.embedding of the codes):
      whether the codes still carry the speaker, whatever the decoder makes of them;
    - matched: the MFCC classifier trained on the training utterances' round trips: whether the
      decoded audio still tells the speakers apart, colouring and all (the cloning check's
      classifier is trained on recorded audio)."""
    codec, rate = load_codec(codec_dir)
    train_codes, train_decoded = round_trip_features(codec, rate, corpus, train_rows)
    test_codes, test_decoded = round_trip_features(codec, rate, corpus, rows)
    labels = [r["speaker"] for r in train_rows]
    result = {"train_utterances": len(train_rows), "utterances": len(rows)}
    for name, (tr, te) in (("codes", (train_codes, test_codes)), ("matched", (train_decoded, test_decoded))):
        clf = speaker_id.SpeakerClassifier().fit(tr, labels)
        result["accuracy_" + name], result["voice_accuracy_" + name] = accuracies(clf.predict(te), rows)
    return result


def codec_colour(train_rows, rows, corpus, codec_dir, speech_db=40):
    """What kind of change hides the speakers of the codec's round trips from the cloning check's
    classifier (trained on recordings). Each entry: that classifier's accuracy on rows as
    recorded and through the codec.
    - as_checked: the check's own features (the codec_round_trip figure, on these rows);
    - static_shift: the training pairs' mean feature difference (recorded minus round trip) added
      to every round trip: a colouring the same for every utterance, as an equaliser makes;
    - linear_map: a least-squares affine map from round-trip to recorded features, fitted on the
      training pairs: any colouring linear in the features, the same for every speaker;
    - without_delta_means: the classifier trained and scoring without the 13 delta means (which
      track how an utterance starts and ends, not who speaks);
    - speech_frames: the features over the frames within speech_db dB of the loudest only
      (speaker_id.features' energy detector): whether it is the silences the codec fills."""
    import numpy as np
    import torch
    import audio  # noqa: E402
    codec, rate = load_codec(codec_dir)
    pcm = {}  # (set, kind) -> [16 kHz signals]
    with torch.no_grad():
        for name, rs in (("train", train_rows), ("test", rows)):
            for r in rs:
                x = read_pcm(corpus, r, rate)
                for kind, y in (("recorded", x), ("round_trip", codec.decode(codec.encode(x)))):
                    pcm.setdefault((name, kind), []).append(audio.resample(y[0].numpy(), rate, 16000))
    train_y = [r["speaker"] for r in train_rows]

    def accuracy(clf, f):
        return accuracies(clf.predict(f), rows)[0]

    def features(speech=None, columns=slice(None)):
        return {k: np.array([speaker_id.features(x, 16000, speech) for x in v])[:, columns]
                for k, v in pcm.items()}

    def entry(f, test_round_trip=None):
        clf = speaker_id.SpeakerClassifier().fit(list(f["train", "recorded"]), train_y)
        rt = f["test", "round_trip"] if test_round_trip is None else test_round_trip
        return {"recorded": accuracy(clf, list(f["test", "recorded"])),
                "through_codec": accuracy(clf, list(rt))}

    full = features()
    tr_rec, tr_rt, te_rt = full["train", "recorded"], full["train", "round_trip"], full["test", "round_trip"]
    lift = lambda a: np.hstack([a, np.ones((len(a), 1))])  # noqa: E731
    linear = np.linalg.lstsq(lift(tr_rt), tr_rec, rcond=None)[0]
    return {
        "train_utterances": len(train_rows), "utterances": len(rows), "speech_db": speech_db,
        "as_checked": entry(full),
        "static_shift": entry(full, te_rt + (tr_rec.mean(0) - tr_rt.mean(0))),
        "linear_map": entry(full, lift(te_rt) @ linear),
        "without_delta_means": entry(features(columns=np.r_[0:26, 39:52])),
        "speech_frames": entry(features(speech_db)),
    }


def first_per_speaker(rows, count, split=None, skip=0):
    """rows of `split` (any split when None) in corpus order, each speaker's first `skip` passed
    over and the next `count` kept (all of them when count is None)."""
    picked, seen = [], collections.Counter()
    for r in rows:
        if split is None or r["split"] == split:
            seen[r["speaker"]] += 1
            if seen[r["speaker"]] > skip and (count is None or seen[r["speaker"]] <= skip + count):
                picked.append(r)
    return picked


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--corpus", required=True)
    p.add_argument("--train-per-speaker", type=int, default=40)
    p.add_argument("--test-per-speaker", type=int, default=40)
    p.add_argument("--heldout-per-speaker", type=int, default=None,
                   help="score only the first N held-out recordings of each speaker (default: all)")
    p.add_argument("--codec", help="also score held-out utterances through this codec folder")
    p.add_argument("--codec-per-speaker", type=int, default=4)
    p.add_argument("--codec-probes", action="store_true",
                   help="with --codec: classifiers trained after the codec too (codec_probes)")
    p.add_argument("--codec-colour", action="store_true",
                   help="with --codec: what kind of change hides the speakers of the round trips "
                        "from the classifier (codec_colour)")
    p.add_argument("--outputs", metavar="WORK",
                   help="with --codec: also name the model's outputs of a finished evaluate.py "
                        "run (its --work folder) with the cloning check's classifier and the one "
                        "trained on round trips through that codec (model_outputs)")
    p.add_argument("--json")
    args = p.parse_args(argv)
    if (args.outputs or args.codec_colour) and not args.codec:  # before any work
        raise SystemExit("--outputs and --codec-colour need --codec (the codec to look through)")
    start = time.time()
    rows = source_wer.read_corpus(args.corpus)
    train = first_per_speaker(rows, args.train_per_speaker, "train")
    unseen = first_per_speaker(rows, args.test_per_speaker, "train", skip=args.train_per_speaker)
    # every held-out recording, or the first --heldout-per-speaker of each speaker
    heldout = first_per_speaker(rows, args.heldout_per_speaker, "heldout")
    clf = speaker_id.SpeakerClassifier().fit(
        [evaluate.feature_of(os.path.join(args.corpus, r["path"])) for r in train],
        [r["speaker"] for r in train])
    result = {
        "what": "speaker classifier of the cloning check on the corpus's own audio (tools/eval/speaker_check.py)",
        "settings": {"speakers": len(clf.classes), "train_per_speaker": args.train_per_speaker,
                     "test_per_speaker": args.test_per_speaker,
                     "heldout_per_speaker": args.heldout_per_speaker,
                     "features": "mean/std of 13 MFCCs and deltas at 16 kHz; logistic regression"},
        "heldout": score(clf, heldout, args.corpus) if heldout else None,
        "unseen_train_sentences": score(clf, unseen, args.corpus) if unseen else None,
        "codec_round_trip": None,
        "codec_probes": None,
        "seconds": None,
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "machine": platform.machine(),
    }
    if args.codec:
        picked = first_per_speaker(heldout, args.codec_per_speaker)
        result["codec_round_trip"] = codec_round_trip(clf, picked, args.corpus, args.codec)
        result["settings"]["codec_per_speaker"] = args.codec_per_speaker
        if args.codec_probes:
            result["codec_probes"] = codec_probes(train, picked, args.corpus, args.codec)
        if args.codec_colour:
            result["codec_colour"] = codec_colour(train, picked, args.corpus, args.codec)
        if args.outputs:
            result["model_outputs"] = model_outputs(clf, train, args.corpus, args.codec, args.outputs)
    result["seconds"] = round(time.time() - start, 1)
    receipts.emit(result, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
