#!/usr/bin/env bash
# The README's first command: install dependencies, build, and speak one sentence into hello.wav
# with the bundled default model (a small random-weight checkpoint until a trained one exists:
# the audio is noise-like, not speech).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
build/drama say "Hello from drama." -o hello.wav
