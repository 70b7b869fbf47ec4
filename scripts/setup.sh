#!/usr/bin/env bash
# Create (or update) the project's virtual environment in .venv: the package with its test, vision,
# plot and hf extras, at the exact versions of scripts/constraints.txt (torch 2.14.1,
# torchvision 0.29.1, ...). pip takes the wheels from this machine's cache when present.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
stamp=.venv/.opcount-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ] || [ scripts/constraints.txt -nt "$stamp" ]; then
  .venv/bin/python -m pip install --quiet --upgrade pip >/dev/null 2>&1 || true
  .venv/bin/python -m pip install --quiet -c scripts/constraints.txt -e ".[test,vision,plot,hf]"
  touch "$stamp"
fi
