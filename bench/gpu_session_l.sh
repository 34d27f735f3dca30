#!/usr/bin/env bash
# One device call: the GPU tests, then the bf16 training bench of the four models.
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH=.
OUT=${OUT:-bench/out/gpu-l}
mkdir -p "$OUT"
timeout 190 python3 -m pytest -q -x -p no:cacheprovider tests/gpu > "$OUT/pytest_gpu.log" 2>&1; tail -2 "$OUT/pytest_gpu.log"
OUT=$OUT LIMIT=380 MODELS=${MODELS:-vit_small,gpt2,bert,resnet50} bash bench/gpu_session_g.sh | grep -E "^(gpt2|bert|resnet50|vit_small) |geomean"
