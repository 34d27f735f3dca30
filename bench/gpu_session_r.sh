#!/usr/bin/env bash
# One device call: the worker-pool GPU tests, BERT's per-tensor check (bench/check_model.py), then default-mode
# bf16 training of each model in MODELS in its own bench process (fresh empty caches per model, so no model's
# cold compile finds another's kernels), eager vs torch.compile vs ember.
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH=.
OUT=${OUT:-bench/out/gpu-r}
TASK=${TASK:-train}
mkdir -p "$OUT"
if [ "${TESTS:-1}" = 1 ]; then
  timeout 150 python3 -m pytest -q -p no:cacheprovider tests/gpu/test_compile_workers.py > "$OUT/pytest_gpu.log" 2>&1
  tail -1 "$OUT/pytest_gpu.log"; grep -E "^(FAILED|ERROR)|^E  " "$OUT/pytest_gpu.log" | head -20
  timeout 100 python3 bench/check_model.py --model bert --engines ember > "$OUT/check_bert.log" 2>&1
  grep -v Warn "$OUT/check_bert.log" | grep -E "tensors|differs|Error" | head
fi
for m in ${MODELS:-gpt2 bert resnet50 vit_small}; do
  timeout ${LIMIT:-150} python3 -m ember.bench --suite full --device cuda --models $m --tasks $TASK --dtypes bf16 \
    --engines eager,inductor,ember --out "$OUT/${TASK}_$m" > "$OUT/${TASK}_$m.log" 2>&1
  grep -E "^$m |^  ember|^  inductor" "$OUT/${TASK}_$m.log"
done
