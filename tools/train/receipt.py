#!/usr/bin/env python3
"""The training receipt (results/train-drama-mini.json) from a training state folder.

    tools/train/receipt.py WORK OUT_JSON [--recipe RECIPE] [--note TEXT ...]

Reads WORK/progress.json and each stage's losses.tsv (codec/, model/; model/heldout.tsv, the
held-out losses, whole, and the step exported) and writes, per stage, the
steps done, GPU seconds spent, steps per second, the first, every-tenth and last logged rows, and
for the codec the fewest codes any codebook used in the last logged rows (a collapse shows as 1).
Standard library only; no paths or hostnames in the output.
"""
import argparse
import json
import os
import time


def _number(v):
    try:
        return float(v)
    except ValueError:
        return v or None


def read_tsv(path):
    with open(path) as f:
        head = f.readline().rstrip("\n").split("\t")
        rows = []
        for line in f:
            cells = line.rstrip("\n").split("\t")
            rows.append({k: _number(v) for k, v in zip(head, cells)})
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("work")
    ap.add_argument("out")
    ap.add_argument("--note", action="append", default=[])
    ap.add_argument("--recipe", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "recipe.json"),
                    help="the recipe trained (its steps are each stage's steps_planned)")
    args = ap.parse_args()
    progress = json.load(open(os.path.join(args.work, "progress.json")))
    recipe = json.load(open(args.recipe))
    receipt = {"bench": "train-drama-mini", "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
               "device": progress.get("device"), "torch": progress.get("torch"),
               "done": progress.get("done", []), "stages": {}, "notes": args.note}
    for stage in ("codec", "model"):
        path = os.path.join(args.work, stage, "losses.tsv")
        if not os.path.exists(path):
            continue
        rows = read_tsv(path)
        seconds = progress.get("seconds", {}).get(stage, 0.0)
        steps = int(rows[-1]["step"]) if rows else 0
        entry = {"last_logged_step": steps, "steps_planned": recipe[stage]["steps"],
                 "gpu_seconds": round(seconds, 1),
                 "steps_per_s": round(steps / seconds, 2) if seconds else None,
                 "log": [rows[0]] + rows[10:-1:10] + [rows[-1]] if len(rows) > 1 else rows}
        if stage == "codec" and rows:
            tail = rows[-5:]
            entry["codes_used_min_last_rows"] = min(int(r["codes_used_min"]) for r in tail)
        receipt["stages"][stage] = entry
    eval_path = os.path.join(args.work, "codec", "eval.tsv")
    if os.path.exists(eval_path) and "codec" in receipt["stages"]:
        receipt["stages"]["codec"]["reconstruction_wer"] = [
            {k: v for k, v in r.items() if v is not None} for r in read_tsv(eval_path)]
    heldout_path = os.path.join(args.work, "model", "heldout.tsv")
    if os.path.exists(heldout_path) and "model" in receipt["stages"]:
        # teacher-forced losses on held-out sentences beside training ones (HeldoutMonitor)
        receipt["stages"]["model"]["heldout"] = read_tsv(heldout_path)
        best = os.path.join(args.work, "model", "best", "state.json")
        if os.path.exists(best):
            info = json.load(open(best))
            receipt["stages"]["model"]["exported_step"] = {"step": info["step"], "heldout_loss": info["heldout"]}
    seconds = progress.get("seconds", {})
    receipt["gpu_minutes_spent"] = round(sum(v for k, v in seconds.items() if "@" not in k) / 60, 2)
    receipt["cpu_seconds"] = {k: v for k, v in seconds.items() if "@" in k}
    with open(args.out, "w") as f:
        json.dump(receipt, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
