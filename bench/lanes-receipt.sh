#!/usr/bin/env bash
# The lanes receipt (issue 12): aggregate decode frames/s for 1, 2, 4 and 8 concurrent sessions
# on the CPU benchmark config with paired guidance, and on the default model the most
# concurrent streams that each stay faster than real time, with their time to the first frame.
#   bench/lanes-receipt.sh DRAMA_BIN CPU_BENCH_CHECKPOINT_DIR MINI_CHECKPOINT_DIR OUT_JSON [THREADS...]
# Checkpoints: `drama make-checkpoint --config configs/cpu-bench.json --seed 1 --nvfp4 -o DIR`
# (made here when DIR is absent) and the bundled default model's directory. Needs python3 only
# to merge the JSON. Every figure sits beside the read bandwidth measured in the same process.
set -euo pipefail
drama=$1 bench_ck=$2 mini_ck=$3 out=$4
shift 4
threads=("$@")
[ ${#threads[@]} -gt 0 ] || threads=(1)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if [ ! -f "$bench_ck/manifest.json" ]; then
  "$drama" make-checkpoint --config "$(dirname "$0")/../configs/cpu-bench.json" --seed 1 --nvfp4 \
    -o "$bench_ck" >/dev/null
fi
for t in "${threads[@]}"; do
  "$drama" bench decode --checkpoint "$bench_ck" --manifest "$bench_ck/manifest.json" \
    --backend cpu --cfg paired --lanes 1,2,4,8 --frames 8 --repeats 3 --threads "$t" \
    --json "$tmp/bench-$t.json" >/dev/null
  "$drama" bench decode --checkpoint "$mini_ck" --manifest "$mini_ck/manifest.json" \
    --backend cpu --cfg paired --lanes 1,4,8,16,24,32,48,64,96,128,192,256 --stop-below-real-time --frames 16 --repeats 3 --threads "$t" \
    --json "$tmp/mini-$t.json" >/dev/null
done
python3 - "$tmp" "$out" "${threads[@]}" <<'PY'
import json, sys, time, platform
tmp, out, threads = sys.argv[1], sys.argv[2], sys.argv[3:]
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
keep = ("lanes", "batch_rows", "step_ms", "aggregate_frames_per_s", "stream_real_time_factor",
        "weight_bytes_per_step", "effective_gb_s", "fraction_of_read_bandwidth",
        "first_frame_ms_median", "first_frame_ms_max", "first_frame_ms_joining_at_load")
def runs(j):
    return [dict({k: r[k] for k in keep}, read_gb_s=r["memory"]["read_gb_s"]) for r in j["runs"]]
receipt = {"bench": "lanes", "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
           "cpu": cpu, "machine": platform.machine(), "cfg": "paired", "results": []}
for t in threads:
    b, m = json.load(open(f"{tmp}/bench-{t}.json")), json.load(open(f"{tmp}/mini-{t}.json"))
    rb, rm = runs(b), runs(m)
    one = rb[0]["aggregate_frames_per_s"]
    for r in rb: r["vs_one_lane"] = r["aggregate_frames_per_s"] / one
    fast = [r for r in rm if r["stream_real_time_factor"] > 1.0]
    receipt["results"].append({
        "threads": int(t), "backend": b["backend"],
        "cpu_bench": {"config": "configs/cpu-bench.json (make-checkpoint --seed 1 --nvfp4)", "runs": rb},
        "default_model": {"provenance": m["provenance"], "runs": rm,
                          "most_real_time_streams_measured": max((r["lanes"] for r in fast), default=0)}})
receipt["note"] = ("step_ms: one batched step (a frame for every lane); stream_real_time_factor: "
                   "audio seconds per wall second of one stream (above 1: faster than real time); "
                   "first_frame_ms: from all lanes joining at once to each one's first frame; "
                   "read_gb_s: the read bandwidth measured after each sample in the same process")
json.dump(receipt, open(out, "w"), indent=1)
print(json.dumps({r["threads"]: [(x["lanes"], round(x["aggregate_frames_per_s"], 1)) for x in r["cpu_bench"]["runs"]] for r in receipt["results"]}))
PY
