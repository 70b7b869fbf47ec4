#!/usr/bin/env bash
# Create (or update) the project's virtual environment in .venv with the package and its test extras.
# torch and torchvision are pinned; pip takes them from this machine's wheel cache when present.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv .venv
stamp=.venv/.opcount-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  .venv/bin/python -m pip install --quiet --upgrade pip >/dev/null 2>&1 || true
  .venv/bin/python -m pip install --quiet -e ".[test]"
  touch "$stamp"
fi
