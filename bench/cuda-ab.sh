#!/usr/bin/env bash
# One A/B call on the GPU machine (docs/cuda-backend.md, "Receipts"): the code under test
# (bundle/drama) beside the code before it (bundle/drama-baseline) in the same call, and any further
# variants (AB_VARIANTS), with the merge rule written before the run: each in turn is kept only if
# no graphed step of the decode bench is more than AB_RULE (default 1.01) times the step of the
# binary kept before it. The folder is made here by bench/prepared/make-call.sh (HEAD as the
# baseline, prepared patches on it as the code under test, run-time settings as variants; MUST=1
# for AB_MUST) and run there as DIR/cuda-ab.sh, with
# OUT set (the device tool returns at most 8 files: everything lands in OUT/receipts.tar, written
# again after every stage, so a call cut off at its limit still returns what it measured).
#
# In order, each step skipped when its variable is empty:
#   AB_VARIANTS   names of further variants, each a folder DIR/var-NAME with its own `drama` (and
#                 `model_test_cuda_parity` for its tests, else bundle/'s), e.g. a second change built
#                 on top of the first: benched after bundle/drama, each against the binary kept
#                 before it. A run-time setting of bundle/drama is a variant too: var-NAME/env holds
#                 its VAR=VALUE words and var-NAME/drama runs bundle/drama with them
#                 (bench/prepared/make-call.sh makes both)
#   AB_TESTS      gtest filter of model_test_cuda_parity on each binary under test
#                 (default '*LinearsEqual*:*Layouts*:*E2m1*'; '*' for all, with parity against the CPU)
#   AB_ROWS       the decode bench's step rows beyond 1 and 2, every binary (default 8,64,192,512);
#                 AB_REPEATS (default 3) repeats, 10 frames
#   AB_ENV        VAR=VALUE words for the code under test only (e.g. one binary, a switch off in the
#                 baseline: AB_BASE_ENV for the baseline's side, bundle/drama-baseline absent)
#   AB_PARENTS    "NAME=PARENT ..." (optional): variant NAME was built on PARENT (a name above,
#                 `now` for bundle/drama), not on the binary kept before it: the rule compares it
#                 with PARENT and keeps it only if PARENT was kept
#   AB_CONTRACT   1 (default): drama contract --backend cuda on the binary the rule keeps;
#                 AB_CONTRACT_ON (names): the contract on those binaries too
#   AB_LANES      lane counts for the lanes search (paired bench-30b-a3b, stops below real time),
#                 with the binary the rule keeps
#   AB_NCU        a kernel regex: Nsight Compute source counters (SASS, per instruction) on the
#                 first AB_NCU_COUNT (default 3) such kernels of one AB_NCU_ROWS-row step (default
#                 192; 1 and 2: the batch-1 and paired steps) of the code under test, exported as
#                 CSV (bench/ncu_source_summary.py makes the results/ncu-source-*.json receipt),
#                 and the details page (speed of light, warp states) as text
#   AB_MUST       sections of cuda-h200-run.sh (beside this script) run with the kept binary, e.g.
#                 "parity torch" (its torch section sets the PyTorch baselines beside this call's
#                 decode bench of the kept binary); their receipts under must/. Last: it copies the
#                 kept binary over bundle/drama, which cuda-h200-run.sh runs
set -u
here=$(cd "$(dirname "$0")" && pwd)
final=${OUT:-/tmp/cuda-ab}
out=$final/w
mkdir -p "$out"
snap() { tar cf "$final/receipts.tar.tmp" -C "$out" . && mv -f "$final/receipts.tar.tmp" "$final/receipts.tar"; }
trap 'snap && rm -rf "$out"' EXIT
export LD_LIBRARY_PATH=$here/bundle ESPEAK_DATA_PATH=$here/bundle
cd "$here" || exit 1
date -u
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
# Each binary by name: its drama, its test executable and its decode receipt.
declare -A bin test json
names=()
# The baseline: bundle/drama-baseline, or bundle/drama itself with AB_BASE_ENV (one binary, two
# settings).
if [ -x bundle/drama-baseline ]; then
  names+=(baseline)
  bin[baseline]=bundle/drama-baseline json[baseline]=decode-baseline.json
elif [ -n "${AB_BASE_ENV:-}" ]; then
  names+=(baseline)
  bin[baseline]=bundle/drama json[baseline]=decode-baseline.json
fi
names+=(now)
bin[now]=bundle/drama test[now]=bundle/model_test_cuda_parity json[now]=decode.json
for v in ${AB_VARIANTS:-}; do
  names+=("$v")
  bin[$v]=var-$v/drama json[$v]=decode-$v.json test[$v]=bundle/model_test_cuda_parity
  [ -x "var-$v/model_test_cuda_parity" ] && test[$v]=var-$v/model_test_cuda_parity
done
tests=${AB_TESTS-'*LinearsEqual*:*Layouts*:*E2m1*'}
if [ -n "$tests" ]; then
  for v in "${names[@]}"; do
    [ "$v" = baseline ] && continue
    echo "tests: $v"
    DRAMA_BIN=$here/${bin[$v]} DRAMA_SOURCE_DIR=$here DRAMA_TEST_TMP=$(mktemp -d) timeout 200 \
      "${test[$v]}" --gtest_filter="$tests" --gtest_output=json:"$out/tests-$v.json" 2>&1 |
      grep -E "equal|PASSED|FAILED|Failure" | head -30
  done
  snap
fi
rows=${AB_ROWS-8,64,192,512}
pick=now
if [ -n "$rows" ]; then
  for v in "${names[@]}"; do
    envs=${AB_ENV:-}
    [ "$v" = baseline ] && envs=${AB_BASE_ENV:-}
    # shellcheck disable=SC2086
    env $envs timeout 200 "${bin[$v]}" bench decode --backend cuda \
      --synthetic configs/bench-30b-a3b.json --frames 10 --repeats "${AB_REPEATS:-3}" \
      --step-rows "$rows" --json "$out/${json[$v]}" >/dev/null
    echo "bench $v exit $?"
    snap
  done
  # The rule, in order: each binary against the one kept before it (NAME=RECEIPT arguments).
  args=()
  for v in "${names[@]}"; do args+=("$v=${json[$v]}"); done
  pick=$(python3 - "$out" "${AB_RULE:-1.01}" "${args[@]}" <<'PY'
import json, os, sys
out, rule = sys.argv[1], float(sys.argv[2])
files = dict(a.split("=", 1) for a in sys.argv[3:])
names = list(files)
def load(v):
    try:
        return json.load(open(os.path.join(out, files[v])))
    except (OSError, ValueError):
        return None
d = {v: load(v) for v in names}
# AB_PARENTS ("NAME=PARENT ..."): a variant built on another than the one kept before it is
# compared with that parent, and kept only if the parent was.
parents = dict(p.split("=", 1) for p in os.environ.get("AB_PARENTS", "").split())
kept = names[0]
kept_set = {names[0]}
for v in names[1:]:
    ref = parents.get(v, kept)
    a, b = d[v], d.get(ref)
    if a is None or b is None:
        print("%s: no receipt to compare; not kept" % v, file=sys.stderr)
        continue
    worst = 0.0
    for k, s in a["backbone_step"].items():
        w = b["backbone_step"].get(k)
        if "graph" in k and w:
            r = s["per_step_ms"] / w["per_step_ms"]
            worst = max(worst, r)
            print("%-10s %-36s %9.3f  %-10s %9.3f ms  x%.4f" % (v, k, s["per_step_ms"], ref, w["per_step_ms"], r),
                  file=sys.stderr)
    # Each kernel timed alone: every kernel at batch 1 (a kernel only one side has shows "-"), the
    # products at the other steps.
    for st, s in a["kernel_times"]["steps"].items():
        t = {k["kernel"]: k for k in b["kernel_times"]["steps"].get(st, {}).get("by_kernel", [])}
        names_here = [k["kernel"] for k in s["by_kernel"]]
        names_here += [n for n in t if n not in names_here]
        mine = {k["kernel"]: k for k in s["by_kernel"]}
        for n in names_here:
            if st != "batch1" and not ("moe_experts" in n or "linear" in n):
                continue
            us = lambda m: "%8.1f" % (m[n]["us"] / m[n]["launches"]) if n in m else "       -"
            print("  %-10s %-44s %s %s  %s %s us" % (st, n, v, us(mine), ref, us(t)), file=sys.stderr)
    verdict = worst <= rule and ref in kept_set
    print("%s: worst graphed step x%.4f against %s: %s" % (v, worst, ref, "kept" if verdict else
          "not kept (rule x%.2f%s)" % (rule, "" if ref in kept_set else "; its parent was not kept")),
          file=sys.stderr)
    if verdict:
        kept = v
        kept_set.add(v)
print(kept)
PY
  ) || pick=${names[0]}
  echo "kept: $pick"
fi
if [ -n "${AB_CONTRACT-1}" ]; then
  timeout 200 "${bin[$pick]}" contract --backend cuda --json "$out/contract.json" | tail -1
  snap
fi
for v in ${AB_CONTRACT_ON:-}; do
  [ "$v" = "$pick" ] && [ -n "${AB_CONTRACT-1}" ] && continue
  echo "contract: $v"
  timeout 200 "${bin[$v]}" contract --backend cuda --json "$out/contract-$v.json" | tail -1
  snap
done
if [ -n "${AB_LANES:-}" ]; then
  echo "lanes with $pick"
  timeout 300 "${bin[$pick]}" bench decode --backend cuda --synthetic configs/bench-30b-a3b.json \
    --lanes "$AB_LANES" --stop-below-real-time --context 256 --prefill-chunk 4096 --frames 8 \
    --repeats 2 --json "$out/lanes.json" >/dev/null
  python3 - "$out/lanes.json" <<'PY' || true
import json, sys
for r in json.load(open(sys.argv[1]))["runs"]:
    print("lanes %4d step %7.2f ms rtf %.3f first audio median %.0f ms, last %.0f ms; limit %.2f ms" % (
        r["lanes"], r["step_ms"], r["stream_real_time_factor"], r["first_frame_ms_median"],
        r["first_frame_ms_max"], r["limit"]["step_ms"]))
PY
  snap
fi
if [ -n "${AB_NCU:-}" ] && command -v ncu >/dev/null; then
  # The bench names its steps batch1, paired_batch2 and rows_N (src/cli/bench_synthetic.cpp); it
  # always runs the first two, so one or two rows add no --step-rows (8 then: a short bench).
  ncu_rows=${AB_NCU_ROWS:-192}
  case $ncu_rows in
    1) ncu_step=batch1 ncu_bench_rows=8 ;;
    2) ncu_step=paired_batch2 ncu_bench_rows=8 ;;
    *) ncu_step=rows_$ncu_rows ncu_bench_rows=$ncu_rows ;;
  esac
  timeout 200 ncu --clock-control none --nvtx --nvtx-include "kernel_times $ncu_step/" \
    -k regex:"$AB_NCU" -c "${AB_NCU_COUNT:-3}" --section SourceCounters --section InstructionStats \
    --section WarpStateStats --section SpeedOfLight -o "$out/ncu" -f \
    bundle/drama bench decode --backend cuda --synthetic configs/bench-30b-a3b.json --frames 1 --repeats 1 \
    --step-rows "$ncu_bench_rows" >/dev/null 2>"$out/ncu-err.txt"
  echo "ncu exit $?"
  ncu -i "$out/ncu.ncu-rep" --page source --print-source sass --csv 2>&1 | xz >"$out/sass.csv.xz"
  ncu -i "$out/ncu.ncu-rep" --page details 2>&1 | xz >"$out/details.txt.xz"
  rm -f "$out/ncu.ncu-rep"
fi
if [ -n "${AB_MUST:-}" ] && [ -x "$here/cuda-h200-run.sh" ]; then
  # cuda-h200-run.sh runs bundle/drama and bundle/model_test_cuda_parity: the kept ones.
  card=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | grep -oiE 'h[0-9]{3}' |
    tr '[:upper:]' '[:lower:]')
  mkdir -p "$out/must"
  [ -f "$out/${json[$pick]:-}" ] && cp "$out/${json[$pick]}" "$out/must/decode-${card:-gpu}.json"
  # A variant that is a setting of bundle/drama (var-NAME/env, bench/prepared/make-call.sh: its
  # drama a wrapper that runs bundle/drama) runs the sections with that setting; copying the
  # wrapper over bundle/drama would make it run itself.
  must_env=()
  if [ -f "var-$pick/env" ]; then
    read -ra must_env <"var-$pick/env"
  else
    [ "${bin[$pick]}" = bundle/drama ] || cp -f "${bin[$pick]}" bundle/drama
    [ "${test[$pick]:-bundle/model_test_cuda_parity}" = bundle/model_test_cuda_parity ] ||
      cp -f "${test[$pick]}" bundle/model_test_cuda_parity
  fi
  env "${must_env[@]}" DRAMA_RUN_SECTIONS="$AB_MUST" DRAMA_ALT_EXPERTS='' DRAMA_ALT_ATTENTION='' \
    OUT="$out/must" timeout "${AB_MUST_SECONDS:-300}" "$here/cuda-h200-run.sh" >/dev/null 2>&1
  echo "must-show sections ($AB_MUST) exit $?"
  [ -f "$out/must/receipts.tar" ] && tar xf "$out/must/receipts.tar" -C "$out/must" && rm -f "$out/must/receipts.tar"
  grep -E "exit|PASSED|FAILED|vs drama" "$out/must/log.txt" | head -20
  snap
fi
python3 "$here/machine_facts.py" "$out" || true
python3 "$here/strip-paths.py" "$out"/*.json || echo "strip-paths.py: a receipt still names a path"
date -u
