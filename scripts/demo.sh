#!/usr/bin/env bash
# Set up the virtualenv and run the pipeline on the built-in small world:
#   bash scripts/demo.sh [key=value overrides]
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
CONFIG="${CONFIG:-configs/tiny.yaml}"
if [ "$CONFIG" = configs/tiny.yaml ] && [ ! -d runs/tiny-model ]; then
    .venv/bin/toolformer tiny-model --out runs/tiny-model
fi
exec .venv/bin/toolformer run --config "$CONFIG" "$@"
