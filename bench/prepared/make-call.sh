#!/usr/bin/env bash
# Builds one A/B call of bench/cuda-ab.sh for prepared patches, as one archive to carry to the GPU
# machine: the code before the change (this checkout's HEAD) as bundle/drama-baseline, HEAD with
# the patches applied in order as bundle/drama (with model_test_cuda_parity and the bundled
# libraries), one folder var-NAME per run-time setting of the patched binary to compare beside it
# (var-NAME/env holds the setting, var-NAME/drama runs bundle/drama with it), configs/ and the
# scripts cuda-ab.sh runs.
# The call folders outlive no checkout (out/ is ignored), so a session rebuilds them with this
# rather than by hand. One build folder: HEAD is built first, then the patches are applied in the
# same worktree and only what they touch is rebuilt.
#
# Usage: bench/prepared/make-call.sh OUT.tar.xz PATCH[,PATCH...] [NAME:VAR=VALUE ...]
#   PATCH `none`: the code under test is HEAD itself (e.g. MUST=1 for main's must-show sections)
#   e.g. bench/prepared/make-call.sh out/route.tar.xz bench/prepared/route-shape.patch \
#          256x4:DRAMA_CUDA_ROUTE=256x4 128x2:DRAMA_CUDA_ROUTE=128x2
# Then (bench/device-tree-size.sh OUT.tar.xz first) the device call, from the checkout's root:
#   d=$(mktemp -d) && tar xJf OUT.tar.xz -C $d && AB_VARIANTS="256x4 128x2" \
#     AB_PARENTS="256x4=now 128x2=now" $d/call/cuda-ab.sh
# MUST=1 also packs what bench/cuda-ab.sh's AB_MUST runs (bench/cuda-h200-run.sh's sections, the
# must-show receipts): the server tests in the bundle and cuda-h200-run.sh, server_latency.py,
# thread-scaling.sh and torch_baselines.py beside cuda-ab.sh. Its e2e section reads
# models/drama-mini beside them: on the GPU machine, `ln -s "$PWD/models" $d/call/models` first.
# The archive is made in a temporary worktree (git worktree, removed at the end): the checkout's
# own files and build/ are not touched. NVCC and JOBS as scripts/bundle-cuda.sh takes them.
set -euo pipefail
cd "$(dirname "$0")/../.."
if [ $# -lt 2 ]; then
  echo "usage: bench/prepared/make-call.sh OUT.tar.xz PATCH[,PATCH...] [NAME:VAR=VALUE ...]" >&2
  exit 2
fi
archive=$(realpath -m "$1")
patches=()
named=()
[ "$2" = none ] || IFS=, read -ra named <<<"$2"
for p in "${named[@]}"; do patches+=("$(realpath "$p")"); done
shift 2
for v in "$@"; do
  if [[ ! "$v" =~ ^[A-Za-z0-9_.-]+:[A-Z_][A-Z0-9_]*=[^[:space:]]*$ ]]; then
    echo "make-call.sh: '$v' is not NAME:VAR=VALUE" >&2
    exit 2
  fi
done
must_show=${MUST:-0}
head=$(git rev-parse HEAD)
work=$(mktemp -d)
tree=$work/tree
call=$work/call
cleanup() {
  git worktree remove --force "$tree" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
git worktree add --detach -q "$tree" "$head"
mkdir -p "$call/bundle"
# The baseline: HEAD, drama alone.
BUILD_DIR=build-call "$tree/scripts/bundle-cuda.sh" "$call/base" >/dev/null
cp "$call/base/drama" "$call/bundle/drama-baseline"
rm -rf "$call/base"
# The code under test: the patches on HEAD, rebuilt in the same folder.
if [ ${#patches[@]} -gt 0 ]; then
  git -C "$tree" -c user.name=make-call -c user.email=make-call@localhost am -3 -q "${patches[@]}"
fi
must=()
if [ "$must_show" = 1 ]; then must=(server_test_serve_e2e server_test_serve_lanes); fi
BUILD_DIR=build-call "$tree/scripts/bundle-cuda.sh" "$call/bundle" model_test_cuda_parity "${must[@]}"
# A setting of the code under test: var-NAME/env holds VAR=VALUE (bench/cuda-ab.sh reads it for
# its must-show sections), var-NAME/drama runs bundle/drama with it.
for v in "$@"; do
  name=${v%%:*}
  mkdir -p "$call/var-$name"
  echo "${v#*:}" >"$call/var-$name/env"
  # shellcheck disable=SC2016 # $0 and $@ are the wrapper's own, expanded when it runs
  printf '#!/bin/sh\nhere=$(dirname "$0")\nexec env $(cat "$here/env") "$here/../bundle/drama" "$@"\n' \
    >"$call/var-$name/drama"
  chmod +x "$call/var-$name/drama"
done
cp -r configs "$call/"
cp bench/cuda-ab.sh bench/strip-paths.py bench/machine_facts.py "$call/"
if [ "$must_show" = 1 ]; then
  cp bench/cuda-h200-run.sh bench/server_latency.py bench/thread-scaling.sh bench/torch_baselines.py \
    "$call/"
fi
{
  echo "baseline $head"
  if [ ${#named[@]} -gt 0 ]; then
    echo "under test $(git -C "$tree" rev-parse HEAD) (on the baseline: ${named[*]##*/})"
  else
    echo "under test $head (the baseline itself)"
  fi
  for v in "$@"; do echo "variant ${v%%:*}: ${v#*:} on the code under test"; done
  if [ "$must_show" = 1 ]; then echo "must-show sections packed (AB_MUST)"; fi
} >"$call/CALL"
mkdir -p "$(dirname "$archive")"
tar -cJf "$archive" -C "$work" call
echo "make-call.sh: $archive: $(du -h "$archive" | cut -f1)"
cat "$call/CALL"
