#!/usr/bin/env python3
"""Summarizes Nsight Compute's source page (SASS, one row per instruction) by opcode: where a
kernel's issue slots and stall samples go. Input: the CSV of
    ncu -i REPORT --page source --print-source sass --csv
(bench/cuda-ab.sh writes it as sass.csv.xz when AB_NCU is set). Output: a JSON receipt like
results/ncu-source-rows192-h100-0916.json: per kernel (each once), the warp instructions
executed, the 20 leading opcodes with their share of the instructions and of the stall samples,
the opcodes issued with every thread predicated off (code that never runs but costs issue slots),
and the stall reasons.

Usage: ncu_source_summary.py SASS_CSV OUT_JSON --what TEXT [--date D --device D --code C --rows N]
"""
import argparse
import collections
import csv
import json
import lzma
import re


def kernels(path):
    opener = lzma.open if path.endswith(".xz") else open
    with opener(path, "rt") as f:
        rows = list(csv.reader(f))
    found, cur = [], None
    for r in rows:
        if r and r[0] == "Kernel Name":
            cur = {"name": r[1], "rows": []}
            found.append(cur)
        elif cur is not None:
            cur["rows"].append(r)
    return found


def kernel_name(full):
    """The kernel's name with its template arguments, without its parameter list (the first "("
    outside the template's angle brackets) and namespace."""
    depth = 0
    for i, c in enumerate(full):
        if c == "<":
            depth += 1
        elif c == ">":
            depth -= 1
        elif c == "(" and depth == 0 and i > 0:
            full = full[:i]
            break
    for prefix in ("void ", "drama::cuda::", "<unnamed>::"):
        full = full.replace(prefix, "", 1) if full.startswith(prefix) else full
    return full


def summarize(k):
    hdr, data = k["rows"][0], k["rows"][1:]
    col = {h: i for i, h in enumerate(hdr)}
    ie, src = col["Instructions Executed"], col["Source"]
    ss = col["Warp Stall Sampling (All Samples)"]
    te, pt = col["Thread Instructions Executed"], col["Predicated-On Thread Instructions Executed"]
    stalls = [i for i, h in enumerate(hdr) if h.startswith("stall_") and "Not Issued" not in h]
    total, stall_total = 0.0, 0.0
    ops, op_stall, off, why = (collections.Counter() for _ in range(4))
    for r in data:
        try:
            n = float(r[ie] or 0)
        except (ValueError, IndexError):
            continue
        op = re.sub(r"^@!?U?P\w+\s+", "", r[src].strip()).split(" ")[0]
        s = float(r[ss] or 0)
        ops[op] += n
        op_stall[op] += s
        total += n
        stall_total += s
        if float(r[te] or 0) > 0 and float(r[pt] or 0) == 0:
            off[op] += n
        for i in stalls:
            why[hdr[i][len("stall_"):]] += float(r[i] or 0)
    why_total = sum(why.values()) or 1.0
    return {
        "kernel": kernel_name(k["name"]),
        "warp_instructions_executed": total,
        "by_opcode": [{"opcode": o, "executed": n, "share": round(n / total, 4),
                       "stall_sample_share": round(op_stall[o] / (stall_total or 1.0), 4)}
                      for o, n in ops.most_common(20)],
        "issued_with_every_thread_predicated_off": [{"opcode": o, "executed": n}
                                                    for o, n in off.most_common(6)],
        "stall_reasons": {a: round(b / why_total, 4) for a, b in why.most_common(8)},
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("csv")
    ap.add_argument("json")
    ap.add_argument("--what", required=True)
    ap.add_argument("--date", default="")
    ap.add_argument("--device", default="")
    ap.add_argument("--code", default="")
    ap.add_argument("--rows", type=int, default=192)
    a = ap.parse_args()
    seen, out = set(), []
    for k in kernels(a.csv):
        s = summarize(k)
        key = (k["name"], s["warp_instructions_executed"])
        if key not in seen:  # the source page can list a kernel twice
            seen.add(key)
            out.append(s)
    with open(a.json, "w") as f:
        json.dump({"bench": "ncu", "what": a.what, "config": "bench-30b-a3b.json", "rows": a.rows,
                   "device": a.device, "date": a.date, "code": a.code, "kernels": out}, f, indent=1)
    for s in out:
        print("%-60s %8.1f M instructions" % (s["kernel"][:60], s["warp_instructions_executed"] / 1e6))


if __name__ == "__main__":
    main()
