#!/usr/bin/env bash
# Create (or reuse) the virtualenv .venv and install the package into it.
# torch is installed first and pinned, so pip never pulls a multi-GB CUDA build
# on a CPU machine. On a GPU machine set TORCH_SPEC, e.g.
#   TORCH_SPEC="torch==2.13.0 --index-url https://download.pytorch.org/whl/cu128" bash scripts/setup.sh
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${VENV:-.venv}"
TORCH_SPEC="${TORCH_SPEC:-torch==2.13.0}"
PYTHON="${PYTHON:-python3}"
if [ ! -x "$VENV/bin/python" ]; then
    "$PYTHON" -m venv "$VENV"
fi
"$VENV/bin/python" -m pip install -q --upgrade pip >/dev/null
# shellcheck disable=SC2086
"$VENV/bin/python" -m pip install -q $TORCH_SPEC
"$VENV/bin/python" -m pip install -q -e ".[test]"
echo "setup: ready ($("$VENV/bin/python" -c 'import torch; print("torch", torch.__version__)'))"
