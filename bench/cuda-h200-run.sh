#!/usr/bin/env bash
# One call on the GPU machine (docs/cuda-backend.md, "Receipts"): the grouped expert kernels v2 ==
# v1 bitwise, the numerical contract and the CUDA-vs-CPU parity tests on CUDA (each with the
# grouped expert kernels v1 and v2), the synthetic bench-30b-a3b decode bench (v1 and v2 side by
# side, each step also as a CUDA graph), Nsight Compute on the expert kernels, the HTTP suite
# (serve e2e and lanes) against `drama serve --backend cuda`, a `say` and a /health check, all from a folder
# made here by
#   scripts/bundle-cuda.sh DIR/bundle model_test_cuda_parity server_test_serve_e2e server_test_serve_lanes \
#     && cp -r configs DIR/ && cp bench/cuda-h200-run.sh bench/strip-paths.py bench/machine_facts.py bench/server_latency.py \
#        bench/thread-scaling.sh bench/torch_baselines.py DIR/
# (e2e also times the bundled drama-mini: DIR/models/drama-mini, else the checkout's models/ two
# folders up, where DIR is out/gpu of a checkout; it and say read text through espeak-ng, so the
# folder must keep bundle/espeak-ng-data: a copy that leaves it out to save room fails both).
# and run there as DIR/cuda-h200-run.sh (OUT: where the log and the receipts go). DRAMA_RUN_NCU=0
# skips the Nsight Compute runs (their timeouts add up to 8 minutes) when the device time is short.
# DRAMA_ALT_EXPERTS (default "v1") and DRAMA_ALT_ATTENTION (default "v1"): the other kernel versions the
# contract (and, for the experts, parity) also run with; set empty to skip them on a short call.
# DRAMA_RUN_SECTIONS picks sections (default: all of "experts contract parity bench baseline lanes torch ncu
# http say e2e codec threads health"; the machine facts always run; torch needs bench's receipt), e.g. DRAMA_RUN_SECTIONS="experts bench" for a quick
# timing call. DRAMA_STEP_ROWS: the backbone step's row counts beyond 1 and 2 (default 8,32,64);
# DRAMA_LANES_CORES (a lane list): the lanes search also with DRAMA_CUDA_LINEAR=cores, side by side;
# DRAMA_LANES_ATTENTION_V1 and DRAMA_LANES_V3 the same with DRAMA_CUDA_ATTENTION=v1 and
# DRAMA_CUDA_EXPERTS=v3; DRAMA_LANES_BASELINE with bundle/drama-baseline (the code before a change);
# DRAMA_LANES_V3_NARROW with v3 in its own layout only (DRAMA_CUDA_WIDE_ROWS=0);
# DRAMA_LANES_LINEAR_NARROW with the BF16 products never in their wide layout
# (DRAMA_CUDA_LINEAR_WIDE_ROWS=0). DRAMA_BENCH_EXPERTS (versions, e.g. "v3"): the decode bench again with each
# as the default grouped expert kernel (decode-experts-V-$card.json). DRAMA_NCU_VERSIONS: the expert
# kernel versions Nsight Compute profiles at one row (default "v1 v2").
# Receipts are named with the card nvidia-smi names (decode-h200.json on an H200, decode-h100.json on
# an H100), and every one gets the machine facts (date, card, driver, clocks) at the end.
# At the end the receipts lose their absolute paths (strip-paths.py) and go into OUT/receipts.tar
# beside log.txt: the device tool returns at most 8 files, and this run writes 9 receipts.
set -u
here=$(cd "$(dirname "$0")" && pwd)
out=${OUT:-/tmp/cuda-run}
mkdir -p "$out"
export LD_LIBRARY_PATH=$here/bundle ESPEAK_DATA_PATH=$here/bundle
drama=$here/bundle/drama
tmp=$(mktemp -d)
export DRAMA_CACHE=$tmp/cache DRAMA_LOCK_DIR=$tmp/locks
section() { echo; echo "== $1 ($(date -u +%H:%M:%S))"; }
sections=${DRAMA_RUN_SECTIONS:-experts contract parity bench baseline lanes torch ncu http say e2e codec threads health}
want() { [[ " $sections " == *" $1 "* ]]; }
# The receipts are named with the card (results/ names receipts by card: h200, h100, ...), as
# nvidia-smi names it; "gpu" when it names none of the kind.
card=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 | grep -oiE 'h[0-9]{3}' |
  tr '[:upper:]' '[:lower:]')
card=${card:-gpu}
# The cpu-bench checkpoint (configs/cpu-bench.json, random weights) in $ck, made once per run:
# 1.8 GB, too big to carry.
ck=$tmp/cpu-bench-seed1-nvfp4
cpu_bench_checkpoint() {
  [ -f "$ck/manifest.json" ] && return 0
  timeout 300 "$drama" make-checkpoint --config "$here/configs/cpu-bench.json" --seed 1 --nvfp4 \
    -o "$ck" >/dev/null
  echo "make-checkpoint exit $?"
}
{
  section "machine"
  date -u +%Y-%m-%dT%H:%M:%SZ
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,clocks.max.sm,clocks.max.mem,memory.total,power.limit --format=csv
  uname -r
  ldd "$drama" | grep "not found" || echo "every bundled library resolves"
  if want experts; then
  section "grouped expert kernels: v2 == v1 bitwise, v1 == the separate calls (3 fresh processes)"
  # Run first, each in a fresh process: the NaN failure of 2026-12-02 07:49 showed only there.
  for i in 1 2 3; do
    DRAMA_BIN=$drama DRAMA_SOURCE_DIR=$here DRAMA_TEST_TMP=$tmp/tests-$i timeout 200 \
      "$here/bundle/model_test_cuda_parity" --gtest_filter='CudaGroupedExperts.*' \
      --gtest_output=json:"$out/experts-v1-v2-$card-$i.json" | tail -3
    echo "experts v1/v2 run $i exit ${PIPESTATUS[0]}"
  done
  fi
  if want contract; then
  section "contract --backend cuda"
  timeout 400 "$drama" contract --backend cuda --json "$out/contract-$card.json"
  echo "contract exit $?"
  for v in ${DRAMA_ALT_ATTENTION-v1}; do
  section "contract --backend cuda, attention $v (DRAMA_CUDA_ATTENTION=$v)"
  DRAMA_CUDA_ATTENTION=$v timeout 400 "$drama" contract --backend cuda --json "$out/contract-attention-$v-$card.json" | tail -3
  echo "contract attention $v exit ${PIPESTATUS[0]}"
  done
  for v in ${DRAMA_ALT_EXPERTS-v1}; do
  section "contract --backend cuda, grouped experts $v (DRAMA_CUDA_EXPERTS=$v)"
  DRAMA_CUDA_EXPERTS=$v timeout 400 "$drama" contract --backend cuda --json "$out/contract-$v-$card.json" | tail -3
  echo "contract $v exit ${PIPESTATUS[0]}"
  done
  fi
  if want parity; then
  section "parity tests (CUDA vs CPU)"
  DRAMA_BIN=$drama DRAMA_SOURCE_DIR=$here DRAMA_TEST_TMP=$tmp/tests timeout 300 \
    "$here/bundle/model_test_cuda_parity" --gtest_output=json:"$out/parity-$card.json"
  echo "parity exit $?"
  for v in ${DRAMA_ALT_EXPERTS-v1}; do
  section "parity tests (CUDA vs CPU), grouped experts $v (DRAMA_CUDA_EXPERTS=$v)"
  DRAMA_CUDA_EXPERTS=$v DRAMA_BIN=$drama DRAMA_SOURCE_DIR=$here DRAMA_TEST_TMP=$tmp/tests-$v timeout 300 \
    "$here/bundle/model_test_cuda_parity" --gtest_output=json:"$out/parity-$v-$card.json"
  echo "parity $v exit $?"
  done
  fi
  if want bench; then
  section "bench decode --synthetic bench-30b-a3b"
  # bench_decode JSON [VAR=VALUE...]: the bench with the environment given, then its summary.
  bench_decode() {
  local json=$1
  shift
  env "$@" timeout 300 "$drama" bench decode --backend cuda --synthetic "$here/configs/bench-30b-a3b.json" \
    --frames 10 --repeats 5 --step-rows ${DRAMA_STEP_ROWS:-8,32,64} --json "$out/$json" >/dev/null
  echo "bench exit $?"
  python3 - "$out/$json" <<'PY' || true
import json, sys
j = json.load(open(sys.argv[1]))
for k, v in j["backbone_step"].items():
    print(k, "%.3f ms/step" % v["per_step_ms"], "roofline %.3f ms" % v["copy_roofline_ms"],
          "fraction %.3f" % v["fraction_of_copy_roofline"], v.get("host_transfers_per_step"),
          "launches %s, empty chain %s ms" % (v.get("launches_per_step"), v.get("empty_launch_chain_ms")))
for k, v in j["expert_products_one_layer"].items():
    print("experts (moe_experts)", k, "%.1f us/layer" % v["us_per_layer"], "fraction %.3f" % v["fraction_of_copy_roofline"])
print("copy", "%.0f GB/s" % j["ceiling"]["copy_gb_s"], "FMA %s TFLOP/s, mma.sync bf16 %s TFLOP/s" % (
    j["ceiling"].get("fma_tflops"), j["ceiling"].get("mma_bf16_tflops")), j["device"])
p = j.get("paired_batch2_uniform_routing")
if isinstance(p, dict):
    print("paired batch 2 under uniform routing: %.1f experts a layer (batch 1 %.0f), roofline %.3f ms"
          " against %.3f: x%.3f (goal x%.2f needs %.2f shared experts a layer); graphs here x%s,"
          " both rows routed alike x%s" % (
        p["experts_per_moe_layer_paired"], p["experts_per_moe_layer_batch1"], p["copy_roofline_ms_paired"],
        p["copy_roofline_ms_batch1"], p["roofline_ratio"], p["goal_ratio"],
        p["shared_experts_per_layer_for_goal"], p.get("measured_graph_ratio"),
        p.get("measured_graph_ratio_same_routing")))
print(j.get("expert_kernels"))
kt = j.get("kernel_times")
if isinstance(kt, dict):
    for step, v in kt["steps"].items():
        print("kernel times", step, "launches", v["launches"], "sum %.3f ms" % v["sum_of_kernels_ms"],
              "graph", v["graph_step_ms"], "late", v["late_launches"], "empty kernel %.2f us" % v.get("empty_kernel_us", 0))
        for k in sorted(v["by_kernel"], key=lambda k: -k["us"])[:14]:
            print("   %-40s %5d launches %9.1f us %5.1f%%  %.2f us each" % (
                k["kernel"], k["launches"], k["us"], 100 * k["share"], k["us"] / k["launches"]))
e = j["expert_products_one_layer"]
for case in ("rows1", "rows2_shared", "rows2_disjoint"):
    for kind in ("", "_graph"):
        for va, vb in (("_v1", "_v2"), ("_v2", "_v3")):
            a, b = e.get(case + kind + va), e.get(case + kind + vb)
            if a and b:
                print(vb[1:], "vs", va[1:], case + kind, "%.1f -> %.1f us" % (a["us_per_layer"], b["us_per_layer"]),
                      "speed-up %.2fx" % (a["us_per_layer"] / b["us_per_layer"]))
for case in ("rows64", "rows128", "rows192", "rows256", "rows512"):
    a, b, c = e.get(case + "_graph_v3_narrow"), e.get(case + "_graph_v3"), e.get(case + "_graph_v2")
    if a and b:
        print("v3 (wide layout by pairs an expert) vs its own layout", case,
              "%.1f -> %.1f us" % (a["us_per_layer"], b["us_per_layer"]),
              "speed-up %.2fx" % (a["us_per_layer"] / b["us_per_layer"]),
              "(v2 %.1f us)" % c["us_per_layer"] if c else "")
PY
  }
  bench_decode decode-$card.json
  # The same bench with another grouped expert kernel as the default (DRAMA_BENCH_EXPERTS="v3").
  for v in ${DRAMA_BENCH_EXPERTS:-}; do
    section "bench decode, grouped experts $v (DRAMA_CUDA_EXPERTS=$v)"
    bench_decode "decode-experts-$v-$card.json" DRAMA_CUDA_EXPERTS=$v
  done
  fi
  if want baseline; then
  section "baseline binary (bundle/drama-baseline: the code before this change), same bench, same call"
  if [ -x "$here/bundle/drama-baseline" ]; then
    timeout 300 "$here/bundle/drama-baseline" bench decode --backend cuda \
      --synthetic "$here/configs/bench-30b-a3b.json" --frames 10 --repeats 5 \
      --step-rows ${DRAMA_STEP_ROWS:-8,32,64} --json "$out/decode-baseline-$card.json" >/dev/null
    echo "baseline bench exit $?"
    python3 - "$out/decode-baseline-$card.json" "$out/decode-$card.json" <<'PY' || true
import json, sys
a, b = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
for k, v in a["backbone_step"].items():
    w = b["backbone_step"].get(k)
    if w:
        print("%-40s baseline %8.3f ms  now %8.3f ms  x%.3f" % (k, v["per_step_ms"], w["per_step_ms"],
                                                             v["per_step_ms"] / w["per_step_ms"]))
PY
  else
    echo "no baseline binary bundled"
  fi
  fi
  if want lanes; then
  section "lanes: bench-30b-a3b sessions on synthetic weights, paired (the whole model but the codec)"
  # Context 256 positions per branch (a 25-frame voice, the text, the frames of a pass) keeps 2 x
  # 384 KV slots at 19 GB; prefill chunk 4096 rows lets every lane join within a few steps.
  # --stop-below-real-time: lane counts in increasing order up to the first whose streams are
  # slower than real time (the 09:33 run of 2026-12-03 timed every count of 1,64,...,384 three
  # times and ran past its 420 s: each pass prefills every lane's prompt).
  # lanes_search SECONDS LANES JSON [VAR=VALUE...]: one search, with the environment given.
  lanes_search() {
    local seconds=$1 lanes=$2 json=$3
    shift 3
    env "$@" timeout "$seconds" "${lanes_bin:-$drama}" bench decode --backend cuda \
      --synthetic "$here/configs/bench-30b-a3b.json" --lanes "$lanes" --stop-below-real-time \
      --context 256 --prefill-chunk 4096 --frames 8 --repeats ${DRAMA_LANES_REPEATS:-2} \
      --json "$out/$json" >/dev/null
  }
  lanes_search 420 "${DRAMA_LANES:-1,16,32,48,64,96,128,192,256,384}" lanes-$card.json
  echo "lanes exit $?"
  # Side by side in this call: the CUDA-core grouped expert kernels (v2) and the BF16 products on
  # CUDA cores (the kernel before tensor cores), at the lane counts given.
  if [ -n "${DRAMA_LANES_V2:-}" ]; then
    lanes_search 300 "$DRAMA_LANES_V2" lanes-v2-$card.json DRAMA_CUDA_EXPERTS=v2
    echo "lanes (experts v2) exit $?"
  fi
  if [ -n "${DRAMA_LANES_ATTENTION_V1:-}" ]; then
    lanes_search 300 "$DRAMA_LANES_ATTENTION_V1" lanes-attention-v1-$card.json DRAMA_CUDA_ATTENTION=v1
    echo "lanes (attention v1) exit $?"
  fi
  if [ -n "${DRAMA_LANES_BASELINE:-}" ] && [ -x "$here/bundle/drama-baseline" ]; then
    lanes_bin=$here/bundle/drama-baseline lanes_search 300 "$DRAMA_LANES_BASELINE" lanes-baseline-$card.json
    echo "lanes (baseline binary) exit $?"
  fi
  if [ -n "${DRAMA_LANES_V3:-}" ]; then
    lanes_search 300 "$DRAMA_LANES_V3" lanes-v3-$card.json DRAMA_CUDA_EXPERTS=v3
    echo "lanes (experts v3) exit $?"
  fi
  # v3 without its wide layout (DRAMA_CUDA_WIDE_ROWS=0: the kernel before it, the same bits).
  if [ -n "${DRAMA_LANES_V3_NARROW:-}" ]; then
    lanes_search 300 "$DRAMA_LANES_V3_NARROW" lanes-v3-narrow-$card.json DRAMA_CUDA_EXPERTS=v3 \
      DRAMA_CUDA_WIDE_ROWS=0
    echo "lanes (experts v3, wide layout off) exit $?"
  fi
  # The BF16 products without their wide layout (DRAMA_CUDA_LINEAR_WIDE_ROWS=0: the same bits).
  if [ -n "${DRAMA_LANES_LINEAR_NARROW:-}" ]; then
    lanes_search 300 "$DRAMA_LANES_LINEAR_NARROW" lanes-linear-narrow-$card.json \
      DRAMA_CUDA_LINEAR_WIDE_ROWS=0
    echo "lanes (BF16 products narrow) exit $?"
  fi
  if [ -n "${DRAMA_LANES_CORES:-}" ]; then
    lanes_search 300 "$DRAMA_LANES_CORES" lanes-cores-$card.json DRAMA_CUDA_LINEAR=cores
    echo "lanes (CUDA-core BF16 products) exit $?"
  fi
  for lanes_json in "$out"/lanes-*$card.json; do
  [ -f "$lanes_json" ] || continue
  echo "$(basename "$lanes_json"):"
  python3 - "$lanes_json" <<'PY' || true
import json, sys
j = json.load(open(sys.argv[1]))
for r in j["runs"]:
    l = r["limit"]
    print("lanes %4d rows %4d step %8.2f ms (backbone %.2f, tower %.2f) rtf %6.2f agg %7.0f fr/s "
          "first %.0f/%.0f ms, joining %.1f ms; limit %.2f ms (bytes %.2f, flops %s = mma %s + fma %s)" % (
        r["lanes"], r["batch_rows"], r["step_ms"], r["backbone_ms_per_step"], r["tower_ms_per_step"],
        r["stream_real_time_factor"], r["aggregate_frames_per_s"], r["first_frame_ms_median"],
        r["first_frame_ms_max"], r["first_frame_ms_joining_at_load"], l["step_ms"], l["bytes_ms"],
        *("%.2f" % l[k] if k in l else "-" for k in ("flops_ms", "mma_ms", "fma_ms"))))
    print("   ceiling:", {k: v for k, v in r["memory"].items() if k != "note"})
    kt = r.get("kernel_times")
    if isinstance(kt, dict):
        print("   one step's kernels timed alone: %d launches, %.2f ms in all (empty kernel %.2f us)" % (
            kt["launches"], kt["sum_of_kernels_ms"], kt["empty_kernel_us"]))
        for k in sorted(kt["by_kernel"], key=lambda k: -k["us"])[:12]:
            print("      %-44s %5d launches %9.1f us %5.1f%%" % (k["kernel"], k["launches"], k["us"],
                                                               100 * k["share"]))
print("skipped (a smaller count was already slower than real time):",
      j.get("lanes_skipped_below_real_time"))
print("most streams faster than real time:", j["most_streams_faster_than_real_time"],
      "limit:", j["limit_streams_faster_than_real_time"],
      "(tensor cores: %s)" % j.get("limit_tensor_core_products"))
PY
  done
  fi
  if want torch; then
  section "PyTorch baselines (transformers eager BF16, plain PyTorch in a CUDA graph), same geometry"
  timeout 420 python3 "$here/torch_baselines.py" --config "$here/configs/bench-30b-a3b.json" \
    --json "$out/torch-baselines-$card.json" 2>&1 | tail -8
  echo "torch exit ${PIPESTATUS[0]}"
  # Side by side with this run's drama step (decode-$card.json): each baseline over drama.
  python3 - "$out/decode-$card.json" "$out/torch-baselines-$card.json" "$out/decode-vs-torch-$card.json" <<'PY' || true
import json, sys
d, t = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
steps = d["backbone_step"]
drama = {1: steps["batch1_graph"]["per_step_ms"], 2: steps["paired_batch2_graph"]["per_step_ms"]}
rows = []
for r in t["runs"]:
    if "ms_per_step" not in r:
        continue
    rows.append({"impl": r["impl"], "mode": r["mode"], "batch": r["batch"], "ms_per_step": r["ms_per_step"],
                 "drama_ms_per_step": drama[r["batch"]], "ratio_to_drama": r["ms_per_step"] / drama[r["batch"]]})
    print("%-6s batch %d %9.3f ms vs drama %.3f ms: x%.1f" % (r["impl"], r["batch"], r["ms_per_step"],
                                                              drama[r["batch"]], r["ms_per_step"] / drama[r["batch"]]))
json.dump({"bench": "decode-vs-torch", "config": t["config"], "device": t["device"],
           "drama": {"batch1_graph_ms": drama[1], "paired_batch2_graph_ms": drama[2],
                     "copy_gb_s": d["ceiling"]["copy_gb_s"]},
           "torch": {"version": t["torch"], "copy_gb_s": t["copy_gb_s"]}, "runs": rows,
           "note": "one device call: drama's graphed backbone step (decode-CARD.json) and the "
                   "PyTorch baselines (torch-baselines-CARD.json), each beside its copy "
                   "bandwidth measured in the same process"},
          open(sys.argv[3], "w"), indent=1)
PY
  fi
  if want ncu; then
  section "Nsight Compute: the grouped expert kernels (grouping, gate/up, down) of one layer"
  ncu=$(command -v ncu || echo /usr/local/cuda/bin/ncu)
  if [ "${DRAMA_RUN_NCU:-1}" = 0 ]; then
    echo "skipped (DRAMA_RUN_NCU=0)"
  elif [ -x "$ncu" ]; then
    # One row (the decode step): the prefill of both branches launches 2 x 48 layers x 5 matching
    # kernels (attention, routing, grouping, gate/up, down) first; skip them and take the first
    # layer of the first batch-1 step, per expert-kernel version (DRAMA_NCU_VERSIONS, default
    # "v1 v2"), with the warp stall reasons.
    for v in ${DRAMA_NCU_VERSIONS:-v1 v2}; do
      echo "-- one row, DRAMA_CUDA_EXPERTS=$v"
      DRAMA_CUDA_EXPERTS=$v timeout 150 "$ncu" --clock-control none \
        -k regex:'moe_|attention|route_topk' --launch-skip 480 -c 5 \
        --section SpeedOfLight --section MemoryWorkloadAnalysis --section LaunchStats \
        --section Occupancy --section WarpStateStats --section InstructionStats \
        --section ComputeWorkloadAnalysis --section SchedulerStats \
        --metrics 'regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio' \
        "$drama" bench decode --backend cuda --synthetic "$here/configs/bench-30b-a3b.json" \
        --frames 1 --repeats 1 >"$out/ncu-rows1-$v.txt" 2>&1
      echo "ncu $v exit $?"
      grep -E "moe_|attention|route_topk|Duration|DRAM Throughput|Compute \(SM\)|Registers Per|Achieved Occupancy|Stall|stall" "$out/ncu-rows1-$v.txt" | head -60
    done
  else
    echo "no ncu"
  fi
  fi
  if want http; then
  section "HTTP suite against drama serve --backend cuda (tiny checkpoint)"
  for t in server_test_serve_e2e server_test_serve_lanes; do
    if [ -x "$here/bundle/$t" ]; then
      DRAMA_SERVER_BACKEND=cuda DRAMA_BIN=$drama DRAMA_SOURCE_DIR=$here DRAMA_TEST_TMP=$tmp/$t \
        timeout 240 "$here/bundle/$t" --gtest_output=json:"$out/$t-$card.json"
      echo "$t exit $?"
    else
      echo "$t not bundled"
    fi
  done
  fi
  if want say; then
  section "say --backend auto (mini)"
  # The bundled drama-mini where the folder carries it (DIR/models), else the checkout's models/
  # two folders up; the build's default models folder need not exist on the GPU machine.
  mini=$here/models/drama-mini
  [ -d "$mini" ] || mini=$here/../../models/drama-mini
  DRAMA_MODELS_DIR=$(dirname "$mini") timeout 200 "$drama" say "Hello from the GPU." --backend auto \
    --max-frames 50 -o "$tmp/hello.wav" && ls -la "$tmp/hello.wav"
  fi
  if want e2e; then
  section "end to end on CUDA: time to first audio and real-time factor, 10 s (125 frames)"
  # cpu-bench has the real Mimi codec geometry; its random weights make every request run to its
  # maximum duration.
  cpu_bench_checkpoint
  timeout 240 python3 "$here/server_latency.py" --drama "$drama" --checkpoint "$ck" --frames 125 \
    --backend cuda --json "$out/latency-cpu-bench-$card.json" | tail -22
  echo "latency cpu-bench exit ${PIPESTATUS[0]}"
  mini=$here/models/drama-mini
  [ -d "$mini" ] || mini=$here/../../models/drama-mini
  if [ -d "$mini" ]; then
    timeout 240 python3 "$here/server_latency.py" --drama "$drama" --checkpoint "$mini" \
      --frames 125 --backend cuda --json "$out/latency-drama-mini-$card.json" | tail -22
    echo "latency drama-mini exit ${PIPESTATUS[0]}"
  fi
  fi
  if want codec; then
  section "codec in shared passes on CUDA (bench codec --streams; each stream checked against it alone)"
  # The real Mimi geometry (random codec), then the bundled drama-mini's codec.
  timeout 120 "$drama" bench codec --backend cuda --frames 50 --streams 1,2,8,32,64 \
    --json "$out/codec-passes-mimi-$card.json" | grep -A40 shared_passes | head -45
  echo "codec passes mimi exit ${PIPESTATUS[0]}"
  mini=$here/models/drama-mini
  [ -d "$mini" ] || mini=$here/../../models/drama-mini
  if [ -d "$mini" ]; then
    DRAMA_MODELS_DIR=$(dirname "$mini") timeout 120 "$drama" bench codec --backend cuda \
      --weights drama-mini --frames 100 --streams 1,2,8,32,64 \
      --json "$out/codec-passes-$card.json" | grep -A40 shared_passes | head -45
    echo "codec passes drama-mini exit ${PIPESTATUS[0]}"
  fi
  fi
  if want threads; then
  section "CPU thread scaling on this machine's cores (bench/thread-scaling.sh, issue 12)"
  cpu_bench_checkpoint
  timeout 300 "$here/thread-scaling.sh" --drama "$drama" --checkpoint "$ck" --rounds 1 --frames 16 \
    --repeats 3 --out "$out/threads-xeon16.json" 2>&1 | tail -5
  echo "thread scaling exit ${PIPESTATUS[0]}"
  fi
  if want health; then
  section "serve --backend cuda: /health"
  "$drama" serve --backend cuda --port 18080 >"$tmp/serve.log" 2>&1 &
  pid=$!
  for _ in $(seq 1 60); do
    python3 -c "import urllib.request;print(urllib.request.urlopen('http://127.0.0.1:18080/health').read().decode())" 2>/dev/null && break
    sleep 1
  done
  kill "$pid"; wait "$pid"
  head -5 "$tmp/serve.log"
  fi
  section "machine facts into the receipts"
  python3 "$here/machine_facts.py" "$out" || true
} 2>&1 | tee "$out/log.txt"
python3 "$here/strip-paths.py" "$out"/*.json || echo "strip-paths.py: a receipt still names a path (above)" | tee -a "$out/log.txt"
(cd "$out" && tar -cf receipts.tar ./*.json && rm -f ./*.json)
