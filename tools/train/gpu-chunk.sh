#!/usr/bin/env bash
# One chunk (< 10 minutes) of the drama-mini training on the GPU machine (docs/training.md).
# Run from the repository root through the device tool, carrying train-carry/ (ignored by git):
#   train-carry/debs/   the .deb files of tools/corpus/fetch-debs.sh (the GPU machine has no
#                       Debian packages: festival and espeak-ng run from a dpkg -x root)
#   train-carry/work/   the training state returned by the previous chunk (absent the first time)
# The chunk unpacks the .deb files, synthesizes the corpus where a stage still needs audio, runs
# `tools/train/train.py next` for DRAMA_TRAIN_MINUTES (default 8) and writes the new state,
# without optimizer moments (state.py: resumes with a short warmup), to $OUT/work plus
# $OUT/progress.json, losses and nvidia-smi's line. Copy $OUT/work back to train-carry/work
# before the next chunk. Environment: DRAMA_TRAIN_DEVICE (default cuda), DRAMA_TRAIN_ARGS (extra
# train.py arguments), DRAMA_CORPUS_ARGS (extra synth.py arguments), DRAMA_TRAIN_CONFIG.
set -euo pipefail
cd "$(dirname "$0")/../.."
out="${OUT:?OUT must name the folder whose files come back}"
carry="train-carry"
root="/tmp/drama-debian-root"
corpus="/tmp/drama-corpus"
work="$carry/work"
minutes="${DRAMA_TRAIN_MINUTES:-8}"
device="${DRAMA_TRAIN_DEVICE:-cuda}"
config="${DRAMA_TRAIN_CONFIG:-tools/train/drama-mini.json}"
py="${PYTHON:-python3}"
start=$(date +%s)
mkdir -p "$work" "$out"
(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true) > "$out/device.txt" 2>&1
"$py" -c "import torch; print('torch', torch.__version__, 'cuda', torch.cuda.is_available())" | tee -a "$out/device.txt"

needs_audio() {  # the codec and encode stages read the corpus audio
  "$py" - "$work/progress.json" <<'PY'
import json, os, sys
p = sys.argv[1]
done = json.load(open(p))["done"] if os.path.exists(p) else []
sys.exit(0 if not {"codec", "encode"} <= set(done) else 1)
PY
}

if needs_audio && [ ! -f "$corpus/corpus.json" ]; then
  if [ ! -d "$root/usr" ]; then
    tools/corpus/unpack-debs.sh "$carry/debs" "$root"
  fi
  # shellcheck disable=SC2086
  "$py" tools/corpus/synth.py --out "$corpus" --root "$root" --heldout-per-speaker 2 \
    --jobs "$(nproc)" ${DRAMA_CORPUS_ARGS:-}
  cp "$corpus/corpus.json" "$out/corpus.json"
fi
left=$(( minutes * 60 - ($(date +%s) - start) ))
# shellcheck disable=SC2086
DRAMA_ASR_ROOT="$root" ESPEAK_DATA_PATH="$root/usr/lib/x86_64-linux-gnu" \
  DRAMA_ESPEAK_LIB="$root/usr/lib/x86_64-linux-gnu/libespeak-ng.so.1" \
  LD_LIBRARY_PATH="$root/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
  "$py" tools/train/train.py next --work "$work" --corpus "$corpus" --config "$config" \
  --minutes "$(awk "BEGIN {print ($left > 60 ? $left : 60) / 60}")" --device "$device" ${DRAMA_TRAIN_ARGS:-} \
  | tee "$out/train.log"
# What travels back: the state without optimizer moments, losses, progress.
mkdir -p "$out/work"
(cd "$work" && find . -type f ! -name 'moments-*' ! -path './codec/eval/*' ! -path './export/*') \
  | while read -r f; do mkdir -p "$out/work/$(dirname "$f")"; cp "$work/$f" "$out/work/$f"; done
cp "$work/progress.json" "$out/progress.json"
du -sh "$out/work" | tee -a "$out/train.log"
echo "gpu-chunk: $(( $(date +%s) - start )) s"
