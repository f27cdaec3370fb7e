#!/usr/bin/env python3
"""Self-tests of bench/graph_timeline.py on a hand-made trace database with the tables and columns
it reads from `nsys export --type sqlite` (StringIds, NVTX_EVENTS, CUPTI_ACTIVITY_KIND_RUNTIME,
CUPTI_ACTIVITY_KIND_KERNEL): the middle replay of a range is taken, the increments add up to the
span, overlapping kernels add only what they end later, kernels are grouped by name and launch
shape, and a missing range is reported, not fatal. Run by tests/eval (PythonTools)."""
import json
import os
import sqlite3
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))


def make_trace(path):
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT)")
    db.execute("CREATE TABLE NVTX_EVENTS (start INTEGER, end INTEGER, eventType INTEGER, "
               "text TEXT, textId INTEGER)")
    db.execute("CREATE TABLE CUPTI_ACTIVITY_KIND_RUNTIME (start INTEGER, end INTEGER, "
               "nameId INTEGER, correlationId INTEGER)")
    db.execute("CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL (start INTEGER, end INTEGER, "
               "shortName INTEGER, correlationId INTEGER, gridX INTEGER, gridY INTEGER, "
               "gridZ INTEGER, blockX INTEGER, blockY INTEGER, blockZ INTEGER)")
    names = {1: "cudaGraphLaunch_v10000", 2: "cudaEventRecord", 3: "norm", 4: "product",
             5: "steps batch1_graph"}
    db.executemany("INSERT INTO StringIds VALUES (?, ?)", names.items())
    # One range by text, one by registered string id.
    db.execute("INSERT INTO NVTX_EVENTS VALUES (0, 1000000, 59, 'steps paired_batch2_graph', NULL)")
    db.execute("INSERT INTO NVTX_EVENTS VALUES (2000000, 3000000, 59, NULL, 5)")
    corr = 100
    for base in (0, 2000000):
        for rep in range(3):
            t = base + 10000 + rep * 100000
            corr += 1
            db.execute("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (?, ?, 1, ?)", (t, t + 50, corr))
            db.execute("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (?, ?, 2, ?)", (t + 60, t + 70, 900 + corr))
            k0 = t + 1000
            scale = 1 + rep  # the middle replay (rep 1) is twice as long as the first
            # norm 0..4 us, product starts at 1 us (early, overlapping) and ends at 10 us, then a
            # second norm 10..12 us of another grid.
            rows = [(k0, k0 + 4000 * scale, 3, 1), (k0 + 1000, k0 + 10000 * scale, 4, 320),
                    (k0 + 10000 * scale, k0 + 12000 * scale, 3, 2)]
            for s, e, name, grid in rows:
                db.execute("INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (?, ?, ?, ?, ?, 1, 1, 256, 1, 1)",
                           (s, e, name, corr, grid))
    db.commit()
    db.close()


class GraphTimelineTest(unittest.TestCase):
    def run_tool(self, *ranges):
        with tempfile.TemporaryDirectory() as tmp:
            trace, out = os.path.join(tmp, "t.sqlite"), os.path.join(tmp, "o.json")
            make_trace(trace)
            r = subprocess.run([sys.executable, os.path.join(HERE, "graph_timeline.py"), trace, out,
                                *ranges], capture_output=True, text=True)
            self.assertEqual(r.returncode, 0, r.stderr)
            with open(out) as f:
                return json.load(f)

    def test_middle_replay_and_increments(self):
        j = self.run_tool("steps batch1_graph", "steps paired_batch2_graph")
        for name in ("steps batch1_graph", "steps paired_batch2_graph"):
            st = j["steps"][name]
            self.assertEqual(st["replays_in_range"], 3)
            self.assertEqual(st["kernels"], 3)
            self.assertAlmostEqual(st["span_us"], 24.0)  # the middle replay: scale 2
            incs = [k["increment_us"] for k in st["timeline"]]
            self.assertEqual(incs, [8.0, 12.0, 4.0])  # the product adds only what it ends later
            self.assertAlmostEqual(sum(incs), st["span_us"])
            self.assertAlmostEqual(st["sum_of_durations_us"], 8.0 + 19.0 + 4.0)
            by = {a["kernel"]: a for a in st["by_kernel"]}
            self.assertEqual(sorted(by), ["norm 1x1x1/256", "norm 2x1x1/256", "product 320x1x1/256"])
            self.assertEqual(st["by_kernel"][0]["kernel"], "product 320x1x1/256")  # largest first
            self.assertAlmostEqual(by["product 320x1x1/256"]["increment_share"], 0.5)

    def test_missing_range_is_reported(self):
        j = self.run_tool("steps rows_8_graph")
        self.assertIn("error", j["steps"]["steps rows_8_graph"])


if __name__ == "__main__":
    unittest.main()
