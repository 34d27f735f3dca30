#!/usr/bin/env bash
# The nineteenth session's device calls (shared pointers, one-launch combos; issue 8 reruns). PARTS picks, in order:
#   adam      bench/adam_shapes.py for each entry of ADAM (cap, or cap:inline), fresh caches (adam_shapes.txt)
#   any other part: bench/gpu_session_x.sh's (tests, sweep, kernels, bench), with the same variables
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH=.
export OUT=${OUT:-bench/out/gpu-y}
mkdir -p "$OUT"
for part in ${PARTS:-tests}; do
  case $part in
  adam)
    for v in ${ADAM:-128 128:inline 32}; do
      flag=""; [ "${v#*:}" = inline ] && flag="--inline"
      EMBER_CACHE_DIR=$(mktemp -d) TRITON_CACHE_DIR=$(mktemp -d) timeout 150 python3 bench/adam_shapes.py \
        --parts ${v%%:*} $flag 2>&1 | grep "^{" | tee -a "$OUT/adam_shapes.txt"
    done ;;
  *) PARTS=$part bash bench/gpu_session_x.sh ;;
  esac
done
