"""``toolformer tiny-model``, ``generate`` and ``chat``: a tiny model built in code, and a model folder
generating with its tools (:mod:`toolformer.cli.interact`)."""

from __future__ import annotations

import sys
from pathlib import Path


def cmd_tiny_model(args) -> int:
    from toolformer.lm.modeling import write_tiny_model

    out = Path(args.out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        print(f"toolformer: error: --out {out} exists and is not an empty folder; writing the model would "
              "overwrite its files: choose a new or empty folder", file=sys.stderr)
        return 2
    path = write_tiny_model(out, seed=args.seed, data_dir=args.data)
    print(f"tiny-model: wrote {path}")
    return 0


def cmd_generate(args) -> int:
    from toolformer.cli.interact import cli_generate

    return cli_generate(args)


def cmd_chat(args) -> int:
    from toolformer.cli.interact import cli_chat

    return cli_chat(args)
