#!/usr/bin/env bash
# The full benchmark suite on a CUDA machine, within one 10-minute device call; the merged report under $OUT.
#
#   bash benchmarks/gpu_suite.sh                       # every model, engines eager,inductor,ember
#   MODELS=handwritten bash benchmarks/gpu_suite.sh    # a subset (names or families: handwritten, transformers, vision)
#
# One process per GPU, each given every Nth model (round robin) and a time budget (BUDGET seconds): a case that
# would end past it is skipped and says so, and a shard still running at SHARD_TIMEOUT is stopped (the cases it
# finished are kept: results.jsonl is written as it goes). Then one merged report: $OUT/results.{csv,json,jsonl},
# $OUT/speedup.png and $OUT/log.txt (the device tool brings back at most 8 files, so shards live in /tmp).
#
# Sizing: a case (model x task x dtype, all engines) took about 20 s on an H200 (nanogpt, gpt2, resnet50: 12
# cases in 243 s), nearly all of it torch.compile's cold compile; the zoo has 13 models x 4 cases. So one GPU
# covers about 20 cases in a call and two GPUs (nvidia-h200-x2) about 45: run what was skipped in a second call
# (MODELS=...) and merge both here with `python -m ember.bench --merge DIR1 DIR2 --out bench/results/<date>`.
# Testing the script without a GPU: DEVICE=cpu SUITE=quick NGPU=2 MODELS=mlp,resnet bash benchmarks/gpu_suite.sh
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-python3}
OUT=${OUT:-bench-out/gpu-$(date +%Y%m%d-%H%M%S)}
MODELS=${MODELS:-all}
ENGINES=${ENGINES:-eager,inductor,ember}
BUDGET=${BUDGET:-430}
SHARD_TIMEOUT=${SHARD_TIMEOUT:-540}
EXTRA=${EXTRA:-}
DEVICE=${DEVICE:-cuda}
SUITE=${SUITE:-full}
SHARDS=/tmp/ember-bench-shards
export PYTHONUNBUFFERED=1
mkdir -p "$OUT"
rm -rf "$SHARDS"
LOG="$OUT/log.txt"

{
  echo "== $(date -Is) $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)"
  $PY -c 'import torch, sys; print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda)'
  $PY -c 'import triton; print("triton", triton.__version__)' 2>/dev/null || echo "triton: not importable"
} 2>&1 | tee "$LOG"

NGPU=${NGPU:-$($PY -c 'import torch; print(torch.cuda.device_count())')}
if [ "${NGPU:-0}" -lt 1 ]; then echo "no CUDA device visible" | tee -a "$LOG"; exit 1; fi
read -r -a NAMES <<< "$($PY -c "from ember.bench.zoo import expand_names; print(' '.join(expand_names('$MODELS'.split(','), '$SUITE')))")"
echo "== ${#NAMES[@]} models over $NGPU GPU(s): ${NAMES[*]}" | tee -a "$LOG"

pids=(); dirs=()
for ((g = 0; g < NGPU && g < ${#NAMES[@]}; g++)); do
  mine=()
  for ((i = g; i < ${#NAMES[@]}; i += NGPU)); do mine+=("${NAMES[$i]}"); done
  list=$(IFS=,; echo "${mine[*]}")
  dir="$SHARDS/gpu$g"; dirs+=("$dir")
  # setsid would outlive the call; plain background jobs end with it, as they should
  CUDA_VISIBLE_DEVICES=$g timeout -s INT -k 30 "$SHARD_TIMEOUT" $PY -m ember.bench --suite "$SUITE" --device "$DEVICE" \
    --models "$list" --engines "$ENGINES" --budget-s "$BUDGET" --out "$dir" $EXTRA > "$SHARDS.gpu$g.log" 2>&1 &
  pids+=($!)
  echo "== GPU $g: $list" | tee -a "$LOG"
done
for p in "${pids[@]}"; do wait "$p"; done

for ((g = 0; g < ${#dirs[@]}; g++)); do
  echo "== shard gpu$g log (tail)" >> "$LOG"
  tail -n 60 "$SHARDS.gpu$g.log" >> "$LOG"
done
have=(); for d in "${dirs[@]}"; do [ -s "$d/results.jsonl" ] && have+=("$d"); done
if [ ${#have[@]} -eq 0 ]; then echo "no shard wrote results" | tee -a "$LOG"; exit 1; fi
$PY -m ember.bench --merge "${have[@]}" --out "$OUT" 2>&1 | tee -a "$LOG"
cat "${have[@]/%//results.jsonl}" > "$OUT/results.jsonl"
echo "== done $(date -Is); results in $OUT" | tee -a "$LOG"
