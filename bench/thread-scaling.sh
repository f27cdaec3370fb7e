#!/usr/bin/env bash
# CPU thread scaling of `drama bench decode` (issue 12) on the cpu-bench config, paired guidance,
# at 1, 2, 4, 8 and 16 threads, written as one receipt:
#
#   bench/thread-scaling.sh [--drama PATH] [--checkpoint DIR] [--out FILE] [--threads "1 2 4 8 16"]
#                           [--rounds N] [--frames N] [--repeats N] [--waits "auto sleep"]
#
# Needs only the drama binary (its shared libraries beside it or on LD_LIBRARY_PATH), python3 and
# the checkpoint directory; when the directory is absent it is made with `drama make-checkpoint`
# from configs/cpu-bench.json (a copy is embedded below for machines without the repository).
# Rounds run every thread count in turn (1 2 4 8 16 1 2 ...), so a drift of the machine's speed
# falls on all of them; each figure is the median over rounds of bench decode's own median
# sample, and every sample is kept. Each sample's read bandwidth is measured in the same run with
# the same thread count. --waits adds passes with DRAMA_CPU_WAIT forced (e.g. "auto sleep": the
# default policy, then every pool sleeping, for the comparison). When the binary has `--lanes`,
# 1 lane at 1 thread and 4 lanes at 8 threads are measured too.
# Default receipt: results/threads-xeon16.json (beside this script's repository, else ./).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
drama=""
ck=""
out=""
threads="1 2 4 8 16"
rounds=2
frames=32
repeats=5
waits="auto"
while [[ $# -gt 0 ]]; do
  case $1 in
    --drama) drama=$2; shift 2 ;;
    --checkpoint) ck=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --frames) frames=$2; shift 2 ;;
    --repeats) repeats=$2; shift 2 ;;
    --waits) waits=$2; shift 2 ;;
    -h|--help) sed -n '2,19p' "$0"; exit 0 ;;
    *) echo "thread-scaling.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
if [[ -z $drama ]]; then
  for c in "$repo/build/drama" "$here/drama" "$(command -v drama || true)"; do
    [[ -n $c && -x $c ]] && { drama=$c; break; }
  done
fi
[[ -n $drama && -x $drama ]] || { echo "thread-scaling.sh: no drama binary (give --drama PATH)" >&2; exit 2; }
drama=$(cd "$(dirname "$drama")" && pwd)/$(basename "$drama")
# A bundle keeps its shared libraries beside the binary.
if compgen -G "$(dirname "$drama")/lib*.so*" >/dev/null; then
  export LD_LIBRARY_PATH="$(dirname "$drama")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
[[ -n $ck ]] || ck="$PWD/cpu-bench-seed1-nvfp4"
if [[ -z $out ]]; then
  if [[ -d $repo/results ]]; then out="$repo/results/threads-xeon16.json"; else out="$PWD/threads-xeon16.json"; fi
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

if [[ ! -f $ck/manifest.json ]]; then
  config="$repo/configs/cpu-bench.json"
  if [[ ! -f $config ]]; then
    config="$tmp/cpu-bench.json"
    cat >"$config" <<'JSON'
{"model_type": "drama3",
 "text": {"frontend": "bytes", "vocab_size": 260, "bos_id": 256, "eos_id": 257, "pad_id": 258},
 "audio": {"num_codebooks": 8, "codebook_size": 2048, "eos_code": 2048, "frame_rate": 12.5,
           "sample_rate": 24000},
 "backbone": {"hidden_size": 1024, "num_layers": 24, "num_heads": 16, "num_kv_heads": 4,
              "head_dim": 64, "intermediate_size": 2816, "rms_norm_eps": 1e-06,
              "rope_theta": 1000000.0, "max_position_embeddings": 8192,
              "moe": {"num_experts": 64, "experts_per_token": 4, "expert_intermediate_size": 512,
                      "norm_topk_prob": true, "shared_expert_intermediate_size": 0,
                      "dense_layers": [0], "kept_experts": null}},
 "tower": {"hidden_size": 512, "num_layers": 4, "num_heads": 8, "num_kv_heads": 2, "head_dim": 64,
           "intermediate_size": 1408, "rms_norm_eps": 1e-06, "rope_theta": 10000.0},
 "guidance": {"default_gamma": 1.5},
 "sampling": {"temperature": 0.9, "top_k": 50, "top_p": 1.0},
 "codec": {"sampling_rate": 24000, "audio_channels": 1, "hidden_size": 512, "num_filters": 64,
           "num_residual_layers": 1, "upsampling_ratios": [8, 6, 5, 4], "kernel_size": 7,
           "last_kernel_size": 3, "residual_kernel_size": 3, "dilation_growth_rate": 2,
           "use_causal_conv": true, "pad_mode": "constant", "compress": 2,
           "trim_right_ratio": 1.0, "use_conv_shortcut": false, "upsample_groups": 512,
           "codebook_size": 2048, "codebook_dim": 256, "num_quantizers": 32,
           "vector_quantization_hidden_dimension": 256, "num_semantic_quantizers": 1,
           "num_hidden_layers": 8, "intermediate_size": 2048, "num_attention_heads": 8,
           "num_key_value_heads": 8, "head_dim": 64, "hidden_act": "gelu",
           "max_position_embeddings": 8000, "norm_eps": 1e-05,
           "rope_parameters": {"rope_theta": 10000.0, "rope_type": "default"},
           "sliding_window": 250, "layer_scale_initial_scale": 0.01, "attention_bias": false}}
JSON
  fi
  echo "making the cpu-bench checkpoint in $ck (a few minutes)" >&2
  "$drama" make-checkpoint --config "$config" --seed 1 --nvfp4 -o "$ck" >&2
fi

lanes=0
"$drama" bench decode --help 2>&1 | grep -q -- '--lanes' && lanes=1
cores=$(nproc)
run() {  # run NAME WAIT THREADS [extra bench decode arguments...]
  local name=$1 wait=$2 t=$3
  shift 3
  if ((t > cores)); then echo "skip $name: $t threads > $cores cores" >&2; return; fi
  echo "$name: $t threads, wait $wait" >&2
  DRAMA_CPU_WAIT=$wait "$drama" bench decode --checkpoint "$ck" --manifest "$ck/manifest.json" \
    --backend cpu --cfg paired --frames "$frames" --repeats "$repeats" --threads "$t" "$@" \
    --json "$tmp/$name.json" >/dev/null
}
for ((round = 0; round < rounds; ++round)); do
  for wait in $waits; do
    for t in $threads; do run "decode-$wait-$t-r$round" "$wait" "$t"; done
    if ((lanes)); then
      run "lanes1-$wait-1-r$round" "$wait" 1 --lanes 1
      run "lanes4-$wait-8-r$round" "$wait" 8 --lanes 4
    fi
  done
done

cpu_model=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')
python3 - "$tmp" "$out" "$drama" "$ck" "$cpu_model" "$cores" "$frames" "$repeats" "$rounds" \
  "$threads" "$waits" <<'PY'
import datetime, glob, json, os, statistics, sys
tmp, out, drama, ck, cpu_model, cores, frames, repeats, rounds, threads, waits = sys.argv[1:]
runs = {}
for path in sorted(glob.glob(os.path.join(tmp, "*.json"))):
    name = os.path.basename(path)[:-5]
    kind, wait, t, _ = name.split("-")
    runs.setdefault((kind, wait, int(t)), []).append(json.load(open(path)))

def value(r, key):
    # bench decode before --lanes said *_per_frame; with --lanes it says *_per_step (one lane:
    # the same figure).
    if key in r:
        return r[key]
    return r[key.replace("_per_frame", "_per_step")]

def med(rs, key):
    return statistics.median(value(r, key) for r in rs)

table = []
for wait in waits.split():
    base = runs.get(("decode", wait, 1))
    for t in map(int, threads.split()):
        rs = runs.get(("decode", wait, t))
        if not rs:
            continue
        row = {"threads": t, "wait": wait, "backend": rs[0].get("backend"),
               "per_frame_ms": med(rs, "per_frame_ms"),
               "backbone_ms_per_frame": med(rs, "backbone_ms_per_frame"),
               "tower_ms_per_frame": med(rs, "tower_ms_per_frame"),
               "read_gb_s": statistics.median(r["memory"]["read_gb_s"] for r in rs),
               "fraction_of_read_bandwidth": med(rs, "fraction_of_read_bandwidth"),
               "per_round_ms": [r["per_frame_ms"] for r in rs]}
        if base:
            row["speedup_vs_1_thread"] = med(base, "per_frame_ms") / row["per_frame_ms"]
        table.append(row)
lanes = {}
for wait in waits.split():
    one, four = runs.get(("lanes1", wait, 1)), runs.get(("lanes4", wait, 8))
    if one and four:
        a, b = med(one, "aggregate_frames_per_s"), med(four, "aggregate_frames_per_s")
        lanes[wait] = {"lanes1_threads1_frames_per_s": a, "lanes4_threads8_frames_per_s": b,
                       "ratio": b / a,
                       "read_gb_s": [statistics.median(r["memory"]["read_gb_s"] for r in rs)
                                     for rs in (one, four)]}
receipt = {
    "bench": "thread-scaling",
    "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    "cpu_model": cpu_model, "cores": int(cores),
    "drama": os.path.basename(drama), "provenance": next(iter(runs.values()))[0].get("provenance") if runs else None,
    "checkpoint": "make-checkpoint --config configs/cpu-bench.json --seed 1 --nvfp4",
    "settings": {"cfg": "paired", "frames": int(frames), "repeats": int(repeats),
                 "rounds": int(rounds), "threads": list(map(int, threads.split())),
                 "waits": waits.split(), "weights": "in memory (default)"},
    "table": table,
    "lanes": lanes,
    "runs": {"-".join(map(str, k)): v for k, v in runs.items()},
    "note": "per_frame_ms: median over rounds of each run's median sample (bench decode); "
            "speedup_vs_1_thread: 1-thread per_frame_ms / this row's, same wait mode; read_gb_s: "
            "the read bandwidth bench decode measured beside the decode, same thread count. "
            "backend names the wait mode the pool chose (spin or sleep). lanes: aggregate frames "
            "per second of 4 lanes at 8 threads over 1 lane at 1 thread (medians over rounds)."}
os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
json.dump(receipt, open(out, "w"), indent=1)
for row in table:
    print(f"{row['wait']:>5} {row['threads']:>2} threads: {row['per_frame_ms']:7.2f} ms/frame"
          f"  x{row.get('speedup_vs_1_thread', float('nan')):.2f}  read {row['read_gb_s']:.1f} GB/s")
for wait, l in lanes.items():
    print(f"{wait:>5} 4 lanes at 8 threads / 1 lane at 1 thread: x{l['ratio']:.2f} aggregate frames/s")
print("receipt:", out)
PY
