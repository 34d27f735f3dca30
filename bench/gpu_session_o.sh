#!/usr/bin/env bash
# One device call: where ember's cold and warm compile time goes (bench/compile_breakdown.py), per model.
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH=.
OUT=${OUT:-bench/out/gpu-o}
mkdir -p "$OUT"
for m in ${MODELS:-gpt2 resnet50 bert vit_small}; do
  timeout ${LIMIT:-200} python3 bench/compile_breakdown.py --model "$m" --task ${TASK:-train} --warm \
    > "$OUT/breakdown_${m}_${TASK:-train}.log" 2>&1
  cat "$OUT/breakdown_${m}_${TASK:-train}.log" | grep -v Warning
done
