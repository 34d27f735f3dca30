#!/usr/bin/env bash
# One device call: default-mode bf16 training steps of the four models (idle-start timing), eager vs
# torch.compile vs ember, with cold compile times.
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH=.
OUT=${OUT:-bench/out/gpu-g}
MODELS=${MODELS:-gpt2,bert,resnet50,vit_small}
mkdir -p "$OUT"
timeout ${LIMIT:-560} python3 -m ember.bench --suite full --device cuda --models "$MODELS" --tasks train \
  --dtypes bf16 --engines eager,inductor,ember --out "$OUT/default_train" > "$OUT/default_train.log" 2>&1
grep -v "^\[" "$OUT/default_train.log" | grep -v "Warning\|warn" | tail -30
