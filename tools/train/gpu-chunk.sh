#!/usr/bin/env bash
# One chunk (< 10 minutes) of the drama-mini training on the GPU machine (docs/training.md).
# Run from the repository root through the device tool, carrying (ignored by git)
# ["train-carry/debs", "train-carry/resume"]:
#   train-carry/debs/    the .deb files of tools/corpus/fetch-debs.sh (the GPU machine has no
#                        Debian packages: festival and espeak-ng run from a dpkg -x root)
#   train-carry/resume/  the training state the previous chunk returned (absent the first time)
#   train-state/         (tracked, travels by itself) the codec state kept by take-chunk.sh,
#                        so a new session's fresh checkout can go on (ignored files do not last)
# The state lives in train-carry/work on the GPU machine. A warm machine (back-to-back calls)
# still has it, optimizer moments included, and keeps it when it is at least as far as resume/;
# a fresh machine starts from resume/ (no moments: the stage warms its learning rate up again).
# The chunk unpacks the .deb files, synthesizes the corpus where a stage still needs audio
# (/tmp/drama-corpus, kept while the machine is warm), runs `tools/train/train.py next` for
# DRAMA_TRAIN_MINUTES (default 8) or DRAMA_TRAIN_SECONDS (two chunks in one call) and writes the
# new state without optimizer moments as $OUT/work.tar.NN (pieces of 16 MiB: the device tool
# returns at most 8 files, 2 folders deep), plus progress.json, train.log and nvidia-smi's line (device.txt). Here, afterwards:
#   tools/train/take-chunk.sh FILES_AT      (unpacks the state into train-carry/resume)
# Carry during the model stage (train-carry/debs is no longer needed, the codec state stays here):
#   ["train-carry/resume/model", "train-carry/resume/progress.json"] on the warm machine that made
# the codes. A cold machine first gets ["train-carry/debs"] (the codec comes from train-state/)
# with DRAMA_TRAIN_UNTIL=encode (corpus and codes, about 3 minutes), then the model carry. A
# chunk returns only what it changed: codec/, or model/.
# DRAMA_TRAIN_STAGE=decoder: the decoder stage instead (the finished codec's decoding tensors
# train on, the codes and the model stay valid; recipe "decoder"): the codec state comes from
# train-state/, the corpus without glosses is made, `train.py decoder` runs, and decoder/ comes
# back (take-chunk.sh keeps it in train-state/ beside codec/). Carry ["train-carry/debs"].
# DRAMA_TRAIN_BENCH=1 measures steps/s by batch size (train.py bench) instead of training;
# DRAMA_TRAIN_BENCH=first measures, then trains for the rest of the chunk (with
# DRAMA_MODEL_SECONDS=S, the model stage's steps from the rate measured: S seconds of it;
# DRAMA_DECODER_SECONDS=S the same for the decoder stage's).
# Environment: DRAMA_TRAIN_DEVICE (default cuda), DRAMA_TRAIN_ARGS (extra train.py arguments),
# DRAMA_CORPUS_ARGS (extra synth.py arguments), DRAMA_TRAIN_CONFIG, DRAMA_TRAIN_RECIPE, and
# DRAMA_CORPUS_DIR / DRAMA_DEBIAN_ROOT (default /tmp/drama-corpus, /tmp/drama-debian-root).
set -euo pipefail
cd "$(dirname "$0")/../.."
out="${OUT:?OUT must name the folder whose files come back}"
carry="train-carry"
root="${DRAMA_DEBIAN_ROOT:-/tmp/drama-debian-root}"
corpus="${DRAMA_CORPUS_DIR:-/tmp/drama-corpus}"
# Run 4 (from 2026-12-03): the codec at 25 frames/s, adversarial from step 1000 (the side-by-side
# comparison, docs/training.md); run 3, the bundled model, was drama-mini.json + recipe.json.
recipe="${DRAMA_TRAIN_RECIPE:-tools/train/recipe-25.json}"
work="$carry/work"
seconds="${DRAMA_TRAIN_SECONDS:-$(( ${DRAMA_TRAIN_MINUTES:-8} * 60 ))}"
device="${DRAMA_TRAIN_DEVICE:-cuda}"
config="${DRAMA_TRAIN_CONFIG:-tools/train/drama-mini-25.json}"
py="${PYTHON:-python3}"
export PYTHONUNBUFFERED=1
start=$(date +%s)
mkdir -p "$out"
# The state to continue from, folder by folder (codec/, codes/, model/): the machine's own (fp32,
# with optimizer moments) unless resume/ holds one further on (a higher saved step) or the machine
# lacks it; progress.json merged (stages done, the larger seconds of each). So a cold machine can
# be given the codec first (DRAMA_TRAIN_UNTIL=encode: corpus and codes, which never travel) and
# the model state in the next call. Two sources, in this order: train-state/ (committed, so it
# travels with the working tree: the codec state, which must outlive a session; take-chunk.sh
# keeps it), then the carried train-carry/resume/.
"$py" - "$work" train-state "$carry/resume" <<'PY'
import json, os, shutil, sys
work, sources = sys.argv[1], sys.argv[2:]
def step(folder):
    p = os.path.join(folder, "state", "state.json")
    return json.load(open(p))["step"] if os.path.exists(p) else -1
def progress(folder):
    p = os.path.join(folder, "progress.json")
    return json.load(open(p)) if os.path.exists(p) else {"done": [], "seconds": {}}
os.makedirs(work, exist_ok=True)
for resume in sources:
    if not os.path.isdir(resume):
        continue
    for name in sorted(os.listdir(resume)):
        src, dst = os.path.join(resume, name), os.path.join(work, name)
        if not os.path.isdir(src):
            continue
        if name in ("codec", "model", "decoder") and step(src) < 0:  # nothing to resume from (an empty
            print(f"gpu-chunk: {name}/ of {resume} holds no state: skipped")  # train-state/codec
            continue  # on the device, 2026-12-03, made this chunk think its codec was lost)
        if not os.path.exists(dst) or step(src) > step(dst):
            shutil.rmtree(dst, ignore_errors=True)
            shutil.copytree(src, dst)
            print(f"gpu-chunk: {name}/ from {resume} (step {step(src)})")
        else:
            print(f"gpu-chunk: {name}/ of this machine (step {step(dst)})")
    if not os.path.exists(os.path.join(resume, "progress.json")):
        continue
    a, b = progress(resume), progress(work)
    merged = dict(a, **b)
    merged["done"] = [s for s in ("codec", "encode", "model", "decoder", "export") if s in a["done"] + b["done"]]
    merged["seconds"] = {k: max(a["seconds"].get(k, 0.0), b["seconds"].get(k, 0.0))
                         for k in sorted(set(a["seconds"]) | set(b["seconds"]))}
    with open(os.path.join(work, "progress.json"), "w") as f:
        json.dump(merged, f, indent=1)
PY
mkdir -p "$work"
# What this chunk does: the codec until its recipe's steps (returns codec/); then the codes from
# the final codec and the model (returns codes/ and model/, 10 + 44.5 MB); then the model.
phase=$("$py" - "$work" "$recipe" <<'PY'
import json, os, sys
work, recipe = sys.argv[1:]
r = json.load(open(recipe))
steps = r["codec"]["steps"]
codec = os.path.join(work, "codec", "state", "state.json")
codes = os.path.join(work, "codes", "index.json")
made = json.load(open(codes)) if os.path.exists(codes) else {}
fresh_codes = made.get("codec_step") == steps and made.get("corpus") == r.get("corpus")
if fresh_codes:
    print("model")
elif not os.path.exists(codec):
    print("codec" if not os.path.exists(os.path.join(work, "progress.json")) else "stale")
else:
    print("codec" if json.load(open(codec))["step"] < steps else "encode")
PY
)
if [ "${DRAMA_TRAIN_STAGE:-}" = decoder ]; then
  if [ "$phase" = codec ] || [ "$phase" = stale ]; then
    echo "gpu-chunk: the decoder stage needs the finished codec state (train-state/codec)" >&2
    exit 1
  fi
  phase=decoder
elif [ -n "${DRAMA_TRAIN_STAGE:-}" ]; then
  echo "gpu-chunk: DRAMA_TRAIN_STAGE=${DRAMA_TRAIN_STAGE}: only 'decoder' is run by name" >&2
  exit 2
fi
if [ "$phase" = stale ]; then
  echo "gpu-chunk: no codec state and no codes from the final codec here: first a call carrying train-carry/debs and train-carry/resume/codec with DRAMA_TRAIN_UNTIL=encode (docs/training.md)" >&2
  exit 1
fi
echo "gpu-chunk: $phase stage"
(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true) > "$out/device.txt" 2>&1
"$py" -c "import torch; print('torch', torch.__version__, 'cuda', torch.cuda.is_available())" | tee -a "$out/device.txt"

# synth.py's counts from the recipe's "corpus" (the codec reads split "train" only, the model
# also split "gloss"). The codec phase leaves the glosses out (about 90 s of the 110 on 16
# cores; the training split is the same without them) and the encode phase adds them (synth.py
# synthesizes only what is missing); a corpus made with other counts is made again.
with_glosses=1
if [ "$phase" = codec ] || [ "$phase" = decoder ]; then with_glosses=0; fi
corpus_args() {
  "$py" -c 'import json, sys
c = json.load(open(sys.argv[1])).get("corpus", {"heldout_per_speaker": 2})
if sys.argv[2] == "0":
    c.pop("gloss_per_speaker", None)
print(" ".join("--" + k.replace("_", "-") + " " + str(v) for k, v in sorted(c.items())))' "$recipe" "$with_glosses"
}
made=none
if [ -f "$corpus/corpus.json" ]; then
  made=$("$py" -c 'import json, sys
c = json.load(open(sys.argv[1])).get("corpus")
made = json.load(open(sys.argv[2]))
if c is None or all(made.get(k, 0) == v for k, v in c.items()):
    print("all")
elif all(made.get(k, 0) == v for k, v in c.items() if k != "gloss_per_speaker") and not made.get("gloss_per_speaker"):
    print("no-glosses")
else:
    print("other")' "$recipe" "$corpus/corpus.json")
fi
if [ "$made" = other ]; then
  echo "gpu-chunk: $corpus was synthesized with other counts than the recipe's: made again"
  rm -rf "$corpus"
  made=none
fi
if [ "$phase" != model ] && { [ "$made" = none ] || { [ "$made" = no-glosses ] && [ "$with_glosses" = 1 ]; }; }; then
  # codec and encode read audio
  if [ ! -d "$root/usr" ]; then
    tools/corpus/unpack-debs.sh "$carry/debs" "$root"
  fi
  t0=$(date +%s)
  # shellcheck disable=SC2046,SC2086
  "$py" tools/corpus/synth.py --out "$corpus" --root "$root" $(corpus_args) \
    --jobs "$(nproc)" ${DRAMA_CORPUS_ARGS:-}
  echo "gpu-chunk: corpus synthesized in $(( $(date +%s) - t0 )) s on $(nproc) cores" | tee -a "$out/device.txt"
fi
# The model stage needs no audio and no text frontend (the codes hold the tokens): its carry
# has no .deb files, so a fresh machine unpacks nothing then.
if [ "$phase" != model ] && [ ! -d "$root/usr" ]; then tools/corpus/unpack-debs.sh "$carry/debs" "$root"; fi
# train.py's environment: espeak-ng's library and data from the root for the encode stage's
# text frontend (espeak-ipa), pocketsphinx from there where it was carried (--asr).
export DRAMA_ASR_ROOT="$root" ESPEAK_DATA_PATH="$root/usr/lib/x86_64-linux-gnu"
export DRAMA_ESPEAK_LIB="$root/usr/lib/x86_64-linux-gnu/libespeak-ng.so.1"
# (libpulse, which libespeak-ng loads, finds libpulsecommon in pulseaudio/ through a RUNPATH that
# names the system folder; libdbus-1-3 installs under /lib.)
export LD_LIBRARY_PATH="$root/usr/lib/x86_64-linux-gnu:$root/usr/lib/x86_64-linux-gnu/pulseaudio:$root/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
# Preflight (not fatal): torch on the device and the text frontend under that environment.
"$py" - "$phase" <<'PY' 2>&1 | tee -a "$out/device.txt" || true
import sys
sys.path.insert(0, "tools/reference")
import torch
x = torch.ones(4, device="cuda" if torch.cuda.is_available() else "cpu").sum().item()
if sys.argv[1] == "model":  # the codes hold the tokens: no text frontend needed (nor unpacked)
    print(f"gpu-chunk: preflight ok (torch {torch.__version__})")
else:
    import text_frontend
    ids = text_frontend.text_tokens("The cat sat on the mat.", "espeak-ipa", "en-us")
    print(f"gpu-chunk: preflight ok (torch {torch.__version__}, {len(ids)} espeak-ipa tokens)")
PY
if [ -n "${DRAMA_TRAIN_BENCH:-}" ]; then  # steps/s by batch size (and eager vs CUDA graph)
  # shellcheck disable=SC2086
  "$py" tools/train/train.py bench --work "$work" --corpus "$corpus" --config "$config" \
    --recipe "$recipe" --device "$device" --json "$out/bench.json" ${DRAMA_TRAIN_BENCH_ARGS:-} | tee "$out/bench.log"
  echo "gpu-chunk: bench done at $(( $(date +%s) - start )) s" | tee -a "$out/bench.log"
  if [ "$DRAMA_TRAIN_BENCH" != first ]; then exit 0; fi  # =first: then the chunk as usual
  if [ -n "${DRAMA_MODEL_SECONDS:-}" ]; then
    # The model stage's length from the step rate just measured (the graphed step at the recipe's
    # batch, grouping and bucket, with the attention the training uses): model.steps = rate x DRAMA_MODEL_SECONDS, in
    # whole 500s, set before the stage starts (its cosine runs over it). Later chunks of the run
    # pass the same `--set model.steps=N` (DRAMA_TRAIN_ARGS), and recipe-25.json records it.
    steps=$("$py" - "$out/bench.json" "$recipe" "$DRAMA_MODEL_SECONDS" <<'PY'
import json, sys
bench, recipe, seconds = json.load(open(sys.argv[1])), json.load(open(sys.argv[2])), float(sys.argv[3])
r = recipe["model"]  # the rows of the batch, grouping and bucket the training will use
mine = [m for m in bench["model"] if m["batch"] == r["batch"] and m.get("group", 1) == r.get("group", 1)
        and m.get("bucket", 0) == r.get("bucket", 0)]
graphed = [m for m in mine if m["cuda_graph"] and not m["graph_failed"]]  # what the training runs
rows = graphed if recipe["model"].get("cuda_graph") and graphed else [m for m in mine if not m["cuda_graph"]]
fused = [m for m in rows if m.get("attention") == "sdpa"]
print(int(min(m["steps_per_s"] for m in fused or rows) * seconds) // 500 * 500)
PY
)
    DRAMA_TRAIN_ARGS="${DRAMA_TRAIN_ARGS:-} --set model.steps=$steps"
    echo "gpu-chunk: model.steps=$steps for ${DRAMA_MODEL_SECONDS} s of the model stage" | tee -a "$out/device.txt"
  fi
  if [ -n "${DRAMA_DECODER_SECONDS:-}" ]; then
    # The same for the decoder stage: decoder.steps = the graphed (else eager) rate of its step at
    # the recipe's batch x DRAMA_DECODER_SECONDS, in whole 500s (its cosine runs over it).
    steps=$("$py" - "$out/bench.json" "$DRAMA_DECODER_SECONDS" <<'PY'
import json, sys
rows, seconds = json.load(open(sys.argv[1]))["decoder"], float(sys.argv[2])
graphed = [m for m in rows if m["cuda_graph"] and not m["graph_failed"]]
print(int(min(m["steps_per_s"] for m in graphed or rows) * seconds) // 500 * 500)
PY
)
    DRAMA_TRAIN_ARGS="${DRAMA_TRAIN_ARGS:-} --set decoder.steps=$steps"
    echo "gpu-chunk: decoder.steps=$steps for ${DRAMA_DECODER_SECONDS} s of the decoder stage" | tee -a "$out/device.txt"
  fi
fi
left=$(( seconds - ($(date +%s) - start) ))
until_args=()
if [ "$phase" = codec ]; then until_args=(--until codec); fi
# The model phase stops after the model: the decoder stage reads audio, which that phase has not.
if [ "$phase" = model ]; then until_args=(--until model); fi
if [ -n "${DRAMA_TRAIN_UNTIL:-}" ]; then until_args=(--until "$DRAMA_TRAIN_UNTIL"); fi
stage=next
if [ "$phase" = decoder ]; then stage=decoder; until_args=(); fi
# shellcheck disable=SC2086
"$py" tools/train/train.py "$stage" "${until_args[@]}" --work "$work" --corpus "$corpus" --config "$config" \
  --recipe "$recipe" --minutes "$(awk "BEGIN {print ($left > 60 ? $left : 60) / 60}")" --device "$device" ${DRAMA_TRAIN_ARGS:-} \
  | tee "$out/train.log"
# What travels back: what this chunk changed, without optimizer moments, and progress.json, as a
# tar in 16 MiB pieces (the device tool returns at most 8 files of 16 MiB, 64 MiB in all): the
# codec stage its codec/ (19 MB); the encode and model stages model/ with its state as a BF16
# travel copy (tools/train/state.py travel) beside best/ (BF16), 22 + 22 MB. The codes (50 MB
# with the glosses) never travel: a cold machine makes them again from codec/ (above).
# (A chunk that returned codec, codes and model together, 72 MB, lost a piece on 2026-12-01.)
back="$work.back"
rm -rf "$back"
mkdir -p "$back"
case "$phase" in
  codec) cp -r "$work/codec" "$back/codec" ;;
  decoder) cp -r "$work/decoder" "$back/decoder" ;;
  *)
    if [ -d "$work/model" ]; then
      mkdir -p "$back/model"
      for f in "$work/model"/*; do
        if [ "$(basename "$f")" != state ]; then cp -r "$f" "$back/model/"; fi
      done
      if [ -d "$work/model/state" ]; then "$py" tools/train/state.py travel "$work/model/state" "$back/model/state"; fi
    fi ;;
esac
cp "$work/progress.json" "$back/progress.json"
(cd "$back" && find . -type f ! -name 'moments-*' ! -path './codec/eval/*' ! -path './decoder/eval/*' \
  | LC_ALL=C sort | tar -cf - -T -) | split -b 16M -d - "$out/work.tar."
rm -rf "$back"
cp "$work/progress.json" "$out/progress.json"
du -ch "$out"/work.tar.* | tail -1 | tee -a "$out/train.log"
echo "gpu-chunk: $(( $(date +%s) - start )) s" | tee -a "$out/train.log"
