#!/usr/bin/env bash
# The nineteenth session's device calls (shared pointers, one-launch combos; issue 8 reruns). PARTS picks, in order:
#   tests     the full tests/gpu (log: pytest_gpu.log)
#   sweep     bench/combo_sweep.py for each cap in CAPS and INLINE (plain, noinline) (fresh caches each: cold
#             compiles), torch.compile with cap TORCH_CAP
#   adam      bench/adam_shapes.py for each entry of ADAM (cap, or cap:inline), fresh caches
#   kernels   bench/kernels.py --queued in bf16 and float32 (logs kernels_D.log)
#   bench     default-mode bf16 TASK of each of MODELS in its own bench process (fresh caches), LIMIT s each
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH=.
OUT=${OUT:-bench/out/gpu-y}
mkdir -p "$OUT"
for part in ${PARTS:-tests}; do
  case $part in
  tests)
    timeout ${TLIMIT:-200} python3 -m pytest -q -p no:cacheprovider ${TESTS:-tests/gpu} > "$OUT/pytest_gpu.log" 2>&1
    tail -1 "$OUT/pytest_gpu.log"; grep -E "^(FAILED|ERROR)" "$OUT/pytest_gpu.log" | head -20 ;;
  sweep)
    for cap in ${CAPS:-1 8 16 32}; do
      extra=""; [ "$cap" = "${TORCH_CAP:-32}" ] && extra="--torch"
      for ni in ${INLINE:-plain}; do      # plain and/or noinline
        flag=""; [ "$ni" = noinline ] && flag="--noinline"
        EMBER_CACHE_DIR=$(mktemp -d) TRITON_CACHE_DIR=$(mktemp -d) timeout 150 python3 bench/combo_sweep.py \
          --parts $cap --dtype ${DTYPE:-float32} $extra $flag 2>&1 | tail -2 | tee -a "$OUT/combo_sweep.txt"
      done
    done ;;
  adam)       # ADAM: "CAP" or "CAP:inline" entries
    for v in ${ADAM:-128 128:inline 32}; do
      flag=""; [ "${v#*:}" = inline ] && flag="--inline"
      EMBER_CACHE_DIR=$(mktemp -d) TRITON_CACHE_DIR=$(mktemp -d) timeout 150 python3 bench/adam_shapes.py \
        --parts ${v%%:*} $flag 2>&1 | grep "^{" | tee -a "$OUT/adam_shapes.txt"
    done ;;
  kernels)
    for d in ${DTYPES:-bfloat16 float32}; do
      timeout 240 python3 bench/kernels.py --dtype $d --queued > "$OUT/kernels_$d.log" 2>&1
      tail -10 "$OUT/kernels_$d.log"
    done ;;
  bench)
    for m in ${MODELS:-resnet}; do
      timeout ${LIMIT:-120} python3 -m ember.bench --suite full --device cuda --models $m --tasks ${TASK:-train} \
        --dtypes bf16 --engines eager,inductor,ember --out "/tmp/b/${TASK:-train}_$m" > "$OUT/${TASK:-train}_$m.log" 2>&1
      grep -E "^$m " "$OUT/${TASK:-train}_$m.log"
    done ;;
  esac
done
