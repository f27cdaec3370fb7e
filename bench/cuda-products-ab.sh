#!/usr/bin/env bash
# Side-by-side A/B of the CUDA product-kernel switches (DRAMA_CUDA_PREFETCH, DRAMA_CUDA_FUSED_NORM,
# DRAMA_CUDA_WIDE_TILE) and an earlier binary (bundle/drama-before, when the bundle has one) in one
# device call: the backbone step and the lanes bench of bench-30b-a3b. Run from the bundle folder
# of bench/cuda-h200-run.sh (OUT: where ab.tar and ab-log.txt go).
set -u
out=${OUT:-/tmp/ab}
export LD_LIBRARY_PATH=$PWD/bundle ESPEAK_DATA_PATH=$PWD/bundle
cfg=configs/bench-30b-a3b.json
{
for v in before default prefetch0 fused0 wide0; do
  env=""; bin=bundle/drama
  case $v in before) bin=bundle/drama-before;; prefetch0) env="DRAMA_CUDA_PREFETCH=0";; fused0) env="DRAMA_CUDA_FUSED_NORM=0";; wide0) env="DRAMA_CUDA_WIDE_TILE=0";; esac
  echo "== step $v ($env)"
  env $env timeout 60 $bin bench decode --backend cuda --synthetic $cfg --frames 10 --repeats 5 --json $out/step-$v.json >/dev/null 2>&1
  echo "exit $?"
done
for v in before default fused0 wide0; do
  env=""; bin=bundle/drama
  case $v in before) bin=bundle/drama-before;; fused0) env="DRAMA_CUDA_FUSED_NORM=0";; wide0) env="DRAMA_CUDA_WIDE_TILE=0";; esac
  echo "== lanes $v ($env)"
  env $env timeout 80 $bin bench decode --backend cuda --synthetic $cfg --lanes 1,16,20,24,28,32 --stop-below-real-time --context 256 --prefill-chunk 4096 --frames 8 --repeats 1 --json $out/lanes-$v.json >/dev/null
  echo "exit $?"
done
python3 strip-paths.py $out/step-*.json $out/lanes-*.json
python3 - "$out" <<'PY'
import json, sys, glob, os
o = sys.argv[1]
for f in sorted(glob.glob(o + "/step-*.json")):
    b = json.load(open(f))["backbone_step"]
    print(os.path.basename(f), {k: round(v["per_step_ms"], 3) for k, v in b.items() if k in ("batch1_graph", "paired_batch2_graph", "batch1", "paired_batch2")})
for f in sorted(glob.glob(o + "/lanes-*.json")):
    j = json.load(open(f))
    print(os.path.basename(f), "most", j["most_streams_faster_than_real_time"], [(r["lanes"], round(r["step_ms"], 2), round(r["stream_real_time_factor"], 2)) for r in j["runs"]])
PY
tar cf $out/ab.tar -C $out $(cd $out && ls step-*.json lanes-*.json) && rm -f $out/step-*.json $out/lanes-*.json
} 2>&1 | tee $out/ab-log.txt
