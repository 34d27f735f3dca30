#!/usr/bin/env bash
# One device call of the ninth session: import times on the device host, inference compile breakdowns (worker
# boot and per-kernel compile times), the full tests/gpu, then default-mode bf16 training of MODELS, each in
# its own bench process with fresh caches.
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH=.
OUT=${OUT:-bench/out/gpu-s}
mkdir -p "$OUT"
for m in torch triton ember.codegen.triton; do
  python3 -c "import time; t=time.perf_counter(); import $m; print('import $m', round(time.perf_counter()-t, 2), 's')"
done 2>&1 | tee "$OUT/imports.log"
for m in ${BREAKDOWN:-gpt2 bert}; do
  timeout 120 python3 bench/compile_breakdown.py --model $m --task infer > "$OUT/breakdown_infer_$m.log" 2>&1
  grep -E "first call|wait for|compile/load|worker|lower|kernel bodies|rest" "$OUT/breakdown_infer_$m.log"
done
if [ "${TESTS:-1}" = 1 ]; then
  timeout 280 python3 -m pytest -q -p no:cacheprovider tests/gpu > "$OUT/pytest_gpu.log" 2>&1
  tail -1 "$OUT/pytest_gpu.log"; grep -E "^(FAILED|ERROR)" "$OUT/pytest_gpu.log" | head -20
fi
for m in ${MODELS:-gpt2 bert}; do
  timeout ${LIMIT:-120} python3 -m ember.bench --suite full --device cuda --models $m --tasks ${TASK:-train} \
    --dtypes bf16 --engines eager,inductor,ember --out "$OUT/${TASK:-train}_$m" > "$OUT/${TASK:-train}_$m.log" 2>&1
  grep -E "^$m " "$OUT/${TASK:-train}_$m.log"
done
