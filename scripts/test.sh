#!/usr/bin/env bash
# Set up the virtualenv and run the test suite: bash scripts/test.sh [pytest args]
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/python -m pytest "$@"
