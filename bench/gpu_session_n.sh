#!/usr/bin/env bash
# One device call: the GPU tests, then default-mode bf16 inference of the four models.
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH=.
OUT=${OUT:-bench/out/gpu-n}
mkdir -p "$OUT"
timeout 200 python3 -m pytest -q -x -p no:cacheprovider tests/gpu > "$OUT/pytest_gpu.log" 2>&1; tail -2 "$OUT/pytest_gpu.log"
timeout 360 python3 -m ember.bench --suite full --device cuda --models gpt2,bert,resnet50,vit_small --tasks infer \
  --dtypes bf16 --engines eager,inductor,ember --out "$OUT/default_infer" > "$OUT/default_infer.log" 2>&1
grep -E "^(gpt2|bert|resnet50|vit_small) |geomean" "$OUT/default_infer.log"
