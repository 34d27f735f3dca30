#!/usr/bin/env bash
# Issue 5's OpInfo acceptance on the device machine, in one call: op_db forward + backward on CUDA, ember's
# backend "ember" (Triton kernels) vs torch.compile (Inductor), as SHARDS processes over every SHARDS-th op,
# each cut off after LIMIT seconds (a shard's JSON counts the ops it finished), then merged. Results under $OUT.
#   DTYPE=float32|bfloat16 SHARDS=14 LIMIT=500 bash benchmarks/gpu_opinfo.sh
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONPATH=.
OUT=${OUT:-bench-out/gpu-opinfo}
DTYPE=${DTYPE:-float32}
SHARDS=${SHARDS:-14}
mkdir -p "$OUT"
export EMBER_COMPILE_WORKERS=1 TORCHINDUCTOR_COMPILE_THREADS=1 PYTHONWARNINGS=ignore
python3 -c "import expecttest" 2>/dev/null || { echo "torch's OpInfo helpers import expecttest: pip install -e '.[test]'"; exit 1; }
for ((k = 0; k < SHARDS; k++)); do
  timeout ${LIMIT:-500} python3 benchmarks/opinfo_aot.py --device cuda --dtype "$DTYPE" --backend ember \
    --torch-backend inductor --samples ${SAMPLES:-2} --shard "$k/$SHARDS" --out "$OUT/opinfo_${DTYPE}_$k.json" \
    > "$OUT/opinfo_${DTYPE}_$k.log" 2>&1 &
done
wait
# few files come back from the device machine: one merged JSON, one summary, the shards' logs in one file
python3 benchmarks/opinfo_aot.py --merge "$OUT"/opinfo_"${DTYPE}"_[0-9]*.json --out "$OUT/opinfo_${DTYPE}.json" \
  | tee "$OUT/opinfo_${DTYPE}_summary.txt"
for ((k = 0; k < SHARDS; k++)); do
  echo "== shard $k"; grep -v -i "warn" "$OUT/opinfo_${DTYPE}_$k.log" | tail -30
done > "$OUT/opinfo_${DTYPE}_shards.log"
rm -f "$OUT"/opinfo_"${DTYPE}"_[0-9]*.json "$OUT"/opinfo_"${DTYPE}"_[0-9]*.log
