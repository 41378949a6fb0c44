"""Command line: ``toolformer <command> [--config FILE] [key=value ...]``.

Each stage command runs one stage of the pipeline on the run folder named in
the config; ``run`` runs the stages listed in ``stages`` in order. Before any
work, the paths the stages read are checked (:mod:`toolformer.rundir.inputs`) and
the run folder is claimed and locked for the whole command
(:mod:`toolformer.rundir.guard`). Exit codes: 0 success, 1 a tool error
(``tool``), a failed stage or a full disk, 2 a usage or config error (a
missing path, a folder that is not toolformer's or is in use), 128 + the
signal number when stopped by SIGINT (130) or SIGTERM (143), with one line
saying what was kept (:mod:`toolformer.rundir.stops`). ``generate`` and ``chat``
take prompts as arguments and their settings after ``--set`` (or ``--``):
:mod:`toolformer.cli.interact`.
"""

from __future__ import annotations

import signal
import sys
from collections.abc import Callable

try:  # Ctrl-C while the command's modules load: one line, no traceback (nothing was written yet)
    from toolformer.cli.common import hold_and_run, load_pipeline
    from toolformer.cli.evaluation import cmd_lm_eval, cmd_score, cmd_tasks
    from toolformer.cli.jobs import cmd_bench, cmd_demo, cmd_preflight, cmd_published, cmd_world
    from toolformer.cli.models import cmd_chat, cmd_generate, cmd_tiny_model
    from toolformer.cli.parser import MOVED_COMMANDS, PROMPT_COMMANDS, build_parser, settings_argv, tool_argv
    from toolformer.cli.runs import cmd_export, cmd_inspect
    from toolformer.cli.tools import cmd_mcp_serve, cmd_tool, cmd_tools
    from toolformer.cli.weights import cmd_weights
    from toolformer.config.load import ConfigError
    from toolformer.config.schema import STAGES, PipelineConfig
    from toolformer.rundir import stops
    from toolformer.stages import run_stage
except KeyboardInterrupt:
    print("toolformer: stopped by SIGINT while starting; nothing was written", file=sys.stderr)
    raise SystemExit(128 + signal.SIGINT) from None


def _run(cfg: PipelineConfig, force: bool) -> None:
    from toolformer.pipeline import run_pipeline

    run_pipeline(cfg, force=force)


# Commands that read no pipeline config or hold their folders themselves: command -> function(args) -> exit code.
PLAIN_COMMANDS = {"tool": cmd_tool, "tiny-model": cmd_tiny_model, "generate": cmd_generate, "chat": cmd_chat,
                  "bench": cmd_bench, "inspect": cmd_inspect, "export": cmd_export, "demo": cmd_demo,
                  "published": cmd_published, "world": cmd_world, "tasks": cmd_tasks, "score": cmd_score,
                  "tools": cmd_tools, "mcp-serve": cmd_mcp_serve, "preflight": cmd_preflight, "lm-eval": cmd_lm_eval,
                  "weights": cmd_weights}


# Commands that write into a run folder, run under its lock: command -> function(cfg, force).
def _stage_command(stage: str) -> Callable[[PipelineConfig, bool], object]:
    """The command of one stage: :func:`~toolformer.stages.run_stage` of ``stage``."""
    return lambda cfg, force: run_stage(stage, cfg, force=force)


WRITING_COMMANDS: dict[str, Callable[[PipelineConfig, bool], object]] = {
    "run": _run, **{s: _stage_command(s) for s in STAGES if s != "inspect"}}


def dispatch(args) -> int:
    """Run one parsed command; errors propagate to :func:`main`. A writing
    command first checks the paths its stages read, then claims and locks
    every folder it writes (all checked before any is created)."""
    from toolformer.rundir.inputs import check_reads
    from toolformer.rundir.sharding import fault_setting

    fault_setting()  # a TOOLFORMER_FAULT that could never fire is refused before any work
    if args.command in PLAIN_COMMANDS:
        return PLAIN_COMMANDS[args.command](args)
    cfg = load_pipeline(args)
    check_reads(cfg, cfg.stages if args.command == "run" else [args.command])
    return hold_and_run(cfg, args.command, lambda: WRITING_COMMANDS[args.command](cfg, args.force))


def main(argv: list[str] | None = None) -> int:
    try:
        return _main(argv)
    except KeyboardInterrupt:  # Ctrl-C before the command's stop handler is in place or after it is removed
        print("toolformer: stopped by SIGINT; kept every file written so far (each is written whole or not at all)",
              file=sys.stderr)
        return 128 + signal.SIGINT


def _main(argv: list[str] | None) -> int:
    from toolformer.rundir.files import disk_full

    parser = build_parser()
    argv, settings = settings_argv(tool_argv(list(sys.argv[1:] if argv is None else argv)))
    if argv and argv[0] in MOVED_COMMANDS:
        print(f"toolformer: `toolformer {argv[0]}` is now `toolformer {MOVED_COMMANDS[argv[0]]}` (same options)",
              file=sys.stderr)
        return 2
    passed_on = argv[:1] in (["lm-eval"], ["bench"])
    args, extra = parser.parse_known_args(argv[:1] if passed_on else argv)
    if passed_on:  # every argument after it is lm-eval's (the benchmark's) own, passed on as given
        args.args, extra = argv[1:], []
    # `inspect RUN --tool X key=value`: overrides after options arrive as extras.
    if extra:
        if not hasattr(args, "overrides") or any("=" not in e or e.startswith("-") for e in extra):
            parser.error(f"unrecognized arguments: {' '.join(extra)}")
        args.overrides = [*args.overrides, *extra]
    if args.command in PROMPT_COMMANDS:
        bad = [x for x in settings if "=" not in x]
        if bad:
            parser.error(f"--set: {bad[0]!r} is not KEY=VALUE (prompts go before --set)")
        args.overrides = settings
    if args.command is None:
        parser.print_help()
        return 2
    with stops.handled():
        try:
            with stops.blamed():  # an error a stop caused (a library that caught it) is reported as the stop
                return dispatch(args)
        except (stops.Stopped, KeyboardInterrupt) as e:
            signum = e.signum if isinstance(e, stops.Stopped) else signal.SIGINT
            kept = stops.kept() or "every file written so far (each is written whole or not at all)"
            print(f"toolformer: stopped by {signal.Signals(signum).name}; kept {kept}; "
                  "rerun the same command to resume", file=sys.stderr)
            return 128 + signum
        except ConfigError as e:
            print(f"toolformer: config error: {e}", file=sys.stderr)
            return 2
        except (FileNotFoundError, ValueError) as e:
            print(f"toolformer: error: {e}", file=sys.stderr)
            return 2
        except Exception as e:
            if not disk_full(e):
                raise
            where = getattr(e, "filename", None) or "a file"
            kept = f"; kept {stops.kept()}" if stops.kept() else ""
            print(f"toolformer: no space left on device writing {where} (nothing partial was left){kept}; "
                  "free some space and rerun the same command to resume", file=sys.stderr)
            return 1

if __name__ == "__main__":
    sys.exit(main())
