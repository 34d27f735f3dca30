#!/usr/bin/env bash
# Issue 8 on the device machine, in one call: reduce-overhead (CUDA graphs) bf16 inference at batch 1 and 8,
# ember vs torch.compile, with peak and held memory; then the GPU training-equality test. Results under $OUT.
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH=.
OUT=${OUT:-bench-out/gpu-ro}
MODELS=${MODELS:-gpt2,bert,vit_small,resnet50}
mkdir -p "$OUT"
# The bench's csv/json/png go to /tmp/ro: the device returns at most 8 files, and only the logs are needed.
# PER_MODEL=1: one process per model. torch.compile's CUDA graph pool is one per process, shared by every model
# compiled in it, so in a shared process its held memory for the second model on does not count the pool the
# first one grew (ember's pools are per compiled model)
for b in ${BATCHES:-1 8}; do
  if [ -n "${PER_MODEL:-}" ]; then
    for m in ${MODELS//,/ }; do
      timeout ${TIMEOUT:-270} python3 -m ember.bench --suite full --device cuda --models "$m" --tasks infer \
        --dtypes bf16 --engines eager,inductor@reduce-overhead,ember@reduce-overhead --batch "$b" \
        --budget-s ${BUDGET:-250} --out "/tmp/ro/ro_batch${b}_$m" > "$OUT/ro_batch${b}_$m.log" 2>&1
      grep -E "^$m " "$OUT/ro_batch${b}_$m.log"
    done
    continue
  fi
  timeout ${TIMEOUT:-270} python3 -m ember.bench --suite full --device cuda --models "$MODELS" --tasks infer \
    --dtypes bf16 --engines eager,inductor@reduce-overhead,ember@reduce-overhead --batch "$b" \
    --budget-s ${BUDGET:-250} --out "/tmp/ro/ro_batch$b" > "$OUT/ro_batch$b.log" 2>&1
  grep -v "^\[" "$OUT/ro_batch$b.log" | grep -v "Warning\|warn" | tail -22
done
# HELD=1: each engine's CUDA graph pools measured alone in its own process (benchmarks/held_memory.py), per model
# and batch, into one file
if [ -n "${HELD:-}" ]; then
  for b in ${BATCHES:-1 8}; do
    for m in ${MODELS//,/ }; do
      for e in ember inductor; do
        echo "== $m batch $b $e"
        timeout 60 python3 benchmarks/held_memory.py --model "$m" --engine "$e@reduce-overhead" --batch "$b" 2>&1 \
          | grep -v -i warn
      done
    done
  done > "$OUT/held_memory.txt"
  grep -E "^==|reserved" "$OUT/held_memory.txt"
fi
if [ -n "${TESTS:-}" ]; then
  timeout 200 python3 -m pytest -q -p no:cacheprovider $TESTS 2>&1 | tail -15 > "$OUT/pytest.log"; cat "$OUT/pytest.log"
fi
