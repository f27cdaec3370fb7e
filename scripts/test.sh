#!/usr/bin/env bash
# The README's test command: build (Release) and run every CTest test, then the numerical
# contract on the CPU backend. Assumes scripts/install-deps.sh has run.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/build.sh
jobs=$(nproc)
ctest --test-dir build --output-on-failure -j "$jobs" --timeout 900
# The numerical contract through the CLI, as users run it: its SUMMARY line closes the output.
build/drama contract --backend cpu
