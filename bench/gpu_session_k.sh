#!/usr/bin/env bash
# One device call: default-mode bf16 inference of the four models, then ViT-small training (idle-start timing).
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH=.
OUT=${OUT:-bench/out/gpu-k}
mkdir -p "$OUT"
timeout 340 python3 -m ember.bench --suite full --device cuda --models gpt2,bert,resnet50,vit_small --tasks infer \
  --dtypes bf16 --engines eager,inductor,ember --out "$OUT/default_infer" > "$OUT/default_infer.log" 2>&1
grep -E "^(gpt2|bert|resnet50|vit_small) |geomean" "$OUT/default_infer.log"
OUT=$OUT MODELS=vit_small LIMIT=200 bash bench/gpu_session_g.sh | grep -E "^vit_small |geomean"
