#!/usr/bin/env bash
# The tests again under AddressSanitizer + UndefinedBehaviorSanitizer (build-asan/), then every
# libFuzzer target for a bounded time (build-fuzz/, clang). FUZZ_SECONDS sets the time per target.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${FUZZ_SECONDS:-60}
cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS=-O1 \
  -DDRAMA_SANITIZE=ON -DDRAMA_BENCH=OFF -DDRAMA_CUDA=OFF >/dev/null
ninja -C build-asan
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1
# Under the sanitizers the contract checks gates and controls; its runtime limits would time the
# instrumentation.
export DRAMA_CONTRACT_NO_LIMITS=1
ctest --test-dir build-asan --output-on-failure -j "$(nproc)" -LE slow --timeout 900

CC=clang CXX=clang++ cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=Debug \
  -DCMAKE_CXX_FLAGS=-O1 -DDRAMA_FUZZ=ON -DDRAMA_TESTS=OFF -DDRAMA_BENCH=OFF -DDRAMA_CUDA=OFF >/dev/null
# Only the fuzz targets (and the libraries they link), not the CLI.
ninja -C build-fuzz $(ninja -C build-fuzz -t targets all | sed -n 's/^\(fuzz_[a-z0-9_]*\): .*/\1/p')
for f in build-fuzz/fuzz_*; do
  [ -x "$f" ] || continue
  name=$(basename "$f")
  corpus=build-fuzz/corpus-$name
  mkdir -p "$corpus"
  [ -d "fuzz/seeds/$name" ] && cp -n fuzz/seeds/"$name"/* "$corpus"/ 2>/dev/null || true
  echo "fuzzing $name for ${seconds}s"
  "$f" -max_total_time="$seconds" -rss_limit_mb=4096 -print_final_stats=1 "$corpus" 2>&1 | tail -n 12
done
