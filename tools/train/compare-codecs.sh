#!/usr/bin/env bash
# Codec variants side by side on one GPU (docs/training.md, "Codec variants side by side").
#   tools/train/compare-codecs.sh NAME=CONFIG[,RECIPE] ...     the first variant is the control
#   tools/train/compare-codecs.sh --continue                   the call after, on the warm machine
# Run from the repository root through the device tool, carrying ["train-carry/debs"] (with
# train-state/ moved out of the working tree: a new codec starts from empty state, and the
# tree then fits beside the .deb files).
#
# Each variant's codec trains alone in its own work folder ($DRAMA_COMPARE_DIR/NAME, default
# /tmp/drama-compare), all at once on the one device (the codec step is a small fixed cost, so
# several processes share an H200), from the recipe's seed, so on the same batches step for step
# (a batch is drawn from (seed, step)), for the same wall time: DRAMA_COMPARE_SECONDS (default
# 420). DRAMA_TRAIN_ARGS (e.g. "--set codec.adv_start=1000") apply to every variant. Run again on
# the warm machine, each resumes from its state (optimizer moments included). The corpus is the
# recipe's training and held-out utterances; its glosses (model-stage text) are synthesized in
# the background once the trainers have read the corpus, so that gpu-chunk.sh can go on from
# here without synthesizing again (DRAMA_COMPARE_GLOSSES=0: not).
# Then each variant decodes the recipe's eval_utterances held-out utterances (train.py
# eval-codec: log-mel L1 with every codebook, with the first alone and unquantized; no WER on
# the GPU machine, which has no pocketsphinx), and $OUT/compare.json holds per variant its steps,
# wall seconds, last logged losses, the training losses of all variants at the same steps (the
# same batches: the mean of the last 10 rows logged by all) and the held-out figures, and a
# verdict: the variant to continue is the one of the lowest held-out mel L1 among those below
# the control's by at least DRAMA_COMPARE_MARGIN (0.05) whose training mel on the same steps is
# below the control's too (equal time favours the fast variants, equal steps the large ones),
# a 25 frames/s one only if it is also that far below every 12.5 frames/s one (twice the frames
# makes the model stage longer); or none. $OUT also gets compare.log and compare.tar.NN (16 MiB pieces): per variant losses.tsv,
# eval-STEP.json, the decodes (codec/eval/*.wav), state.json (no tensors), progress.json and
# the logs. Here, afterwards (pocketsphinx):
#   mkdir -p DIR && cat FILES_AT/compare.tar.* | tar -x -C DIR
#   python3 tools/train/train.py eval-codec --decoded --work DIR/NAME --corpus EVAL --config CONFIG
# (EVAL: tools/corpus/synth.py --out EVAL --train-per-speaker 0 --heldout-per-speaker 2, the same
# held-out recordings).
#
# --continue reads compare.json: with a verdict, the variant's state (moments included) becomes
# train-carry/work's codec and tools/train/gpu-chunk.sh trains it on with its config and recipe
# (DRAMA_TRAIN_MINUTES, DRAMA_TRAIN_ARGS as there; refused while a train-state/codec exists,
# which gpu-chunk.sh would merge in: it is another codec); without one, the comparison goes on.
set -euo pipefail
cd "$(dirname "$0")/../.."
out="${OUT:?OUT must name the folder whose files come back}"
dir="${DRAMA_COMPARE_DIR:-/tmp/drama-compare}"
root="${DRAMA_DEBIAN_ROOT:-/tmp/drama-debian-root}"
corpus="${DRAMA_CORPUS_DIR:-/tmp/drama-corpus}"
device="${DRAMA_TRAIN_DEVICE:-cuda}"
seconds="${DRAMA_COMPARE_SECONDS:-420}"
py="${PYTHON:-python3}"
export PYTHONUNBUFFERED=1
start=$(date +%s)
mkdir -p "$out" "$dir"

parse_spec() {  # NAME=CONFIG[,RECIPE] -> name, config, recipe (default tools/train/recipe.json)
  name="${1%%=*}"
  config="${1#*=}"
  recipe="${config#*,}"
  config="${config%%,*}"
  if [ "$recipe" = "$config" ]; then recipe=tools/train/recipe.json; fi
}
counts() {  # synth.py's counts from a recipe's corpus; $2=0: without the glosses
  "$py" -c 'import json, sys
c = json.load(open(sys.argv[1]))["corpus"]
if sys.argv[2] == "0":
    c.pop("gloss_per_speaker", None)
print(" ".join("--" + k.replace("_", "-") + " " + str(v) for k, v in sorted(c.items())))' "$1" "$2"
}
if [ "${1:-}" = --continue ]; then
  [ -f "$dir/compare.json" ] || { echo "compare-codecs: no $dir/compare.json (run the comparison first)" >&2; exit 1; }
  pick=$("$py" -c 'import json, sys; v = json.load(open(sys.argv[1]))["verdict"]["continue"]; print(v or "")' "$dir/compare.json")
  if [ -z "$pick" ]; then
    echo "compare-codecs: no variant is clearly better: the comparison goes on"
    mapfile -t variants < "$dir/variants.txt"
    set -- "${variants[@]}"
  else
    if [ -e train-state/codec ]; then
      echo "compare-codecs: train-state/codec exists (another codec, which gpu-chunk.sh would merge in): move it aside" >&2
      exit 1
    fi
    parse_spec "$(grep "^$pick=" "$dir/variants.txt")"
    echo "compare-codecs: continuing $pick ($config, $recipe) with tools/train/gpu-chunk.sh"
    mkdir -p train-carry/work
    rm -rf train-carry/work/codec
    cp -r "$dir/$pick/codec" train-carry/work/codec
    rm -rf train-carry/work/codec/eval train-carry/work/codec/eval-*.json
    cp "$dir/$pick/progress.json" train-carry/work/progress.json
    # The recipe's whole corpus (glosses too, if the background synthesis did not finish): synth.py
    # skips what exists, and gpu-chunk.sh then finds the counts it wants.
    # shellcheck disable=SC2046
    "$py" tools/corpus/synth.py --out "$corpus" --root "$root" $(counts "$recipe" 1) \
      --jobs "$(nproc)" > "$out/synth.log" 2>&1
    DRAMA_TRAIN_CONFIG="$config" DRAMA_TRAIN_RECIPE="$recipe" exec tools/train/gpu-chunk.sh
  fi
fi

[ $# -ge 1 ] || { echo "usage: compare-codecs.sh NAME=CONFIG[,RECIPE] ... | --continue" >&2; exit 2; }
printf '%s\n' "$@" > "$dir/variants.txt"
names=()
for spec in "$@"; do names+=("${spec%%=*}"); done
parse_spec "$1"
recipe0=$recipe  # the corpus counts come from the first variant's recipe
(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true) > "$out/device.txt" 2>&1
if [ ! -f "$corpus/corpus.json" ]; then
  if [ ! -d "$root/usr" ]; then tools/corpus/unpack-debs.sh train-carry/debs "$root"; fi
  t0=$(date +%s)
  # shellcheck disable=SC2046
  "$py" tools/corpus/synth.py --out "$corpus" --root "$root" $(counts "$recipe0" 0) --jobs "$(nproc)"
  echo "compare-codecs: corpus synthesized in $(( $(date +%s) - t0 )) s" | tee -a "$out/device.txt"
fi
left=$(( seconds - ($(date +%s) - start) ))
[ "$left" -gt 60 ] || left=60
minutes=$(awk "BEGIN {print $left / 60}")
pids=()
for spec in "$@"; do
  parse_spec "$spec"
  mkdir -p "$dir/$name"
  # shellcheck disable=SC2086
  "$py" tools/train/train.py codec --work "$dir/$name" --corpus "$corpus" --config "$config" \
    --recipe "$recipe" --minutes "$minutes" --device "$device" --threads 2 \
    --set codec.eval_every=0 ${DRAMA_TRAIN_ARGS:-} >> "$dir/$name/train.log" 2>&1 &
  pids+=($!)
  echo "compare-codecs: $name ($config, $recipe) training for $minutes minutes, pid ${pids[-1]}"
done
# GPU memory and utilisation every 30 s while they train (gpu.txt)
(while sleep 30; do nvidia-smi --query-gpu=memory.used,utilization.gpu --format=csv,noheader 2>/dev/null || exit 0; done) >> "$out/gpu.txt" &
sampler=$!
synth=""
if [ "${DRAMA_COMPARE_GLOSSES:-1}" != 0 ] && ! "$py" -c 'import json, sys
sys.exit(0 if "gloss_per_speaker" in json.load(open(sys.argv[1])) else 1)' "$corpus/corpus.json"; then
  # once every trainer has read the corpus (its first loss row): synth.py rewrites corpus.tsv
  for _ in $(seq 240); do
    ready=1
    for name in "${names[@]}"; do [ -f "$dir/$name/codec/losses.tsv" ] || ready=0; done
    alive=0
    for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null && alive=1; done
    if [ "$ready" = 1 ] || [ "$alive" = 0 ]; then break; fi
    sleep 1
  done
  # shellcheck disable=SC2046
  nice -n 19 "$py" tools/corpus/synth.py --out "$corpus" --root "$root" $(counts "$recipe0" 1) \
    --jobs "$(( $(nproc) > 6 ? $(nproc) - 6 : 1 ))" > "$out/synth.log" 2>&1 &
  synth=$!
  echo "compare-codecs: glosses synthesizing in the background, pid $synth"
fi
failed=0
for i in "${!pids[@]}"; do
  if ! wait "${pids[$i]}"; then
    echo "compare-codecs: ${names[$i]} failed (its train.log):"; tail -5 "$dir/${names[$i]}/train.log"; failed=1
  fi
done
if [ -n "$synth" ]; then
  if kill -0 "$synth" 2>/dev/null; then
    echo "compare-codecs: the gloss synthesis is still running: stopped (--continue completes it)"
    kill "$synth" 2>/dev/null || true
  fi
  wait "$synth" 2>/dev/null || true
fi
kill "$sampler" 2>/dev/null || true
echo "compare-codecs: training done at $(( $(date +%s) - start )) s"
pids=()
for spec in "$@"; do
  parse_spec "$spec"
  [ -f "$dir/$name/codec/state/state.json" ] || continue
  rm -rf "$dir/$name/codec/eval"
  # shellcheck disable=SC2086
  "$py" tools/train/train.py eval-codec --work "$dir/$name" --corpus "$corpus" --config "$config" \
    --recipe "$recipe" --device "$device" --threads 2 ${DRAMA_TRAIN_ARGS:-} > "$dir/$name/eval.log" 2>&1 &
  pids+=($!)
done
for pid in "${pids[@]}"; do wait "$pid" || failed=1; done
echo "compare-codecs: evaluation done at $(( $(date +%s) - start )) s"
"$py" - "$dir" "${DRAMA_COMPARE_MARGIN:-0.05}" "$out/compare.json" "$@" <<'PY'
import json, os, sys
dir_, margin, dest, specs = sys.argv[1], float(sys.argv[2]), sys.argv[3], sys.argv[4:]
def rows(path):
    with open(path) as f:
        head = f.readline().rstrip("\n").split("\t")
        return [dict(zip(head, (float(v) for v in line.rstrip("\n").split("\t")))) for line in f]
out, logged = {}, {}
for spec in specs:
    name, rest = spec.split("=", 1)
    config = rest.split(",")[0]
    work = os.path.join(dir_, name)
    v = {"config": config, "recipe": rest.split(",")[1] if "," in rest else "tools/train/recipe.json",
         "frame_rate": json.load(open(config))["audio"]["frame_rate"]}
    path = os.path.join(work, "codec", "state", "state.json")
    if os.path.exists(path):
        v["step"] = json.load(open(path))["step"]
        seconds = json.load(open(os.path.join(work, "progress.json")))["seconds"]
        v["wall_seconds"] = seconds.get("codec", seconds.get("codec@cpu"))
        step = v["step"]
        report = os.path.join(work, "codec", f"eval-{step}.json")
        if os.path.exists(report):
            v["heldout"] = json.load(open(report))
        table = rows(os.path.join(work, "codec", "losses.tsv"))
        logged[name] = {int(r["step"]): r for r in table}
        v["last_logged"] = table[-1]
    out[name] = v
names = [s.split("=", 1)[0] for s in specs]
common = sorted(set.intersection(*(set(logged[n]) for n in names if n in logged))) if logged else []
window = [s for s in common if s > 1][-10:]
for n in names:
    if n in logged and window:
        out[n]["same_steps"] = {"steps": [window[0], window[-1]], **{
            k: round(sum(logged[n][s][k] for s in window) / len(window), 4) for k in ("mel", "stft", "adv", "fm")}}
mel = {n: out[n]["heldout"]["mel_l1"] for n in names if "mel_l1" in out[n].get("heldout", {})}
control = names[0]
def paired(n):  # the training mel on the same batches (the same steps) is lower too
    a, b = out[n].get("same_steps"), out[control].get("same_steps")
    return a is not None and b is not None and a["mel"] < b["mel"]
better = [n for n in names[1:] if n in mel and control in mel and mel[n] <= mel[control] - margin and paired(n)]
slow = [n for n in mel if out[n]["frame_rate"] <= 12.5]
def allowed(n):
    if out[n]["frame_rate"] <= 12.5:
        return True
    return all(mel[n] <= mel[m] - margin for m in slow)
chosen = [n for n in better if allowed(n)]
pick = min(chosen, key=lambda n: mel[n]) if chosen else None
verdict = {"continue": pick, "rule": f"lowest held-out mel L1 among variants at least {margin} below the control's ({control}) whose training mel on the same steps is lower too; a 25 frames/s variant also {margin} below every 12.5 frames/s one",
           "heldout_mel_l1": mel}
result = {"variants": out, "verdict": verdict}
json.dump(result, open(os.path.join(dir_, "compare.json"), "w"), indent=1)
json.dump(result, open(dest, "w"), indent=1)
for n in names:
    v = out[n]
    h = v.get("heldout", {})
    print(f"compare: {n}: step {v.get('step')}, held-out mel {h.get('mel_l1')} (first codebook {h.get('mel_l1_first_codebook')}, unquantized {h.get('mel_l1_unquantized')}), same steps {v.get('same_steps')}")
print(f"compare: verdict {pick}")
PY
back="$dir.back"
rm -rf "$back"
mkdir -p "$back"
for name in "${names[@]}"; do
  [ -d "$dir/$name" ] || continue
  (cd "$dir" && find "$name" -type f \( -path '*/codec/eval/*' -o -name losses.tsv -o -name 'eval-*.json' \
     -o -path '*/state/state.json' -o -name progress.json -o -name '*.log' \) | LC_ALL=C sort \
     | tar -cf - -T -) | tar -x -C "$back"
done
(cd "$back" && tar -cf - .) | split -b 16M -d - "$out/compare.tar."
rm -rf "$back"
du -ch "$out"/compare.tar.* | tail -1
echo "compare-codecs: $(( $(date +%s) - start )) s"
exit "$failed"
