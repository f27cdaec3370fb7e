#!/usr/bin/env python3
"""Where a graphed step's time goes, kernel by kernel, from a node-level trace.

Usage: graph_timeline.py TRACE.sqlite OUT.json RANGE [RANGE...]

TRACE.sqlite: `nsys export --type sqlite` of `nsys profile --cuda-graph-trace=node --trace=cuda,nvtx
drama bench decode --backend cuda --synthetic ...`, whose timed graphed steps are NVTX ranges named
"steps NAME" (NAME as in the receipt: batch1_graph, paired_batch2_graph, ...). For each RANGE (e.g.
"steps batch1_graph") it takes the middle cudaGraphLaunch inside the range and lists that replay's
kernels in order of their start: start and end from the replay's first kernel start, the duration,
and the increment (how much later the kernel ends than every kernel before it: the time the kernel
adds to the step's critical path when kernels run one after another with programmatic dependent
launch). Then, per kernel name and launch shape, launches, summed durations and summed increments, so the step's
span is split among its kernels. Writes OUT.json (no paths, no host names)."""
import json
import sqlite3
import sys


def columns(db, table):
    return [r[1] for r in db.execute("PRAGMA table_info(%s)" % table)]


def main():
    trace, out_path, ranges = sys.argv[1], sys.argv[2], sys.argv[3:]
    db = sqlite3.connect(trace)
    strings = dict(db.execute("SELECT id, value FROM StringIds"))
    nvtx_cols = columns(db, "NVTX_EVENTS")
    text_expr = "COALESCE(text, '')" if "textId" not in nvtx_cols else "text, textId"
    events = []
    for row in db.execute("SELECT start, end, %s FROM NVTX_EVENTS WHERE end IS NOT NULL" % text_expr):
        start, end = row[0], row[1]
        text = row[2] if row[2] else (strings.get(row[3], "") if len(row) > 3 and row[3] else "")
        events.append((start, end, text))
    launches = []
    for start, end, name_id, corr in db.execute(
            "SELECT start, end, nameId, correlationId FROM CUPTI_ACTIVITY_KIND_RUNTIME"):
        if strings.get(name_id, "").startswith("cudaGraphLaunch"):
            launches.append((start, corr))
    kcols = columns(db, "CUPTI_ACTIVITY_KIND_KERNEL")
    name_col = "shortName" if "shortName" in kcols else "demangledName"
    result = {"what": __doc__.split("\n\n")[0] + " (bench/graph_timeline.py)", "steps": {}}
    for wanted in ranges:
        spans = [(s, e) for s, e, t in events if t == wanted]
        if not spans:
            result["steps"][wanted] = {"error": "no NVTX range of this name"}
            continue
        s0, e0 = spans[0]
        inside = sorted(c for t, c in launches if s0 <= t <= e0)
        if not inside:
            result["steps"][wanted] = {"error": "no cudaGraphLaunch inside the range"}
            continue
        corr = inside[len(inside) // 2]
        rows = db.execute(
            "SELECT start, end, %s, gridX, gridY, gridZ, blockX, blockY, blockZ FROM "
            "CUPTI_ACTIVITY_KIND_KERNEL WHERE correlationId = ? ORDER BY start" % name_col,
            (corr,)).fetchall()
        if not rows:
            result["steps"][wanted] = {"error": "the replay's kernels are not in the trace "
                                                "(was --cuda-graph-trace=node given?)"}
            continue
        t0 = rows[0][0]
        kernels, by_name = [], {}
        last_end = t0
        for start, end, nid, gx, gy, gz, bx, by, bz in rows:
            name = strings.get(nid, str(nid))
            inc = max(0, end - last_end)
            last_end = max(last_end, end)
            kernels.append({"kernel": name, "grid": [gx, gy, gz], "block": [bx, by, bz],
                            "start_us": (start - t0) / 1e3, "end_us": (end - t0) / 1e3,
                            "duration_us": (end - start) / 1e3, "increment_us": inc / 1e3})
            key = "%s %dx%dx%d/%d" % (name, gx, gy, gz, bx * by * bz)  # a name and its launch shape
            a = by_name.setdefault(key, {"kernel": key, "launches": 0, "duration_us": 0.0,
                                         "increment_us": 0.0})
            a["launches"] += 1
            a["duration_us"] += (end - start) / 1e3
            a["increment_us"] += inc / 1e3
        span = (last_end - t0) / 1e3
        for a in by_name.values():
            a["increment_share"] = a["increment_us"] / span if span else 0.0
        result["steps"][wanted] = {
            "replays_in_range": len(inside),
            "kernels": len(rows),
            "span_us": span,
            "sum_of_durations_us": sum(k["duration_us"] for k in kernels),
            "by_kernel": sorted(by_name.values(), key=lambda a: -a["increment_us"]),
            "timeline": kernels,
        }
    with open(out_path, "w") as f:
        json.dump(result, f, indent=1)
    for name, st in result["steps"].items():
        if "error" in st:
            print(name, st["error"])
            continue
        print("%s: %d kernels, span %.1f us, durations sum %.1f us" % (
            name, st["kernels"], st["span_us"], st["sum_of_durations_us"]))
        for a in st["by_kernel"][:16]:
            print("  %-60s %4d  dur %8.1f  inc %8.1f us (%4.1f%%)" % (
                a["kernel"][:60], a["launches"], a["duration_us"], a["increment_us"],
                100 * a["increment_share"]))


if __name__ == "__main__":
    main()
