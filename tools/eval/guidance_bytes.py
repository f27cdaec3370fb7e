#!/usr/bin/python3
"""Paired and separate guidance give the same bytes on a checkpoint's built-in voices.

    tools/eval/guidance_bytes.py [--drama build/drama] [--sentences 3] [--json FILE]

For each built-in voice of the default model (or --model-args), `drama say` speaks the first
--sentences held-out sentences with --cfg paired and with --cfg separate (seed 1, the
checkpoint's gamma) into WAV files, which must be equal byte for byte. The receipt holds the
settings, each pair's frame count, stop reason and SHA-256, and whether they were equal: no
paths, no audio. Exit 1 if any pair differs.
"""
import argparse
import datetime
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile

SOURCE = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(SOURCE, "tools", "corpus"))
import sentences  # noqa: E402


def say(drama, model_args, text, voice, cfg, seed, path):
    out = subprocess.run([drama, "say", text, "-o", path, "--voice", voice, "--seed", str(seed),
                          "--cfg", cfg, "--backend", "cpu"] + model_args,
                         capture_output=True, text=True)
    if out.returncode != 0:  # e.g. another drama holds the device's lock
        raise SystemExit(f"guidance_bytes: drama say ({voice}, {cfg}) failed: {out.stderr.strip()}")
    m = re.search(r"(\d+) frames \(stopped: (\w+)\)", out.stderr + out.stdout)
    with open(path, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()
    return {"frames": int(m.group(1)) if m else None, "stopped": m.group(2) if m else None,
            "sha256": digest}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--drama", default=os.path.join(SOURCE, "build", "drama"))
    ap.add_argument("--model-args", default="", help="weight options for drama say (default: the default model)")
    ap.add_argument("--voices", default="festival-slt-a,festival-kal-a,festival-ked-a,espeak-klatt2-a")
    ap.add_argument("--sentences", type=int, default=3)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json")
    a = ap.parse_args()
    texts = dict(sentences.load()[1])
    ids = sentences.read_ids(sentences.HELDOUT_FILE)[:a.sentences]
    model_args = a.model_args.split()
    rows, all_equal = [], True
    with tempfile.TemporaryDirectory(prefix="drama-guidance-") as tmp:
        for voice in [v for v in a.voices.split(",") if v]:
            for i in ids:
                got = {cfg: say(a.drama, model_args, texts[i], voice, cfg, a.seed,
                                os.path.join(tmp, f"{voice}-{i}-{cfg}.wav"))
                       for cfg in ("paired", "separate")}
                equal = got["paired"]["sha256"] == got["separate"]["sha256"]
                all_equal &= equal
                rows.append({"voice": voice, "sentence": i, "equal": equal, **{k: got[k] for k in got}})
                print(f"{voice} {i}: {got['paired']['frames']} frames, paired == separate: {equal}")
    receipt = {"what": "paired vs separate guidance bytes (tools/eval/guidance_bytes.py)",
               "date": datetime.date.today().isoformat(), "backend": "cpu", "seed": a.seed,
               "response_format": "wav", "model_args": a.model_args or "(the default model)",
               "pairs": len(rows), "all_equal": all_equal, "rows": rows}
    if a.json:
        with open(a.json, "w") as f:
            json.dump(receipt, f, indent=1)
            f.write("\n")
    return 0 if all_equal else 1


if __name__ == "__main__":
    sys.exit(main())
