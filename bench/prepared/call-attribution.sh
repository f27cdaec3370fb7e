#!/usr/bin/env bash
# The attribution call for the patches here (written 2026-12-07 before any run; call 3 of that
# session, refused like the rest). A/B (bench/cuda-ab.sh): baseline main; now = ahead4 +
# norm-fold (the staged products' activations 4 steps ahead, no spills, and the attention's input
# RMS norm folded into q/k/v at <= 2 rows, with its contract entry); variants, each a patch more:
#   add-fold            + add-fold: the two residual adds of a layer folded into o's product and
#                       into the MoE sum (linear_add, expert_sum_add, with their contract entries)
#   norm-router         + norm-router on add-fold: the MoE's input norm folded into the router
#                       (norm_linears with write_xn, the norm's output written for the experts)
#   add-fold-pipelined  ahead4 + norm-fold + pipelined-on-norm-fold + add-fold: add-fold on the
#                       staged tiles consumed chunk by chunk as they land
# Rule: the fused-kernel, layout and batch-invariance parity tests pass; no graphed step more than
# 1% slower than the binary kept before it; a change is merged only if batch 1 or paired is more
# than 0.5% faster than the binary it adds to, in this call. Then the phase stamps of main (the
# phases patch on main, in ph-main/).
here=$(cd "$(dirname "$0")" && pwd)
cd "$here" || exit 1
export LD_LIBRARY_PATH=$here/bundle ESPEAK_DATA_PATH=$here/bundle
AB_VARIANTS="add-fold norm-router add-fold-pipelined" \
  AB_TESTS='*Fused*:*Layouts*:*BatchInvariance*:*E2m1*' AB_ROWS=8,64 AB_CONTRACT=1 OUT=$OUT \
  timeout 450 ./cuda-ab.sh 2>&1 | grep -v "^  " | tail -70
timeout 40 ph-main/drama bench decode --backend cuda --synthetic configs/bench-30b-a3b.json \
  --frames 10 --repeats 1 --step-rows 8 --json /tmp/ph-main.json >/dev/null 2>"$OUT/phases-main.txt"
echo "phases main exit $?"
grep -A25 "phases of batch1_graph$" "$OUT/phases-main.txt" | head -26
date -u
