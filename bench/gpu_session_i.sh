#!/usr/bin/env bash
# One device call: the GPU tests, then training profiles (bench/gpu_session_h.sh) of the models in MODELS.
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH=.
OUT=${OUT:-bench/out/gpu-i}
mkdir -p "$OUT"
timeout 230 python3 -m pytest -q -p no:cacheprovider tests/gpu > "$OUT/pytest_gpu.log" 2>&1; tail -3 "$OUT/pytest_gpu.log"
OUT=$OUT bash bench/gpu_session_h.sh
