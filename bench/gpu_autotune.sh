#!/usr/bin/env bash
# Issue 8 on the device machine, in one call: max-autotune tests, then kernel microbenchmarks in default and
# max-autotune modes. Results under $OUT (pytest log, kernels_*.txt).
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH=.
OUT=${OUT:-bench/out/gpu-autotune}
mkdir -p "$OUT"
export EMBER_CACHE_DIR=/tmp/ember-cache-$$
timeout 300 python3 -m pytest -q -p no:cacheprovider ${TESTS:-tests/gpu/test_max_autotune.py} -x 2>&1 | tail -40 > "$OUT/pytest_gpu.log"
for mode in ${MODES:-max-autotune-no-cudagraphs}; do
  timeout ${KTIMEOUT:-200} python3 bench/kernels.py --dtype ${DTYPE:-bfloat16} --mode "$mode" > "$OUT/kernels_${DTYPE:-bfloat16}_$mode.txt" 2>&1
done
tail -5 "$OUT"/pytest_gpu.log; tail -12 "$OUT"/kernels_*.txt
