#!/usr/bin/env bash
# One device call: reduce-overhead at batch 8; GPT-2 default mode; where held memory goes (ViT-small, ResNet-50).
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH=.
OUT=${OUT:-bench/out/gpu-e}
mkdir -p "$OUT"
OUT=$OUT BATCHES=8 bash bench/gpu_reduce_overhead.sh
timeout 150 python3 -m ember.bench --suite full --device cuda --models gpt2 --tasks infer --dtypes bf16 \
  --engines eager,inductor,ember --out "$OUT/default_gpt2" > "$OUT/default_gpt2.log" 2>&1
grep "gpt2 " "$OUT/default_gpt2.log"
for spec in "vit_small ember" "vit_small inductor" "resnet50 ember@reduce-overhead --batch 1" "resnet50 inductor@reduce-overhead --batch 1"; do
  set -- $spec
  timeout 90 python3 bench/held_memory.py --model $1 --engine $2 ${3:-} ${4:-} > "$OUT/held_$1_$2.log" 2>&1
  grep -v "^  segment\|Warn\|warn" "$OUT/held_$1_$2.log" | tail -14
done
