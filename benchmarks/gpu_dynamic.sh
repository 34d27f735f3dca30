#!/usr/bin/env bash
# Dynamic shapes on the GPU machine (issue 33), one phase per call (each fits the device tool's 10 minutes):
#   PHASE=tests   tests/gpu
#   PHASE=batch   BERT and ResNet-50 inference at every batch size 1..64 (ember vs torch.compile), bf16
#   PHASE=train   nanoGPT training with a random sequence length per step; greedy GPT-2 generation with a KV cache
#   PHASE=static  the static-shape bench (GPT-2, ResNet-50) against torch.compile, to check for regressions
# Results under $OUT (default bench-out/gpu-dynamic); caches fresh per call.
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH=.
OUT=${OUT:-bench-out/gpu-dynamic}
mkdir -p "$OUT"
export EMBER_CACHE_DIR=$(mktemp -d) TRITON_CACHE_DIR=$(mktemp -d) TORCHINDUCTOR_CACHE_DIR=$(mktemp -d)
case "${PHASE:-tests}" in
  tests)
    timeout ${TIMEOUT:-560} python3 -m pytest -q -p no:cacheprovider tests/gpu ${TESTS:-} > "$OUT/gpu_tests.log" 2>&1
    tail -25 "$OUT/gpu_tests.log" ;;
  batch)
    for m in ${MODELS:-bert resnet50}; do
      timeout ${TIMEOUT:-280} python3 benchmarks/dynamic_shapes.py batch --model "$m" --engines eager,ember,inductor \
        --max-batch ${MAX_BATCH:-64} 2>"$OUT/batch_$m.err" | tee "$OUT/batch_$m.jsonl"
      tail -3 "$OUT/batch_$m.err"
    done ;;
  train)
    timeout ${TIMEOUT:-280} python3 benchmarks/dynamic_shapes.py seqtrain --model nanogpt --engines ember,inductor \
      2>"$OUT/seqtrain.err" | tee "$OUT/seqtrain.jsonl"; tail -3 "$OUT/seqtrain.err"
    timeout ${TIMEOUT:-280} python3 benchmarks/dynamic_shapes.py generate --model gpt2 \
      --engines ember,inductor,ember@reduce-overhead,inductor@reduce-overhead 2>"$OUT/generate.err" \
      | tee "$OUT/generate.jsonl"; tail -3 "$OUT/generate.err" ;;
  static)
    timeout ${TIMEOUT:-500} python3 -m ember.bench --suite full --device cuda --models gpt2,resnet50 --tasks infer,train \
      --dtypes bf16 --engines eager,inductor,ember --out /tmp/static > "$OUT/static.log" 2>&1
    grep -v "^\[" "$OUT/static.log" | grep -v -i "warn" | tail -20 ;;
esac
