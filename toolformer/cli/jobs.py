"""``toolformer bench``, ``preflight``, ``demo`` and ``world``: the jobs built on the stages, the small world's
commands among them (:mod:`toolformer.smallworld`)."""

from __future__ import annotations

import errno
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from toolformer.cli.common import config_file, hold_and_run, load_pipeline

BASE_MODEL_FILES = ("model.safetensors", "tokenizer.json")


def load_world(args):
    """The small-world config of ``demo`` and ``world ...`` (toolformer.smallworld.config): ``--config``, by default
    the packaged demo config (the repository's configs/demo.yaml)."""
    from toolformer.smallworld.config import load_smallworld

    overrides = list(args.overrides)
    if getattr(args, "rounds", None) is not None:
        overrides.append(f"demo.rounds={args.rounds}")
    return load_smallworld(config_file(args.config, default="demo"), overrides)


def check_start_model(sw) -> None:
    """Before ``demo`` or ``world pretrain`` writes anything: the base model that pre-training continues
    (``pretrain.init_from``, by default the repository's data/world-base-start) is there. The repository ships it
    and data/world-base (10 MB of weights), the package does not: a ValueError (exit 2) says where it is expected
    and how to get it."""
    start = sw.pretrain.init_from
    if not start or all((Path(start) / name).is_file() for name in BASE_MODEL_FILES):
        return
    raise ValueError(
        f"pretrain.init_from: no base model in {start} (from {Path.cwd()}): the small world's base models "
        "(data/world-base-start, data/world-base) ship with the repository, not the package; run from a clone's "
        "root (git clone, then `toolformer demo` there), or pass pretrain.init_from=CLONE/data/world-base-start "
        "pretrain.shipped=CLONE/data/world-base, or train one here with pretrain.init_from='' (1,000 steps from "
        "scratch, about 20 min on a CPU core; weaker than the shipped model's 6,000 steps, about 100 min: "
        "docs/small-world.md, \"The base model\")")


def cmd_bench(args) -> int:
    if "--lmeval" in args.args:
        from toolformer.bench.lmeval_parity import main as lmeval_main

        return lmeval_main([a for a in args.args if a != "--lmeval"])
    if "--contention" in args.args:
        from toolformer.bench.contention import main as contention_main

        return contention_main([a for a in args.args if a != "--contention"])
    if "--weights" in args.args:
        from toolformer.bench.realmodel import main as weights_main

        return weights_main(args.args)
    from toolformer.bench.speed import main as bench_main

    return bench_main(args.args)


def cmd_preflight(args) -> int:
    """Reads the model and the first documents; writes nothing (so it takes no lock)."""
    from toolformer.preflight.check import main as preflight_main

    if args.docs < 1 or args.probe < 0:
        raise ValueError("--docs must be at least 1 and --probe at least 0")
    return preflight_main(load_pipeline(args), args.docs, args.probe, args.json, str(config_file(args.config) or ""))


def cmd_demo(args) -> int:
    """``demo``: the whole method on the small world (or, for a config with a ``published`` section, on published
    data: toolformer.published), in its run folder, under its lock."""
    from toolformer.published.config import is_published_config
    from toolformer.smallworld.demo import run_demo

    if is_published_config(config_file(args.config, default="demo")):
        from toolformer.published.config import check_outputs
        from toolformer.published.demo import run_published

        pw = load_published_world(args)
        check_outputs(pw, ("world",) if pw.pipeline.model.path else ("world", "base"))
        return hold_and_run(pw.pipeline, "demo", lambda: run_published(pw, force=args.force))
    sw = load_world(args)
    check_start_model(sw)
    return hold_and_run(sw.pipeline, "demo", lambda: run_demo(sw, force=args.force))


def cmd_world(args) -> int:
    """``world generate|pretrain|probe``: the first two write into the run folder, under its lock."""
    from toolformer.smallworld.probe import cli_probe

    sw = load_world(args)
    if args.world_command == "probe":
        return cli_probe(sw, args.model, args.json)
    if args.world_command == "pretrain":
        check_start_model(sw)
    return hold_and_run(sw.pipeline, f"world {args.world_command}",
                         lambda: WORLD_COMMANDS[args.world_command](sw, args.force))


def _generate(sw, force: bool) -> None:
    from toolformer.smallworld.generator import generate_world

    generate_world(sw)


def _pretrain(sw, force: bool) -> None:
    from toolformer.smallworld.pretrain import pretrain_base_model

    pretrain_base_model(sw, force=force)


WORLD_COMMANDS: dict[str, Callable[[Any, bool], object]] = {"generate": _generate, "pretrain": _pretrain}


def load_published_world(args):
    """The published-data config of ``demo`` and ``published build|pretrain`` (``--config``)."""
    from toolformer.published.config import load_published

    return load_published(config_file(args.config, default="published"), list(args.overrides))


# A write under --out failing with one of these is the user's choice of folder (exit 2); any other is the
# machine's (a read-only or full file system, an I/O error: exit 1).
INPUT_ERRNOS = (errno.EACCES, errno.EPERM, errno.ENOTDIR, errno.EISDIR, errno.EEXIST)


def _fetch(args) -> int:
    """``published fetch``: a write under ``--out`` that fails is one line naming the path, nothing partial left
    (a refused source or folder is a DataError, a ValueError: exit 2 from the command line)."""
    from toolformer.published.sources import fetch

    try:
        got = fetch(args.out, base=args.source or "", force=args.force, timeout_s=args.timeout)
    except OSError as e:
        where, mine = e.filename or args.out, e.errno in INPUT_ERRNOS
        fix = "choose a folder you can write as --out" if mine else "rerun when the file system is fixed"
        print(f"toolformer: published fetch: cannot write {where} ({e.strerror or e}); nothing partial was left; "
              f"{fix}", file=sys.stderr)
        return 2 if mine else 1
    print(f"fetch: {len(got)} file(s) downloaded and checked into {args.out}; the rest were there already")
    return 0


def cmd_published(args) -> int:
    """``published fetch|build|pretrain``: the published-data world (toolformer.published)."""
    if args.published_command == "fetch":
        return _fetch(args)
    from toolformer.published.config import check_outputs, holding

    pw = load_published_world(args)
    if args.published_command == "pretrain" and pw.pretrain.weights:
        raise ValueError(f"published pretrain: this config's base model is the pretrained {pw.pretrain.weights} "
                         "(pretrain.weights), nothing to train: the model trained here is that of "
                         "--config configs/published-scratch.yaml (or set pretrain.weights='')")
    which = ("world",) if args.published_command == "build" else ("world", "base")
    check_outputs(pw, which)  # before the run folder is claimed: nothing of the user's is touched

    def work() -> None:
        from toolformer.published.pretrain import pretrain_base_model
        from toolformer.published.world import build_world

        with holding(pw, which):  # the world's and the base model's folders, locked for the whole command
            if args.published_command == "build":
                build_world(pw, force=args.force)
            else:
                pretrain_base_model(pw, force=args.force)

    return hold_and_run(pw.pipeline, f"published {args.published_command}", work)
