#!/usr/bin/env bash
# On the GPU machine: a node-level Nsight Systems trace of the synthetic decode bench, split kernel
# by kernel by graph_timeline.py (docs/cuda-backend.md, "One graphed step's replay, kernel by
# kernel"). Usage, from a folder made as for cuda-ab.sh (configs/ and graph_timeline.py beside
# this script):
#   graph-trace.sh DRAMA OUT_DIR [ROWS]
# writes OUT_DIR/graph-timeline.json (batch 1, paired, paired with one routing, ROWS rows (default
# 8), batch 1 without PDL and unstaged) and OUT_DIR/decode-traced.json (the bench's own receipt of
# the traced run).
# The device machine of 2026-12 has Nsight Systems only inside Nsight Compute's folder, whose
# target-side nsys leaves a .qdstrm that its QdstrmImporter turns into the report; the importer
# needs libdw.so.1, which that machine lacks: copy Debian 12's (package libdw1) with the
# libraries it links into DIR/dwlib on this side, e.g.
#   mkdir -p DIR/dwlib && for l in /usr/lib/x86_64-linux-gnu/libdw.so.1 $(ldd \
#     /usr/lib/x86_64-linux-gnu/libdw.so.1 | awk '/=>/ {print $3}' | grep -v -e libc.so -e libm.so); \
#     do cp -L "$l" DIR/dwlib/; done
# (or point DWLIB at such a folder).
set -u
here=$(cd "$(dirname "$0")" && pwd)
if [ $# -lt 2 ]; then
  echo "usage: graph-trace.sh DRAMA OUT_DIR [ROWS]" >&2
  exit 2
fi
drama=$1 out=$2 rows=${3:-8}
mkdir -p "$out"
nsys=$(command -v nsys || ls /usr/local/cuda*/bin/nsys /opt/nvidia/nsight-systems/*/bin/nsys \
  /opt/nvidia/nsight-compute/*/host/target-linux-x64/nsys 2>/dev/null | head -1)
if [ -z "$nsys" ]; then
  echo "graph-trace.sh: no nsys found" >&2
  exit 1
fi
importer=$(ls "$(dirname "$nsys")/QdstrmImporter" \
  /opt/nvidia/nsight-compute/*/host/linux-desktop-*/QdstrmImporter 2>/dev/null | head -1)
libs=${DWLIB:-$here/dwlib}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$nsys" --version
timeout "${TRACE_SECONDS:-200}" "$nsys" profile --cuda-graph-trace=node --trace=cuda,nvtx \
  --sample=none --cpuctxsw=none -o "$tmp/tl" --force-overwrite true "$drama" bench decode \
  --backend cuda --synthetic "$here/configs/bench-30b-a3b.json" --frames 10 --repeats 1 \
  --step-rows "$rows" --json "$out/decode-traced.json" >"$tmp/profile.log" 2>&1
echo "nsys profile exit $?"
if [ ! -f "$tmp/tl.nsys-rep" ] && [ -f "$tmp/tl.qdstrm" ]; then
  if [ -z "$importer" ]; then
    echo "graph-trace.sh: nsys left a .qdstrm and no QdstrmImporter was found" >&2
    exit 1
  fi
  LD_LIBRARY_PATH="$libs:$(dirname "$importer")" timeout 200 "$importer" -i "$tmp/tl.qdstrm" \
    >"$tmp/import.log" 2>&1
  echo "QdstrmImporter exit $?"
  tail -2 "$tmp/import.log"
fi
LD_LIBRARY_PATH="$libs" timeout 120 "$nsys" export --type sqlite --force-overwrite true \
  -o "$tmp/tl.sqlite" "$tmp/tl.nsys-rep" >"$tmp/export.log" 2>&1
echo "nsys export exit $?"
python3 "$here/graph_timeline.py" "$tmp/tl.sqlite" "$out/graph-timeline.json" "steps batch1_graph" \
  "steps paired_batch2_graph" "steps paired_batch2_same_routing_graph" "steps rows_${rows}_graph" \
  "steps batch1_graph_no_pdl" "steps batch1_graph_unstaged"
