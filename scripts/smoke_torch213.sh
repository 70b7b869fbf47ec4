#!/usr/bin/env bash
# Create (or update) a second virtual environment, .venv-torch2.13, with the oldest supported torch
# (2.13.0, CPU build) and transformers (4.57.6) and the package's test extras but no torchvision, then
# run the smoke subset (tests marked `smoke`: both tracers, the command line, reports, roofline, LLM
# phases) in it. Extra arguments go to pytest. TORCH_VERSION=... and TRANSFORMERS_VERSION=... try
# other releases the same way.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
TORCH_VERSION=${TORCH_VERSION:-2.13.0}
TRANSFORMERS_VERSION=${TRANSFORMERS_VERSION:-4.57.6}
VENV=.venv-torch${TORCH_VERSION%.*}
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
stamp=$VENV/.opcount-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ] || [ scripts/constraints.txt -nt "$stamp" ] \
  || [ "$(cat "$stamp")" != "$TORCH_VERSION $TRANSFORMERS_VERSION" ]; then
  # The development pins, less torch, torchvision and transformers: torch and transformers are the
  # ones under test, and the torchvision builds at hand do not load with the torch 2.13 CPU build.
  constraints=$VENV/constraints.txt
  grep -v -E '^(torch|torchvision|transformers)==' scripts/constraints.txt >"$constraints"
  "$VENV/bin/python" -m pip install --quiet --upgrade pip >/dev/null 2>&1 || true
  "$VENV/bin/python" -m pip install --quiet -c "$constraints" "torch==$TORCH_VERSION" \
    "transformers==$TRANSFORMERS_VERSION" -e ".[test,plot,hf]"
  "$VENV/bin/python" -m pip uninstall --quiet --yes torchvision >/dev/null 2>&1 || true
  echo "$TORCH_VERSION $TRANSFORMERS_VERSION" >"$stamp"
fi
"$VENV/bin/python" -c "import torch, transformers; print(f'torch {torch.__version__}, transformers {transformers.__version__}')"
exec "$VENV/bin/python" -m pytest -n 2 -q -m smoke "$@"
