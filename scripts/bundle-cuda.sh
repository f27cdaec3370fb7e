#!/usr/bin/env bash
# Builds drama with the CUDA backend (build-cuda/, Release) and bundles it for a GPU machine that
# has an NVIDIA driver but none of Debian's libraries: OUT/ gets `drama` (plus any extra build
# targets named after OUT, e.g. test executables), every shared library `ldd` lists for them
# except the C library, libm, libresolv and the dynamic linker (the host's own, which the
# bundled ones are built against: Debian 12's glibc 2.36 runs on any newer glibc), libespeak-ng's
# data (espeak-ng-data/), and a `run` wrapper that sets LD_LIBRARY_PATH and ESPEAK_DATA_PATH to
# the folder. The CUDA runtime is linked statically; the
# driver's libcuda.so is found on the GPU machine as usual. Run it there as
#   LD_LIBRARY_PATH=OUT ESPEAK_DATA_PATH=OUT OUT/drama ...     or     OUT/run drama ...
#
# Usage: scripts/bundle-cuda.sh OUT [TARGET...]    (NVCC overrides /usr/local/cuda/bin/nvcc;
# BUILD_DIR overrides build-cuda, e.g. build when scripts/build.sh found nvcc: no second build)
set -euo pipefail
cd "$(dirname "$0")/.."
if [ $# -lt 1 ]; then
  echo "usage: scripts/bundle-cuda.sh OUT [TARGET...]" >&2
  exit 2
fi
out=$1
shift
nvcc=${NVCC:-/usr/local/cuda/bin/nvcc}
if [ ! -x "$nvcc" ]; then
  echo "bundle-cuda.sh: nvcc not found at $nvcc (set NVCC)" >&2
  exit 1
fi
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
build=${BUILD_DIR:-build-cuda}
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DDRAMA_CUDA=ON \
  -DCMAKE_CUDA_COMPILER="$nvcc" "${launcher[@]}" >/dev/null
targets=(drama "$@")
ninja -C "$build" -j "${JOBS:-$(nproc)}" "${targets[@]}"

mkdir -p "$out"
for t in "${targets[@]}"; do
  cp -f "$build/$t" "$out/"
done
# Every library the executables need, resolved on this (Debian) machine.
for t in "${targets[@]}"; do
  ldd "$build/$t"
done | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' | sort -u | while read -r name path; do
  case "$name" in
    libc.so.* | libm.so.* | libresolv.so.* | ld-linux*.so.* | linux-vdso.so.*) continue ;;
  esac
  cp -fL "$path" "$out/$name"
done
# libespeak-ng's data (the espeak-ipa text frontend of drama-mini): libespeak-ng looks for it at
# its compiled-in Debian path, which a machine without Debian's packages lacks; ESPEAK_DATA_PATH
# (set by `run`, or by hand to OUT) points it here.
espeak_data=$(pkg-config --variable=libdir espeak-ng 2>/dev/null || echo /usr/lib/x86_64-linux-gnu)/espeak-ng-data
if [ ! -d "$espeak_data" ]; then
  echo "bundle-cuda.sh: espeak-ng-data not found at $espeak_data (package espeak-ng-data)" >&2
  exit 1
fi
rm -rf "$out/espeak-ng-data"
cp -r "$espeak_data" "$out/espeak-ng-data"
cat >"$out/run" <<'WRAPPER'
#!/bin/sh
# Runs a bundled executable with the bundled libraries and espeak-ng data: OUT/run drama ARGS...
here=$(cd "$(dirname "$0")" && pwd)
exe=$1
shift
ESPEAK_DATA_PATH="${ESPEAK_DATA_PATH:-$here}" \
  LD_LIBRARY_PATH="$here${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" exec "$here/$exe" "$@"
WRAPPER
chmod +x "$out/run"
echo "bundle-cuda.sh: $out: $(ls "$out" | wc -l) files, $(du -sh "$out" | cut -f1)"
