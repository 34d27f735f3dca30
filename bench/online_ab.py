"""A/B of the looped online softmax's accumulators (``triton_gen.ONLINE_ROWS``): per row (one exp per point) vs
per lane (two), on bench/kernels.py's cases, kernels alone (``--queued``).

    python bench/online_ab.py [--dtype bfloat16] [--only cross_entropy]
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import ember  # noqa: E402
import ember.codegen.triton_gen as triton_gen  # noqa: E402
import kernels  # noqa: E402

if __name__ == "__main__":
    args = sys.argv[1:]
    for rows in (False, True):
        triton_gen.ONLINE_ROWS = rows
        ember.reset()
        print(f"== ONLINE_ROWS={rows}", flush=True)
        sys.argv = ["kernels.py", "--queued", *args]
        kernels.main()
