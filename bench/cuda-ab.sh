#!/usr/bin/env bash
# One A/B call on the GPU machine (docs/cuda-backend.md, "Receipts"): the code under test
# (bundle/drama) beside the code before it (bundle/drama-baseline) in the same call, with the
# merge rule written before the run: kept only if no graphed step of the decode bench is more
# than AB_RULE (default 1.01) times the baseline's. The folder is made here by
#   scripts/bundle-cuda.sh DIR/bundle model_test_cuda_parity && cp BASELINE DIR/bundle/drama-baseline \
#     && cp -r configs DIR/ && cp bench/cuda-ab.sh bench/strip-paths.py bench/machine_facts.py DIR/
# (BASELINE: `drama` built from the commit before the change) and run there as DIR/cuda-ab.sh, with
# OUT set (the device tool returns at most 8 files: everything lands in OUT/receipts.tar).
#
# In order, each step skipped when its variable is empty:
#   AB_TESTS      gtest filter of model_test_cuda_parity on the code under test
#                 (default '*LinearsEqual*:*Layouts*:*E2m1*'; '*' for all, with parity against the CPU)
#   AB_CONTRACT   1 (default): drama contract --backend cuda on the code under test
#   AB_ROWS       the decode bench's step rows beyond 1 and 2, both binaries (default 8,64,192,512);
#                 AB_REPEATS (default 3) repeats, 10 frames
#   AB_ENV        VAR=VALUE words for the code under test only (e.g. one binary, a switch off in the
#                 baseline: AB_BASE_ENV for the baseline's side, bundle/drama-baseline absent)
#   AB_LANES      lane counts for the lanes search (paired bench-30b-a3b, stops below real time),
#                 with whichever binary the rule keeps
#   AB_NCU        a kernel regex: Nsight Compute source counters (SASS, per instruction) on those
#                 kernels of one AB_NCU_ROWS-row step (default 192) of the code under test, exported
#                 as CSV (bench/ncu_source_summary.py makes the results/ncu-source-*.json receipt)
set -u
here=$(cd "$(dirname "$0")" && pwd)
final=${OUT:-/tmp/cuda-ab}
out=$final/w
mkdir -p "$out"
trap 'tar cf "$final/receipts.tar" -C "$out" . && rm -rf "$out"' EXIT
export LD_LIBRARY_PATH=$here/bundle ESPEAK_DATA_PATH=$here/bundle
cd "$here" || exit 1
a=bundle/drama
b=bundle/drama-baseline
[ -x "$b" ] || b=$a  # one binary: the two sides differ by AB_ENV / AB_BASE_ENV
date -u
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
tests=${AB_TESTS-'*LinearsEqual*:*Layouts*:*E2m1*'}
if [ -n "$tests" ]; then
  DRAMA_BIN=$here/$a DRAMA_SOURCE_DIR=$here DRAMA_TEST_TMP=$(mktemp -d) timeout 200 \
    bundle/model_test_cuda_parity --gtest_filter="$tests" --gtest_output=json:"$out/tests.json" 2>&1 |
    grep -E "equal|PASSED|FAILED|Failure" | head -30
fi
if [ -n "${AB_CONTRACT-1}" ]; then
  timeout 200 $a contract --backend cuda --json "$out/contract.json" | tail -1
fi
rows=${AB_ROWS-8,64,192,512}
pick=$a
if [ -n "$rows" ]; then
  bench() {  # bench BINARY JSON ENV...
    local bin=$1 json=$2
    shift 2
    env "$@" timeout 200 "$bin" bench decode --backend cuda --synthetic configs/bench-30b-a3b.json \
      --frames 10 --repeats "${AB_REPEATS:-3}" --step-rows "$rows" --json "$out/$json" >/dev/null
    echo "bench $json exit $?"
  }
  # shellcheck disable=SC2086
  bench $a decode.json ${AB_ENV:-}
  # shellcheck disable=SC2086
  bench $b decode-baseline.json ${AB_BASE_ENV:-}
  verdict=$(python3 - "$out/decode.json" "$out/decode-baseline.json" "${AB_RULE:-1.01}" <<'PY'
import json, sys
a, b = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
rule = float(sys.argv[3])
worst = 0.0
for k, v in a["backbone_step"].items():
    w = b["backbone_step"].get(k)
    if "graph" in k and w:
        r = v["per_step_ms"] / w["per_step_ms"]
        worst = max(worst, r)
        print("%-40s now %9.3f  before %9.3f ms  x%.4f" % (k, v["per_step_ms"], w["per_step_ms"], r), file=sys.stderr)
for st, s in a["kernel_times"]["steps"].items():
    t = {k["kernel"]: k for k in b["kernel_times"]["steps"].get(st, {}).get("by_kernel", [])}
    for k in s["by_kernel"]:
        if k["kernel"] in t and ("moe_experts" in k["kernel"] or "linear" in k["kernel"]):
            print("  %-10s %-44s now %8.1f  before %8.1f us" % (st, k["kernel"], k["us"] / k["launches"],
                  t[k["kernel"]]["us"] / t[k["kernel"]]["launches"]), file=sys.stderr)
print("worst graphed step x%.4f: %s" % (worst, "kept" if worst <= rule else "not kept (rule x%.2f)" % rule), file=sys.stderr)
print("now" if worst <= rule else "before")
PY
  )
  [ "$verdict" = before ] && pick=$b
fi
if [ -n "${AB_LANES:-}" ]; then
  echo "lanes with $pick"
  timeout 300 "$pick" bench decode --backend cuda --synthetic configs/bench-30b-a3b.json \
    --lanes "$AB_LANES" --stop-below-real-time --context 256 --prefill-chunk 4096 --frames 8 \
    --repeats 2 --json "$out/lanes.json" >/dev/null
  python3 - "$out/lanes.json" <<'PY' || true
import json, sys
for r in json.load(open(sys.argv[1]))["runs"]:
    print("lanes %4d step %7.2f ms rtf %.3f first audio median %.0f ms, last %.0f ms" % (
        r["lanes"], r["step_ms"], r["stream_real_time_factor"], r["first_frame_ms_median"], r["first_frame_ms_max"]))
PY
fi
if [ -n "${AB_NCU:-}" ] && command -v ncu >/dev/null; then
  timeout 200 ncu --clock-control none --nvtx --nvtx-include "kernel_times rows_${AB_NCU_ROWS:-192}/" \
    -k regex:"$AB_NCU" -c 3 --section SourceCounters --section InstructionStats -o "$out/ncu" -f \
    $a bench decode --backend cuda --synthetic configs/bench-30b-a3b.json --frames 1 --repeats 1 \
    --step-rows "${AB_NCU_ROWS:-192}" >/dev/null 2>"$out/ncu-err.txt"
  echo "ncu exit $?"
  ncu -i "$out/ncu.ncu-rep" --page source --print-source sass --csv 2>&1 | xz >"$out/sass.csv.xz"
  rm -f "$out/ncu.ncu-rep"
fi
python3 "$here/machine_facts.py" "$out" || true
python3 "$here/strip-paths.py" "$out"/*.json || echo "strip-paths.py: a receipt still names a path"
date -u
