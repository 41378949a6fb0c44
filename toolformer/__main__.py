"""``python -m toolformer ARGS`` runs ``toolformer ARGS`` (as ``python -m toolformer.cli`` does)."""

import sys

from toolformer.cli.app import main

sys.exit(main())
