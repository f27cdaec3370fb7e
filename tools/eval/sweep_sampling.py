#!/usr/bin/env python3
"""Sampling settings side by side (tools/eval/evaluate.py once per setting, one after the other).

    python3 tools/eval/sweep_sampling.py --corpus DIR --voices SPK --skip 100 --sentences 40 \
        --settings "--temperature 0.8 --top-k 50;--temperature 0.4 --top-k 50" --json OUT.json

Each setting runs the same held-out slice (--skip: apart from the quality test's 20 sentences, so
a choice made here is not fitted to the test), the same seed and gamma; the receipt lists every
setting's WER (each voice, and no voice) beside the source audio's WER of the same sentences, and
its cloning accuracy. Only the model's sampling changes between the rows.
"""
import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import evaluate  # noqa: E402


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--corpus", required=True)
    p.add_argument("--voices", required=True)
    p.add_argument("--skip", type=int, default=100)
    p.add_argument("--sentences", type=int, default=40)
    p.add_argument("--gammas", default="1.5")
    p.add_argument("--settings", required=True, help="';'-separated drama say sampling options")
    p.add_argument("--drama", default="build/drama")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--jobs", type=int, default=os.cpu_count())
    p.add_argument("--work", default="out/sweep")
    p.add_argument("--json", required=True)
    args = p.parse_args(argv)
    start = time.time()
    rows = []
    for k, setting in enumerate(s.strip() for s in args.settings.split(";")):
        part = os.path.join(args.work, f"setting-{k}.json")
        evaluate.main(["--corpus", args.corpus, "--voices", args.voices, "--skip", str(args.skip),
                       "--sentences", str(args.sentences), "--gammas", args.gammas,
                       "--drama", args.drama, "--seed", str(args.seed), "--jobs", str(args.jobs),
                       "--sample-args", setting, "--work", os.path.join(args.work, f"w{k}"),
                       "--json", part])
        with open(part) as f:
            r = json.load(f)
        rows.append({"sample_args": setting, "wer": r["wer"], "source_wer": r["source_wer"],
                     "cloning": {g: v for g, v in r["cloning"].items() if g.startswith("gamma")},
                     "provenance": r["provenance"], "seconds": r["seconds"]})
        result = {"what": "drama-mini sampling settings side by side (tools/eval/sweep_sampling.py)",
                  "settings": {"voices": args.voices, "skip": args.skip,
                               "sentences": args.sentences, "gammas": args.gammas,
                               "seed": args.seed},
                  "runs": rows, "seconds": round(time.time() - start, 1)}
        with open(args.json, "w") as f:  # again after every setting: a cut run keeps its rows
            json.dump(result, f, indent=1)
            f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
