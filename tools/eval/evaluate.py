"""drama-mini evaluation (issue 14's "must show"): intelligibility and voice cloning.

    python3 tools/eval/evaluate.py --corpus DIR --voices SPK,... [--sentences 300]
        [--gammas 1.5,1] [--wer-gammas 1.5] [--drama build/drama] [--model-args "--checkpoint D --manifest M"]
        [--max-duration 12] [--seed 1] [--jobs 2] [--work DIR] [--json OUT]

DIR is a corpus (tools/corpus/synth.py) holding, for every speaker in --voices, the held-out
sentences said the same way (synth.py --heldout-per-speaker N+1 --heldout-same), and training
utterances of every speaker for the classifier. For each voice speaker its first held-out
recording (smallest sentence id) becomes a voice (`drama voice write`); the next N held-out
sentences are the targets, never the reference's own.

- WER (pocketsphinx_batch, tools/eval/asr.py) of `drama say` for every target sentence with each
  voice at each gamma of --wer-gammas (default all), and with no voice (unguided), beside the
  source voices' own recordings of the same sentences.
- Voice cloning: a speaker classifier (tools/eval/speaker_id.py: MFCC statistics + logistic
  regression) trained on the corpus's training utterances names the speaker of each output made
  with a voice; accuracy and mean probability of the right speaker, per gamma.
- --codec-bound: the same recordings also through the checkpoint's codec (`drama codec encode`,
  then `decode`: what any model speaking through it is heard through) are recognised and
  classified: per voice the WER of the round trip beside the source's and the model's, and the
  classifier's accuracy on the round trips, the bounds the codec sets on both figures.
Writes a receipt (--json) with the settings, the model's provenance label and every figure."""

import argparse
import json
import os
import re
import shlex
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "corpus"))

import asr  # noqa: E402
import audio  # noqa: E402
import source_wer  # noqa: E402
import speaker_id  # noqa: E402


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[:3])} ... failed ({r.returncode}): {r.stderr.strip()[-300:]}")
    return r.stderr


def provenance(stderr):
    m = re.search(r"\((pinned:[^)]*|override:[^)]*)\)", stderr)
    return m.group(1) if m else "unknown"


def feature_of(path):
    x, rate = audio.read_wav(path)
    return speaker_id.features(audio.resample(x, rate, 16000), 16000)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--corpus", required=True)
    p.add_argument("--voices", required=True, help="comma-separated corpus speaker ids")
    p.add_argument("--sentences", type=int, default=300)
    p.add_argument("--skip", type=int, default=0,
                   help="held-out sentences passed over before the targets (a slice apart from "
                        "the quality test's, e.g. for a sweep of sampling settings)")
    p.add_argument("--gammas", default="1.5,1")
    p.add_argument("--wer-gammas", default=None,
                   help="the gammas whose outputs are recognised (default: all of --gammas); the "
                        "others are only classified (pocketsphinx is the slow part: ~2 s an item)")
    p.add_argument("--drama", default="build/drama")
    p.add_argument("--model-args", default="", help="weight options for drama say / voice write")
    p.add_argument("--sample-args", default="",
                   help="sampling options for drama say only, e.g. '--temperature 0.5 --top-k 20'")
    p.add_argument("--max-duration", type=float, default=12,
                   help="most seconds per output (drama say --max-duration; the frames"
                   " follow the model's frame rate)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--jobs", type=int, default=os.cpu_count())
    p.add_argument("--classifier-per-speaker", type=int, default=40)
    p.add_argument("--codec-bound", action="store_true",
                   help="also the source recordings through the checkpoint's codec (WER, classifier)")
    p.add_argument("--work", default="out/eval")
    p.add_argument("--json")
    args = p.parse_args(argv)
    start = time.time()
    model_args = shlex.split(args.model_args)
    sample_args = shlex.split(args.sample_args)
    gammas = [float(g) for g in args.gammas.split(",")]
    wer_gammas = gammas if args.wer_gammas is None else [float(g) for g in args.wer_gammas.split(",")]
    if not set(wer_gammas) <= set(gammas):
        raise SystemExit(f"--wer-gammas {args.wer_gammas}: not among --gammas {args.gammas}")
    voices = args.voices.split(",")
    rows = source_wer.read_corpus(args.corpus)
    heldout = {}
    for r in rows:
        if r["split"] == "heldout":
            heldout.setdefault(r["speaker"], {})[r["sentence"]] = r
    common = sorted(set.intersection(*(set(heldout.get(v, {})) for v in voices)))
    if len(common) < 2:
        raise SystemExit(f"{args.corpus}: the voices share {len(common)} held-out sentences "
                         "(synthesize with --heldout-same)")
    reference_id, targets = common[0], common[1 + args.skip:1 + args.skip + args.sentences]
    text = {i: heldout[voices[0]][i]["text"] for i in common}
    os.makedirs(os.path.join(args.work, "voices"), exist_ok=True)
    label = "unknown"
    for v in voices:
        ref = heldout[v][reference_id]
        stderr = run([args.drama, "voice", "write", os.path.join(args.corpus, ref["path"]),
                      "--transcript", ref["text"], "-o", os.path.join(args.work, "voices", v + ".voice")]
                     + model_args)
        label = provenance(stderr) if label == "unknown" else label

    jobs = []  # (condition, gamma, sentence id, output path, command)
    for cond in ["none"] + voices:
        for gamma in ([1.0] if cond == "none" else gammas):
            folder = os.path.join(args.work, "audio", f"{cond}-g{gamma:g}")
            os.makedirs(folder, exist_ok=True)
            for i in targets:
                out = os.path.join(folder, i + ".wav")
                cmd = [args.drama, "say", text[i], "-o", out, "--seed", str(args.seed),
                       "--max-duration", f"{args.max_duration:g}", "--threads", "1"] + model_args
                cmd += sample_args
                if cond != "none":
                    cmd += ["--voice", os.path.join(args.work, "voices", cond + ".voice"),
                            "--gamma", str(gamma)]
                jobs.append((cond, gamma, i, out, cmd))
    # The codec's round trips of the source recordings (--codec-bound), as more jobs.
    bound = []  # (voice, sentence id, output path, commands)
    if args.codec_bound:
        os.makedirs(os.path.join(args.work, "codes"), exist_ok=True)
        for v in voices:
            folder = os.path.join(args.work, "audio", f"codec-{v}")
            os.makedirs(folder, exist_ok=True)
            for i in targets:
                codes = os.path.join(args.work, "codes", f"{v}.{i}.codes")
                out = os.path.join(folder, i + ".wav")
                bound.append((v, i, out, [
                    [args.drama, "codec", "encode", os.path.join(args.corpus, heldout[v][i]["path"]),
                     "-o", codes, "--threads", "1"] + model_args,
                    [args.drama, "codec", "decode", codes, "-o", out, "--threads", "1"] + model_args]))
    # One at a time: drama takes a lock on the device (and each call uses one thread).
    stderrs = [run(j[4]) for j in jobs]
    for _, _, _, commands in bound:
        for cmd in commands:
            run(cmd)
    label = provenance(stderrs[0]) if stderrs else label
    say_seconds = time.time() - start

    recognised = [j for j in jobs if j[0] == "none" or j[1] in wer_gammas]
    items = [(f"{c}-g{g:g}.{i}", out) for c, g, i, out, _ in recognised]
    items += [(f"source-{v}.{i}", os.path.join(args.corpus, heldout[v][i]["path"]))
              for v in voices for i in targets]
    items += [(f"codec-{v}.{i}", out) for v, i, out, _ in bound]
    hyp = asr.recognize(items, args.jobs)
    result = {"what": "drama-mini evaluation (tools/eval/evaluate.py)", "provenance": label,
              "settings": {"sentences": len(targets), "reference_sentence": reference_id,
                           "voices": voices, "gammas": gammas, "wer_gammas": wer_gammas,
                           "seed": args.seed,
                           "max_duration_s": args.max_duration, "model_args": args.model_args,
                           "skip": args.skip, "sample_args": args.sample_args},
              "wer": {}, "source_wer": {}, "cloning": {}}
    if bound:
        result["settings"]["codec_bound"] = True
        result["codec_wer"] = {}
    for c, g in sorted({(c, g) for c, g, _, _, _ in recognised}):
        result["wer"][f"{c} gamma {g:g}" if c != "none" else "no voice"] = round(
            asr.wer((text[i], hyp[f"{c}-g{g:g}.{i}"]) for i in targets), 4)
    for v in voices:
        result["source_wer"][v] = round(asr.wer((text[i], hyp[f"source-{v}.{i}"]) for i in targets), 4)
        if bound:
            result["codec_wer"][v] = round(asr.wer((text[i], hyp[f"codec-{v}.{i}"]) for i in targets), 4)

    # Speaker classifier on the corpus's training utterances (all speakers).
    train_rows, count = [], {}
    for r in rows:
        if r["split"] == "train" and count.get(r["speaker"], 0) < args.classifier_per_speaker:
            count[r["speaker"]] = count.get(r["speaker"], 0) + 1
            train_rows.append(r)
    if len({r["speaker"] for r in train_rows}) >= 2:
        clf = speaker_id.SpeakerClassifier().fit(
            [feature_of(os.path.join(args.corpus, r["path"])) for r in train_rows],
            [r["speaker"] for r in train_rows])
        src = [(v, os.path.join(args.corpus, heldout[v][i]["path"])) for v in voices for i in targets]
        pred = clf.predict([feature_of(path) for _, path in src])
        result["cloning"]["classifier_on_source_heldout"] = round(
            sum(p_ == v for p_, (v, _) in zip(pred, src)) / len(src), 4)
        if bound:
            pred = clf.predict([feature_of(out) for _, _, out, _ in bound])
            result["cloning"]["classifier_on_codec_round_trip"] = round(
                sum(p_ == v for p_, (v, _, _, _) in zip(pred, bound)) / len(bound), 4)
        for g in gammas:
            outs = [(c, out) for c, gg, _, out, _ in jobs if c != "none" and gg == g]
            feats = [feature_of(out) for _, out in outs]
            probs = clf.probabilities(feats)
            pred = clf.predict(feats)
            result["cloning"][f"gamma {g:g}"] = {
                "accuracy": round(sum(p_ == c for p_, (c, _) in zip(pred, outs)) / len(outs), 4),
                "mean_probability_of_voice_speaker": round(float(sum(
                    probs[k][clf.classes.index(c)] if c in clf.classes else 0.0
                    for k, (c, _) in enumerate(outs)) / len(outs)), 4)}
        result["cloning"]["classifier"] = {"speakers": len(clf.classes),
                                           "train_utterances": len(train_rows)}
    result["seconds"] = {"say": round(say_seconds, 1), "total": round(time.time() - start, 1)}
    print(json.dumps(result, indent=1))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
            f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
