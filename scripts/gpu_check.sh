#!/usr/bin/env bash
# The device check: bench of the 100M model in bf16, bf16-vs-fp32 filter losses, the demo's fine-tune step time
# and peak GPU memory, as one JSON line (a few minutes on one GPU). Run from the repository root:
#   bash scripts/gpu_check.sh          # on a GPU
#   bash scripts/gpu_check.sh --cpu    # the same on the CPU with small sizes (what the tests run)
set -euo pipefail
cd "$(dirname "$0")/.."
python="${PYTHON:-python}"
[ -x .venv/bin/python ] && [ -z "${PYTHON:-}" ] && python=.venv/bin/python
exec "$python" -m toolformer.bench.gpucheck "$@"
