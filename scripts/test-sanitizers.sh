#!/usr/bin/env bash
# One clang build (build-asan/) with AddressSanitizer + UndefinedBehaviorSanitizer and libFuzzer
# coverage instrumentation: the tests run under the sanitizers, then every libFuzzer target for a
# bounded time. FUZZ_SECONDS sets the time per target (default 60: issue 2 asks for at least 60 s).
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${FUZZ_SECONDS:-60}
CC=clang CXX=clang++ cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug \
  -DCMAKE_CXX_FLAGS=-O1 -DDRAMA_FUZZ=ON -DDRAMA_BENCH=OFF -DDRAMA_CUDA=OFF >/dev/null
ninja -C build-asan
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1
# Leaks inside Debian libraries we cannot free, each with its reason (also read by libFuzzer).
export LSAN_OPTIONS=suppressions=$PWD/tests/sanitizers/lsan.supp
ctest --test-dir build-asan --output-on-failure -j "$(nproc)" -LE slow --timeout 900

for f in build-asan/fuzz_*; do
  [ -x "$f" ] || continue
  name=$(basename "$f")
  corpus=build-asan/corpus-$name
  mkdir -p "$corpus"
  [ -d "fuzz/seeds/$name" ] && cp -n fuzz/seeds/"$name"/* "$corpus"/ 2>/dev/null || true
  echo "fuzzing $name for ${seconds}s"
  # A finding makes libFuzzer exit non-zero; pipefail carries it to this script's status.
  (cd build-asan && "../$f" -max_total_time="$seconds" -rss_limit_mb=4096 -print_final_stats=1 \
    "../$corpus" 2>&1 | tail -n 12)
done
