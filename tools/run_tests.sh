#!/usr/bin/env bash
# The test command behind `make test`: the torch-free interpreter suite on every other supported CPython that
# pyenv holds (3.12, 3.13: no torch there; each gets a small venv with pytest), then the whole suite on the
# main venv's Python (3.11 + torch).
set -euo pipefail
PY=${1:-.venv/bin/python}
for v in 3.12 3.13; do
  cand=""
  for c in /root/.pyenv/versions/$v.*/bin/python "$(command -v python$v 2>/dev/null || true)"; do
    if [ -n "$c" ] && [ -x "$c" ]; then cand=$c; break; fi
  done
  if [ -z "$cand" ]; then echo "== CPython $v not found: its interpreter suite is skipped"; continue; fi
  venv=".venv-py$v"
  if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -m pytest --version >/dev/null 2>&1; then
    "$cand" -m venv "$venv"
    "$venv/bin/python" -m pip install -q pytest
  fi
  echo "== tests/python_semantics on $("$venv/bin/python" --version)"
  PYTHONPATH=. "$venv/bin/python" -m pytest -q -p no:cacheprovider tests/python_semantics
done
echo "== full suite on $("$PY" --version)"
"$PY" -m pytest -q -n 2 -p no:cacheprovider tests
