#!/usr/bin/env bash
# Builds the folder (and its .tar.xz) of the call prepared here, from main and the patches alone,
# on a developers' machine with nvcc (CUDA is built and bundled, never run here). Everything is
# built in one git worktree of its own (.prepared/ beside the checkout's build/, git-ignored) with
# one build folder that each variant rebuilds incrementally: the checkout itself is left as is.
#
# Usage: bench/prepared/make-call.sh OUT [call|attribution]     (default: call)
#   call         bench/prepared/call.sh: baseline main, the whole stack (ahead4, norm-fold,
#                add-fold, norm-router) under test, the stack on the pipelined kernel a variant
#   attribution  call-attribution.sh: ahead4 + norm-fold under test, then add-fold, norm-router
#                and add-fold-pipelined as variants
# Both carry ph-main/ (the phases patch on main). Then, on the device tool, with carry
# ["OUT.tar.xz"] (OUT inside the checkout) and nothing else large in the working tree:
#   cd /tmp && rm -rf g && mkdir g && tar xJf $OLDPWD/OUT.tar.xz -C g && OUT=$OUT g/NAME/call.sh
# (NAME: OUT's last component).
# NVCC overrides /usr/local/cuda/bin/nvcc; JOBS the build's parallelism (default nproc).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
out=$(realpath -m "${1:?usage: bench/prepared/make-call.sh OUT [call|attribution]}")
kind=${2:-call}
nvcc=${NVCC:-/usr/local/cuda/bin/nvcc}
[ -x "$nvcc" ] || { echo "make-call.sh: nvcc not found at $nvcc (set NVCC)" >&2; exit 1; }
wt=$repo/.prepared
build=$wt/build
patches=$here

git -C "$repo" worktree remove --force "$wt" 2>/dev/null || rm -rf "$wt"
git -C "$repo" worktree add --detach "$wt" main >/dev/null
trap 'git -C "$repo" worktree remove --force "$wt" 2>/dev/null || true' EXIT
cmake -S "$wt" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DDRAMA_CUDA=ON \
  -DCMAKE_CUDA_COMPILER="$nvcc" >/dev/null

# at PATCH...: main with the patches applied in order (git am), nothing else.
at() {
  git -C "$wt" am --abort >/dev/null 2>&1 || true
  git -C "$wt" checkout -q --detach main
  for p in "$@"; do
    git -c user.name=make-call -c user.email=make-call@localhost -C "$wt" am -q "$patches/$p.patch"
  done
}
# take DIR TARGET...: builds the targets at the worktree's state and copies them into DIR.
take() {
  local dir=$1
  shift
  ninja -C "$build" -j "${JOBS:-$(nproc)}" "$@" >/dev/null
  mkdir -p "$dir"
  for t in "$@"; do cp -f "$build/$t" "$dir/"; done
}

rm -rf "$out" && mkdir -p "$out"
stack=(ahead4 norm-fold add-fold norm-router)
stack_pipelined=(ahead4 norm-fold pipelined-on-norm-fold add-fold norm-router-on-pipelined)
case $kind in
  call)
    at "${stack[@]}"
    (cd "$wt" && BUILD_DIR=$build scripts/bundle-cuda.sh "$out/bundle" model_test_cuda_parity >/dev/null)
    at "${stack_pipelined[@]}"
    take "$out/var-norm-router-pipelined" drama model_test_cuda_parity
    cp "$here/call.sh" "$out/call.sh"
    ;;
  attribution)
    at ahead4 norm-fold
    (cd "$wt" && BUILD_DIR=$build scripts/bundle-cuda.sh "$out/bundle" model_test_cuda_parity >/dev/null)
    at ahead4 norm-fold add-fold
    take "$out/var-add-fold" drama model_test_cuda_parity
    at ahead4 norm-fold add-fold norm-router
    take "$out/var-norm-router" drama model_test_cuda_parity
    at ahead4 norm-fold pipelined-on-norm-fold add-fold
    take "$out/var-add-fold-pipelined" drama model_test_cuda_parity
    cp "$here/call-attribution.sh" "$out/call.sh"
    ;;
  *)
    echo "make-call.sh: $kind: call or attribution" >&2
    exit 2
    ;;
esac
at phases
take "$out/ph-main" drama
at
take "$out/baseline" drama
mv "$out/baseline/drama" "$out/bundle/drama-baseline" && rmdir "$out/baseline"
cp -r "$repo/configs" "$out/"
cp "$repo/bench/cuda-ab.sh" "$repo/bench/strip-paths.py" "$repo/bench/machine_facts.py" "$out/"
chmod +x "$out/call.sh"
(cd "$(dirname "$out")" && tar cf - "$(basename "$out")" | xz -T0 -6 >"$out.tar.xz")
echo "make-call.sh: $out ($kind): $(find "$out" -mindepth 1 -maxdepth 1 -printf "%f "); $out.tar.xz $(du -h "$out.tar.xz" | cut -f1)"
