#!/usr/bin/env python3
"""How many experts the two branches of paired guidance share, in a trained model.

    /usr/bin/python3 tools/eval/routing_overlap.py --checkpoint models/drama-mini --corpus EVAL
        [--voices ID,...] [--sentences 10] [--json OUT]

A paired step reads every expert that either branch's row chose, so its weight traffic over a
single row's is set by how many experts the conditional and unconditional rows share (issue 13:
paired batch 2 within 1.1x of batch 1). `drama bench decode --synthetic` routes at random, where
two rows share k^2 / E experts of k on average; this measures a trained checkpoint instead.

For each built-in voice (the checkpoint's voices/ID.voice) and each of the first --sentences
held-out sentences its speaker recorded (corpus.tsv of tools/corpus/synth.py, the voice's own
sentence left out), the recording is encoded with the checkpoint's codec (tools/reference/
mimi.py) and both branches run teacher-forced over those frames with the reference model
(tools/reference/drama3.py): the conditional prompt (voice transcript, voice codes, text) and the
unconditional one (text). At every decode row (the text's end and each frame, as the engine's
decode steps see them) and every MoE layer, the experts the two rows chose are compared.
Written: per layer and overall, the mean number shared of k, the fraction of rows that chose the
same set, the uniform-routing expectation k^2 / E beside them, and what that sharing makes of a
paired step's expert reads (2k - shared, against k for one row)."""

import argparse
import csv
import os
import platform
import sys
import time

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
for sub in ("reference", "corpus"):
    sys.path.insert(0, os.path.join(HERE, "..", sub))

import audio  # noqa: E402
import drama3  # noqa: E402
import mimi  # noqa: E402
import receipts  # noqa: E402


def recordings(corpus, speaker, skip_text, count):
    """(text, wav path) of the speaker's first `count` held-out recordings by sentence id, the
    voice's own sentence left out."""
    rows = []
    with open(os.path.join(corpus, "corpus.tsv"), newline="") as f:
        for row in csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE):
            if row["split"] == "heldout" and row["speaker"] == speaker and row["text"] != skip_text:
                rows.append(row)
    rows.sort(key=lambda r: r["sentence"])
    return [(r["text"], os.path.join(corpus, r["path"])) for r in rows[:count]]


class RouteLog:
    """Records each MoE layer's chosen experts (stored index -> original id) while a branch runs."""

    def __init__(self, model):
        self.layers = [(i, layer.mlp) for i, layer in enumerate(model.backbone.layers)
                       if isinstance(layer.mlp, drama3.MoeMlp)]
        self.chosen = {}
        for i, moe in self.layers:
            route = moe.route

            def logged(h, i=i, moe=moe, route=route):
                chosen, weights = route(h)
                self.chosen[i] = [frozenset(moe.original_ids[s] for s in row) for row in chosen.tolist()]
                return chosen, weights
            moe.route = logged

    def run(self, model, x):
        self.chosen = {}
        model.run_backbone(x, model.backbone.new_cache())
        return self.chosen


def overlap(model, codec, voice, items):
    """{layer: [shared experts per decode row]} over the items' teacher-forced frames."""
    log = RouteLog(model)
    shared = {i: [] for i, _ in log.layers}
    for text, path in items:
        x, rate = audio.read_wav(path)
        if rate != codec.c.sampling_rate:
            x = audio.resample(x, rate, codec.c.sampling_rate)
        codes, _ = codec.encode(torch.from_numpy(np.asarray(x, dtype=np.float32)), model.num_codebooks)
        frames = model.embed_frames(codes.long())
        runs = []
        for prompt in (model.prompt(text, voice), model.prompt(text)):
            routes = log.run(model, torch.cat([prompt, frames]))
            # the decode rows: the prompt's last row (its text's eos), then every frame's row
            runs.append({i: r[prompt.shape[0] - 1:] for i, r in routes.items()})
        for i in shared:
            shared[i] += [len(a & b) for a, b in zip(runs[0][i], runs[1][i])]
    return shared


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--checkpoint", required=True, help="a checkpoint directory with voices/ and codec/")
    p.add_argument("--corpus", required=True, help="tools/corpus/synth.py output with the voices' speakers")
    p.add_argument("--voices", help="comma-separated voice ids (default: every voices/*.voice)")
    p.add_argument("--sentences", type=int, default=10)
    p.add_argument("--json")
    args = p.parse_args(argv)
    start = time.time()
    model = drama3.Drama3(args.checkpoint)
    codec = mimi.Mimi(os.path.join(args.checkpoint, "codec"))
    voices_dir = os.path.join(args.checkpoint, "voices")
    ids = args.voices.split(",") if args.voices else sorted(
        n[:-len(".voice")] for n in os.listdir(voices_dir) if n.endswith(".voice"))
    moe = model.config["backbone"]["moe"]
    experts, k = moe["num_experts"], min(moe["experts_per_token"], moe["num_experts"])
    per_layer, per_voice = {}, {}
    for vid in ids:
        voice = drama3.read_voice(os.path.join(voices_dir, vid + ".voice"), model)
        items = recordings(args.corpus, vid, voice["transcript"], args.sentences)
        if not items:
            raise SystemExit(f"routing_overlap: {args.corpus} has no held-out recording of {vid}")
        shared = overlap(model, codec, voice, items)
        rows = [s for v in shared.values() for s in v]
        per_voice[vid] = {"utterances": len(items), "decode_rows": len(next(iter(shared.values()))),
                          "mean_shared": round(float(np.mean(rows)), 4)}
        for i, v in shared.items():
            per_layer.setdefault(i, []).extend(v)
    every = [s for v in per_layer.values() for s in v]
    mean = float(np.mean(every))
    result = {
        "what": "experts shared by the two rows of paired guidance (conditional and unconditional) "
                "at each decode row and MoE layer of a trained checkpoint, teacher-forced over the "
                "voices' speakers' held-out recordings (tools/eval/routing_overlap.py)",
        "settings": {"experts": experts, "experts_per_token": k, "sentences_per_voice": args.sentences,
                     "voices": len(ids), "frame_rate": model.config["audio"]["frame_rate"]},
        "uniform_routing_mean_shared": round(k * k / experts, 4),
        "mean_shared": round(mean, 4),
        "fraction_same_set": round(float(np.mean([s == k for s in every])), 4),
        "paired_expert_reads_over_single": round((2 * k - mean) / k, 4),
        "uniform_paired_expert_reads_over_single": round((2 * k - k * k / experts) / k, 4),
        "per_layer": {str(i): {"mean_shared": round(float(np.mean(v)), 4),
                               "fraction_same_set": round(float(np.mean([s == k for s in v])), 4)}
                      for i, v in sorted(per_layer.items())},
        "per_voice": per_voice,
        "seconds": round(time.time() - start, 1),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "machine": platform.machine(),
    }
    receipts.emit(result, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
