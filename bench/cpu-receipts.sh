#!/usr/bin/env bash
# Re-measures every CPU receipt in results/ on a quiet machine (nothing else running):
#   bench/cpu-receipts.sh BUILD_DIR CPU_BENCH_CHECKPOINT_DIR
# The checkpoint is `drama make-checkpoint --config configs/cpu-bench.json --seed 1 --nvfp4`.
set -euo pipefail
cd "$(dirname "$0")/.."
drama=$1/drama
ck=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

"$drama" contract --backend cpu --json results/contract-cpu.json | tail -n 1
"$drama" bench gemv --format nvfp4 --m 4096 --k 14336 --rows 1 2 --threads 1 --repeats 7 \
  --json results/gemv-cpu.json >/dev/null
"$drama" bench verify --size-gib 3 --tmp "$tmp" --json results/verify.json >/dev/null
"$drama" bench codec --frames 25 --threads 1 --json results/codec-cpu.json >/dev/null
# The bundled codec in shared passes of 1-40 streams (what `drama serve` decodes per pass).
if [ -f models/drama-mini/manifest.json ]; then
  "$drama" bench codec --weights drama-mini --frames 100 --threads 1 --streams 1,2,4,8,16,40 \
    --json results/codec-passes-cpu.json >/dev/null
fi
# Decode: six settings, each with the process's peak resident memory beside the file size:
# paired and single, weights in memory (the default) at 1 and 2 threads, and mapped (--mmap) at 1.
for cfg in paired single; do
  for run in memory-1 memory-2 mapped-1; do
    threads=${run#*-}
    extra=()
    [[ $run == mapped-* ]] && extra=(--mmap)
    /usr/bin/time -f '%M' -o "$tmp/rss-$cfg-$run" "$drama" bench decode --checkpoint "$ck" \
      --manifest "$ck/manifest.json" --frames 16 --repeats 9 --cfg $cfg --threads $threads \
      "${extra[@]}" \
      --json "$tmp/decode-$cfg-$run.json" >/dev/null
  done
done
/usr/bin/python3 - "$tmp" "$ck" <<'PY'
import glob, json, os, sys
tmp, ck = sys.argv[1], sys.argv[2]
size = sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(ck) for f in fs)
runs = []
for path in sorted(glob.glob(os.path.join(tmp, "decode-*.json"))):
    key = os.path.basename(path)[7:-5]  # cfg-mode-threads
    run = json.load(open(path))
    run["peak_rss_mib"] = int(open(os.path.join(tmp, f"rss-{key}")).read()) / 1024
    runs.append(run)
receipt = {"bench": "decode", "config": "configs/cpu-bench.json",
           "checkpoint": "make-checkpoint --config configs/cpu-bench.json --seed 1 --nvfp4",
           "checkpoint_mib": size / 2**20, "runs": runs,
           "note": "peak_rss_mib: the whole process (load, verification, decode) from /usr/bin/time"}
json.dump(receipt, open("results/decode-cpu.json", "w"), indent=1)
PY
bench/server_latency.py --drama "$drama" --checkpoint "$ck" --frames 25 --json results/server-latency.json >/dev/null
# Concurrent streams end to end on the bundled drama-mini (docs/server.md, "End to end"), when it
# is in the checkout.
if [ -f models/drama-mini/manifest.json ]; then
  for threads in 1 2; do
    bench/server_streams.py --drama "$drama" --threads $threads --stop-below-real-time \
      --json results/streams-e2e-cpu-${threads}t.json >/dev/null
  done
fi
echo "receipts written"
