#!/usr/bin/env bash
# The README's first command: install dependencies, build, and speak one sentence into hello.wav
# with the bundled default model (drama-mini: small, trained on synthetic voices; README says how
# well it speaks).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
build/drama say "Hello from drama." -o hello.wav
