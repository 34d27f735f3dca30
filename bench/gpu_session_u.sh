#!/usr/bin/env bash
# The eleventh session's device calls: bench/gpu_session_t.sh (PARTS, including "stats") into bench/out/gpu-u.
OUT=${OUT:-bench/out/gpu-u} exec bash "$(dirname "$0")/gpu_session_t.sh"
