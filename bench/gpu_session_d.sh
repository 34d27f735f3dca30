#!/usr/bin/env bash
# One device call: GPU tests, then profiles of the reduce-overhead rows below torch (GPT-2 b8, ResNet-50 b1).
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH=.
OUT=${OUT:-bench/out/gpu-d}
mkdir -p "$OUT"
timeout 260 python3 -m pytest -q -p no:cacheprovider -x tests/gpu > "$OUT/pytest_gpu.log" 2>&1; tail -5 "$OUT/pytest_gpu.log"
timeout 120 python3 bench/profile_model.py --model gpt2 --batch 8 --engines ember@reduce-overhead,inductor@reduce-overhead --top 30 > "$OUT/prof_gpt2_b8.log" 2>&1
timeout 120 python3 bench/profile_model.py --model resnet50 --batch 1 --engines ember@reduce-overhead,inductor@reduce-overhead --top 30 > "$OUT/prof_resnet50_b1.log" 2>&1
grep -A12 "^==" "$OUT"/prof_*.log | cut -c1-150
