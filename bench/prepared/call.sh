#!/usr/bin/env bash
# The first call prepared for the patches here (written 2026-12-07 before any run; call 4 of that
# session): the whole stack at once, the cheapest call that can merge it. A/B (bench/cuda-ab.sh):
# baseline main; now = ahead4 + norm-fold + add-fold + norm-router (the staged products'
# activations 4 steps ahead without spills; the attention's input norm folded into q/k/v, the
# MoE's into its router, writing xn for the experts; the two residual adds folded into o's product
# and the MoE sum: 3 launches a layer fewer at 1-2 rows); variant norm-router-pipelined (ahead4 +
# norm-fold + pipelined-on-norm-fold + add-fold + norm-router-on-pipelined: the same on the staged
# tiles consumed chunk by chunk as they land).
# Rule: the fused-kernel, layout and batch-invariance parity tests pass; no graphed step more than
# 1% slower than the binary kept before it; the stack is merged only if batch 1 or paired is more
# than 0.5% faster than main in this call, and pipelined only if it is more than 0.5% faster than
# the stack. Then the phase stamps of main (the phases patch on main, in ph-main/).
# call-attribution.sh measures the patches one at a time (a longer call).
here=$(cd "$(dirname "$0")" && pwd)
cd "$here" || exit 1
export LD_LIBRARY_PATH=$here/bundle ESPEAK_DATA_PATH=$here/bundle
AB_VARIANTS="norm-router-pipelined" \
  AB_TESTS='*Fused*:*Layouts*:*BatchInvariance*:*E2m1*' AB_ROWS=8,64 AB_CONTRACT=1 OUT=$OUT \
  timeout 400 ./cuda-ab.sh 2>&1 | grep -v "^  " | tail -70
timeout 40 ph-main/drama bench decode --backend cuda --synthetic configs/bench-30b-a3b.json \
  --frames 10 --repeats 1 --step-rows 8 --json /tmp/ph-main.json >/dev/null 2>"$OUT/phases-main.txt"
echo "phases main exit $?"
grep -A25 "phases of batch1_graph$" "$OUT/phases-main.txt" | head -26
date -u
