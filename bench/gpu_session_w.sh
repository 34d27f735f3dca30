#!/usr/bin/env bash
# The seventeenth session's device calls. PARTS picks, in order:
#   tests     the full tests/gpu (log: pytest_gpu.log)
#   bench     default-mode bf16 TASK of each of MODELS in its own bench process (fresh caches), LIMIT s each;
#             the bench's csv/json/png go to /tmp (the device returns at most 8 files)
#   prof      ember's per-kernel profile (unique kernel names) and output code of PROF_MODEL's TASK
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH=.
OUT=${OUT:-bench/out/gpu-w}
mkdir -p "$OUT"
for part in ${PARTS:-tests}; do
  case $part in
  tests)
    timeout ${TLIMIT:-200} python3 -m pytest -q -p no:cacheprovider ${TESTS:-tests/gpu} > "$OUT/pytest_gpu.log" 2>&1
    tail -1 "$OUT/pytest_gpu.log"; grep -E "^(FAILED|ERROR)" "$OUT/pytest_gpu.log" | head -20 ;;
  bench)
    for m in ${MODELS:-resnet}; do
      timeout ${LIMIT:-120} python3 -m ember.bench --suite full --device cuda --models $m --tasks ${TASK:-train} \
        --dtypes bf16 --engines eager,inductor,ember --out "/tmp/b/${TASK:-train}_$m" > "$OUT/${TASK:-train}_$m.log" 2>&1
      grep -E "^$m " "$OUT/${TASK:-train}_$m.log"
    done ;;
  prof)
    m=${PROF_MODEL:-encoder}
    EMBER_LOGS=output_code timeout 150 python3 bench/reuse_policy_ab.py --policy exp,bcast --model $m \
      --task ${TASK:-train} --engines ember --unique-names --top 400 \
      > "$OUT/uprof_$m.log" 2>&1
    grep -E "^==|total|by kind" "$OUT/uprof_$m.log"; gzip -f "$OUT/uprof_$m.log" ;;
  esac
done
