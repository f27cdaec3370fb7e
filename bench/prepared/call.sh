#!/usr/bin/env bash
# Call 1 of the session of 2026-12-07 (written before the run; trimmed to the device time left).
# A/B (bench/cuda-ab.sh): baseline main d18ea05; now = ahead4 + norm-fold patches (the staged
# products' activations 4 steps ahead, no spills, and the attention's input RMS norm folded into
# q/k/v at <= 2 rows, with its contract entry); variant norm-fold-pipelined (+ pipelined-on-norm-fold: also each
# warp copies its own slices' tile part in chunks of 4 steps and starts on a chunk once landed).
# Rule: the fused-kernel, layout and batch-invariance parity tests pass; no graphed step more than
# 1% slower than the binary kept before it; a change is merged only if batch 1 or paired is more
# than 0.5% faster than main in this call. Then the phase stamps (cuda-linear-phases) of main.
here=$(cd "$(dirname "$0")" && pwd)
cd "$here"
export LD_LIBRARY_PATH=$here/bundle ESPEAK_DATA_PATH=$here/bundle
AB_VARIANTS="norm-fold-pipelined" \
  AB_TESTS='*Fused*:*Layouts*:*BatchInvariance*:*E2m1*' AB_ROWS=8,64 AB_CONTRACT=1 OUT=$OUT \
  timeout 330 ./cuda-ab.sh 2>&1 | grep -v "^  " | tail -60
for v in main pipelined; do
  timeout 40 ph-$v/drama bench decode --backend cuda --synthetic configs/bench-30b-a3b.json \
    --frames 10 --repeats 1 --step-rows 8 --json /tmp/ph-$v.json >/dev/null 2>"$OUT/phases-$v.txt"
  echo "phases $v exit $?"
done
grep -A25 "phases of batch1_graph$" "$OUT/phases-main.txt" | head -26
date -u
