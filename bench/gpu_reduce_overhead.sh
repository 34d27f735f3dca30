#!/usr/bin/env bash
# Issue 8 on the device machine, in one call: reduce-overhead (CUDA graphs) bf16 inference at batch 1 and 8,
# ember vs torch.compile, with peak and held memory; then the GPU training-equality test. Results under $OUT.
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH=.
OUT=${OUT:-bench/out/gpu-ro}
MODELS=${MODELS:-gpt2,bert,vit_small,resnet50}
mkdir -p "$OUT"
for b in ${BATCHES:-1 8}; do
  timeout ${TIMEOUT:-270} python3 -m ember.bench --suite full --device cuda --models "$MODELS" --tasks infer \
    --dtypes bf16 --engines eager,inductor@reduce-overhead,ember@reduce-overhead --batch "$b" \
    --budget-s ${BUDGET:-250} --out "$OUT/ro_batch$b" > "$OUT/ro_batch$b.log" 2>&1
  grep -v "^\[" "$OUT/ro_batch$b.log" | grep -v "Warning\|warn" | tail -22
done
if [ -n "${TESTS:-}" ]; then
  timeout 200 python3 -m pytest -q -p no:cacheprovider $TESTS 2>&1 | tail -15 > "$OUT/pytest.log"; cat "$OUT/pytest.log"
fi
