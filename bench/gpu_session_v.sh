#!/usr/bin/env bash
# The sixteenth session's device calls. PARTS picks, in order:
#   tests     the full tests/gpu (log: pytest_gpu.log)
#   uprof     ResNet-style training per-kernel profile with unique kernel names and ember's output code, for each
#             reuse policy in POLICIES (bench/reuse_policy_ab.py), then Inductor's with its output code
#   eprof     the encoder's training profile and code (ember only)
#   bench     bench/gpu_session_t.sh's bench part (MODELS, TASK, LIMIT)
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH=.
OUT=${OUT:-bench/out/gpu-v}
mkdir -p "$OUT"
for part in ${PARTS:-tests}; do
  case $part in
  tests)
    timeout ${TLIMIT:-240} python3 -m pytest -q -p no:cacheprovider ${TESTS:-tests/gpu} > "$OUT/pytest_gpu.log" 2>&1
    tail -1 "$OUT/pytest_gpu.log"; grep -E "^(FAILED|ERROR)" "$OUT/pytest_gpu.log" | head -20 ;;
  uprof)
    for p in ${POLICIES:-exp,bcast}; do
      n=${M:-resnet}_${p//,/-}
      EMBER_LOGS=output_code timeout 150 python3 bench/reuse_policy_ab.py --policy $p --model ${M:-resnet} \
        --task train --engines ember --unique-names --top 400 > "$OUT/uprof_$n.log" 2>&1
      grep -E "^==|total|by kind" "$OUT/uprof_$n.log"; gzip -f "$OUT/uprof_$n.log"
    done
    if [ -n "${INDUCTOR:-1}" ]; then
      TORCH_LOGS=output_code timeout 200 python3 bench/profile_model.py --model ${M:-resnet} --task train \
        --engines inductor --top 400 > "$OUT/uprof_${M:-resnet}_inductor.log" 2>&1
      grep -E "^==|total|by kind" "$OUT/uprof_${M:-resnet}_inductor.log"; gzip -f "$OUT/uprof_${M:-resnet}_inductor.log"
    fi ;;
  bench)
    OUT=$OUT PARTS=bench bash bench/gpu_session_t.sh ;;
  esac
done
