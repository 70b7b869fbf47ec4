#!/usr/bin/env bash
# Set up the environment if needed, then run the default (fast) test suite.
# Extra arguments go to pytest, e.g. `scripts/test.sh -m slow` for the model-zoo tests.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/python -m pytest -n 2 -q "$@"
