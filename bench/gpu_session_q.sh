#!/usr/bin/env bash
# One device call: the GPU tests (worker-pool env-sync, timeout and fork included), then default-mode bf16
# training of the models in MODELS (eager vs torch.compile vs ember, cold compile and peak memory, one run).
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH=.
OUT=${OUT:-bench/out/gpu-q}
MODELS=${MODELS:-gpt2,bert}
mkdir -p "$OUT"
if [ "${TESTS:-1}" = 1 ]; then
  timeout 220 python3 -m pytest -q -p no:cacheprovider tests/gpu > "$OUT/pytest_gpu.log" 2>&1; tail -3 "$OUT/pytest_gpu.log"
  grep -E "^(FAILED|ERROR)" "$OUT/pytest_gpu.log" | head -20
fi
timeout ${LIMIT:-360} python3 -m ember.bench --suite full --device cuda --models "$MODELS" --tasks ${TASKS:-train} \
  --dtypes bf16 --engines eager,inductor,ember --out "$OUT/default_${TASKS:-train}" > "$OUT/default_${TASKS:-train}.log" 2>&1
grep -v "^\[" "$OUT/default_${TASKS:-train}.log" | grep -v "Warning\|warn" | tail -30
