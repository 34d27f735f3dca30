#!/usr/bin/env bash
# One device call of the tenth session; PARTS picks what it runs, in this order:
#   tests     the full tests/gpu
#   profile   kernel device times of PROFILE models (task PTASK), ember vs Inductor, and ember's output code
#   bench     default-mode bf16 TASK of each of MODELS in its own bench process (fresh caches), LIMIT s each
#   ro        reduce-overhead bf16 inference at batch 1 and 8 (bench/gpu_reduce_overhead.sh) with RO_MODELS
#   kernels   the kernel microbenchmarks (bench/kernels.py), fp32 and bf16
#   stats     variance/mean kernels, time and accuracy (bench/stats_bench.py)
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH=.
OUT=${OUT:-bench/out/gpu-t}
mkdir -p "$OUT"
for part in ${PARTS:-tests}; do
  case $part in
  tests)
    timeout ${TLIMIT:-200} python3 -m pytest -q -p no:cacheprovider ${TESTS:-tests/gpu} > "$OUT/pytest_gpu.log" 2>&1
    tail -1 "$OUT/pytest_gpu.log"; grep -E "^(FAILED|ERROR)" "$OUT/pytest_gpu.log" | head -20 ;;
  profile)
    for m in ${PROFILE:-resnet50}; do
      timeout 150 python3 bench/profile_model.py --model $m --task ${PTASK:-infer} --engines ember,inductor \
        > "$OUT/profile_${m}_${PTASK:-infer}.log" 2>&1
      grep -E "^==|total|by kind" "$OUT/profile_${m}_${PTASK:-infer}.log"
      EMBER_LOGS=output_code timeout 100 python3 bench/compile_breakdown.py --model $m --task ${PTASK:-infer} \
        > "$OUT/${m}_${PTASK:-infer}_code.log" 2>&1
      gzip -f "$OUT/${m}_${PTASK:-infer}_code.log"
    done ;;
  bench)
    for m in ${MODELS:-resnet50}; do
      timeout ${LIMIT:-150} python3 -m ember.bench --suite full --device cuda --models $m --tasks ${TASK:-train} \
        --dtypes bf16 --engines eager,inductor,ember --out "$OUT/${TASK:-train}_$m" > "$OUT/${TASK:-train}_$m.log" 2>&1
      grep -E "^$m " "$OUT/${TASK:-train}_$m.log"
    done ;;
  ro)
    OUT=$OUT/ro MODELS=${RO_MODELS:-gpt2,bert,vit_small,resnet50} bash bench/gpu_reduce_overhead.sh ;;
  kernels)
    for d in float32 bfloat16; do
      timeout 150 python3 bench/kernels.py --dtype $d > "$OUT/kernels_$d.txt" 2>&1; tail -14 "$OUT/kernels_$d.txt"
    done ;;
  stats)
    timeout 200 python3 bench/stats_bench.py > "$OUT/stats.txt" 2>&1; tail -8 "$OUT/stats.txt" ;;
  esac
done
