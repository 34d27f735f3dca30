#!/usr/bin/env bash
# One device call: where the bf16 training step's device time goes, ember vs Inductor, per model (top kernels
# by device time under torch.profiler), and ember's generated code for ResNet-50 and GPT-2 training.
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH=.
OUT=${OUT:-bench/out/gpu-h}
mkdir -p "$OUT"
for m in ${MODELS:-resnet50 gpt2 bert vit_small}; do
  timeout 200 python3 bench/profile_model.py --model $m --task train --engines ember,inductor --top 45 \
    > "$OUT/profile_train_$m.log" 2>&1
  grep "^==\|total" "$OUT/profile_train_$m.log"
done
for m in ${DUMP:-resnet50 gpt2}; do
  timeout 120 python3 bench/dump_model_code.py --model $m --task train --out "$OUT/code_train_$m.txt" > /dev/null 2>&1
done
ls -la "$OUT"
