"""``python -m toolformer.cli ARGS`` runs ``toolformer ARGS``."""

import sys

from toolformer.cli.app import main

sys.exit(main())
