#!/usr/bin/env bash
# One device call: the GPU tests, then where ResNet-50's bf16 training step goes (ember vs Inductor) and
# ember's generated code for it.
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH=.
OUT=${OUT:-bench/out/gpu-m}
mkdir -p "$OUT"
timeout ${TEST_LIMIT:-200} python3 -m pytest -q -x -p no:cacheprovider tests/gpu > "$OUT/pytest_gpu.log" 2>&1
tail -3 "$OUT/pytest_gpu.log"
OUT=$OUT MODELS=${MODELS:-resnet50} DUMP=${DUMP:-resnet50} bash bench/gpu_session_h.sh | grep "==\|total"
grep -h "by kind" "$OUT"/profile_*.log
