#!/usr/bin/env bash
# One device call: the GPU tests, then default-mode bf16 inference of the four models (idle-start timing).
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH=.
OUT=${OUT:-bench/out/gpu-f}
mkdir -p "$OUT"
timeout 230 python3 -m pytest -q -p no:cacheprovider tests/gpu > "$OUT/pytest_gpu.log" 2>&1; tail -3 "$OUT/pytest_gpu.log"
timeout 330 python3 -m ember.bench --suite full --device cuda --models gpt2,bert,resnet50,vit_small --tasks infer \
  --dtypes bf16 --engines eager,inductor,ember --out "$OUT/default_infer" > "$OUT/default_infer.log" 2>&1
grep -v "^\[" "$OUT/default_infer.log" | grep -v "Warning\|warn" | tail -22
