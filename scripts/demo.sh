#!/usr/bin/env bash
# Set up the virtualenv and run the pipeline on the built-in small world:
#   bash scripts/demo.sh [key=value overrides]
# CONFIG=configs/tiny.yaml chooses another config.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
if [ -z "${CONFIG:-}" ]; then
    if [ -f configs/demo.yaml ]; then CONFIG=configs/demo.yaml; else CONFIG=configs/tiny.yaml; fi
fi
if [ "$CONFIG" = configs/demo.yaml ]; then
    exec .venv/bin/toolformer demo --config "$CONFIG" "$@"
fi
if [ "$CONFIG" = configs/tiny.yaml ] && [ ! -d runs/tiny-model ]; then
    .venv/bin/toolformer tiny-model --out runs/tiny-model
fi
exec .venv/bin/toolformer run --config "$CONFIG" "$@"
