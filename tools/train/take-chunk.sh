#!/usr/bin/env bash
# Unpacks what one tools/train/gpu-chunk.sh call returned (FILES_AT/work.tar.NN) into the state
# the next call carries, train-carry/resume (docs/training.md). What the chunk did not send back
# (the codec state once the codes are made) is kept from the previous resume/; the previous
# resume/ itself is kept as train-carry/resume.prev. The codec and decoder states and
# progress.json are also copied into train-state/ (tracked: commit it), since train-carry/ is
# ignored by git and a new session's checkout has none of it (the step-24000 codec of 2026-12-01
# was lost that way); a stage the chunk did not return keeps train-state/'s copy.
#   tools/train/take-chunk.sh FILES_AT [CARRY] [KEEP]
set -euo pipefail
files="${1:?usage: take-chunk.sh FILES_AT [CARRY]}"
carry="${2:-train-carry}"
keep="${3:-train-state}"
new="$carry/resume.new"
rm -rf "$new"
mkdir -p "$new"
cat "$files"/work.tar.* | tar -x -C "$new"
if [ -d "$carry/resume" ]; then
  # a stage folder, or a stage's state folder, that the chunk did not return comes from resume/
  python3 - "$carry/resume" "$new" <<'PY'
import os, shutil, sys
old, new = sys.argv[1:]
for top in sorted(os.listdir(old)):
    for rel in (top, os.path.join(top, "state")):
        if os.path.isdir(os.path.join(old, rel)) and not os.path.exists(os.path.join(new, rel)):
            shutil.copytree(os.path.join(old, rel), os.path.join(new, rel))
            print(f"take-chunk: {rel} kept from the previous state")
PY
  rm -rf "$carry/resume.prev"
  mv "$carry/resume" "$carry/resume.prev"
fi
mv "$new" "$carry/resume"
python3 - "$carry/resume" <<'PY'
import json, os, sys
folder = sys.argv[1]
progress = json.load(open(os.path.join(folder, "progress.json")))
steps = {}
for stage in ("codec", "model", "decoder"):
    p = os.path.join(folder, stage, "state", "state.json")
    if os.path.exists(p):
        steps[stage] = json.load(open(p))["step"]
print(f"take-chunk: {folder}: done {progress['done']}, steps {steps}, seconds {progress['seconds']}")
PY
du -sh "$carry/resume"
if [ -d "$carry/resume/codec/state" ] || [ -d "$carry/resume/decoder/state" ]; then
  rm -rf "$keep.new"
  if [ -d "$keep" ]; then cp -r "$keep" "$keep.new"; else mkdir -p "$keep.new"; fi
  for stage in codec decoder; do
    if [ -d "$carry/resume/$stage/state" ]; then
      rm -rf "${keep:?}.new/$stage"
      cp -r "$carry/resume/$stage" "$keep.new/$stage"
    fi
    rm -rf "$keep.new/$stage/eval"  # audio written by eval-codec here, not state
  done
  cp "$carry/resume/progress.json" "$keep.new/progress.json"
  rm -rf "$keep"
  mv "$keep.new" "$keep"
  du -sh "$keep" | cut -f1 | xargs echo "take-chunk: kept the codec and decoder states and progress.json in $keep (commit it):"
fi
