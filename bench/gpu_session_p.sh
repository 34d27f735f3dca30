#!/usr/bin/env bash
# One device call: the worker-pool GPU tests, then compile breakdowns (ResNet-50 warm under cProfile).
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH=.
OUT=${OUT:-bench/out/gpu-p}
mkdir -p "$OUT"
timeout 200 python3 -m pytest -q -p no:cacheprovider ${TESTS:-tests/gpu/test_triton_pool.py tests/gpu/test_ember_triton.py} \
  > "$OUT/pytest_gpu.log" 2>&1; tail -25 "$OUT/pytest_gpu.log" | grep -E "passed|failed|Error|assert" | head -20
timeout 200 python3 bench/compile_breakdown.py --model resnet50 --task train --warm --profile ${PROFILE:-45} \
  > "$OUT/breakdown_resnet50_profile.log" 2>&1
grep -v Warning "$OUT/breakdown_resnet50_profile.log" | grep -v "^$" | cut -c1-150 | head -${HEAD:-130}
for m in ${MODELS:-bert vit_small}; do
  timeout 200 python3 bench/compile_breakdown.py --model "$m" --task train --warm > "$OUT/breakdown_${m}_train.log" 2>&1
  grep -v Warning "$OUT/breakdown_${m}_train.log"
done
