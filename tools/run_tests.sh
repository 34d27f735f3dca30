#!/usr/bin/env bash
# The test command behind `make test`: the torch-free interpreter suite on every CPython that pyenv holds
# (3.12, 3.13 have no torch), then the whole suite on the venv's Python.
set -euo pipefail
PY=${1:-.venv/bin/python}
for v in 3.12 3.13; do
  for cand in /root/.pyenv/versions/$v.*/bin/python "$(command -v python$v 2>/dev/null || true)"; do
    if [ -x "$cand" ]; then
      echo "== tests/python_semantics on $("$cand" --version)"
      "$cand" -m pytest --version >/dev/null 2>&1 || "$cand" -m pip install -q pytest
      PYTHONPATH=. "$cand" -m pytest -q -p no:cacheprovider tests/python_semantics
      break
    fi
  done
done
echo "== full suite on $("$PY" --version)"
"$PY" -m pytest -q -n 2 -p no:cacheprovider tests
