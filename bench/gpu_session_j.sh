#!/usr/bin/env bash
# One device call: the GPU tests, the bf16 training bench of the four models (bench/gpu_session_g.sh), and
# ember's generated training code for BERT.
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH=.
OUT=${OUT:-bench/out/gpu-j}
mkdir -p "$OUT"
timeout 200 python3 -m pytest -q -x -p no:cacheprovider tests/gpu > "$OUT/pytest_gpu.log" 2>&1; tail -2 "$OUT/pytest_gpu.log"
OUT=$OUT LIMIT=330 bash bench/gpu_session_g.sh
timeout 50 python3 bench/dump_model_code.py --model bert --task train --out "$OUT/code_train_bert.txt" > /dev/null 2>&1
ls "$OUT"
