"""Command line: ``toolformer <command> [--config FILE] [key=value ...]``.

Each stage command runs one stage of the pipeline on the run folder named in
the config; ``run`` runs the stages listed in ``stages`` in order. Before any
work, the paths the stages read are checked (:mod:`toolformer.run.inputs`) and
the run folder is claimed and locked for the whole command
(:mod:`toolformer.run.guard`). Exit codes: 0 success, 1 a tool error
(``tool``), a failed stage or a full disk, 2 a usage or config error (a
missing path, a folder that is not toolformer's or is in use), 128 + the
signal number when stopped by SIGINT (130) or SIGTERM (143), with one line
saying what was kept (:mod:`toolformer.run.stops`). ``generate`` and ``chat``
take prompts as arguments and their settings after ``--set`` (or ``--``):
:mod:`toolformer.interact`.
"""

from __future__ import annotations

import json
import signal
import sys
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from toolformer.cli_parser import (  # noqa: F401 (EXPORT_FORMATS, STAGE_HELP: re-exported)
    EXPORT_FORMATS,
    MOVED_COMMANDS,
    PROMPT_COMMANDS,
    STAGE_HELP,
    build_parser,
    settings_argv,
    tool_argv,
)
from toolformer.config.load import ConfigError, load_config
from toolformer.config.schema import STAGES, PipelineConfig
from toolformer.run import stops
from toolformer.stages import run_stage


def _load(args) -> PipelineConfig:
    overrides = list(args.overrides)
    if getattr(args, "trust_folder_tools", False):
        overrides.append("evaluate.trust_folder_tools=true")
    return load_config(PipelineConfig, args.config, overrides)


def _load_world(args):
    """The small-world config of ``demo`` and ``world ...`` (toolformer.smallworld.config)."""
    from toolformer.smallworld.config import load_smallworld

    overrides = list(args.overrides)
    if getattr(args, "rounds", None) is not None:
        overrides.append(f"demo.rounds={args.rounds}")
    return load_smallworld(args.config, overrides)


def cmd_tool(args) -> int:
    from toolformer.tools import build_tool, known_tools
    from toolformer.tools.sandbox import build_sandbox

    cfg = _load(args)
    if args.name not in known_tools(cfg.tools):
        print(f"toolformer: unknown tool {args.name!r}; known: {', '.join(known_tools(cfg.tools))}", file=sys.stderr)
        return 2
    tool = build_tool(args.name, cfg.tools)
    sandbox = build_sandbox(cfg, {tool.name: tool}, cache=False)
    out = sandbox.run(tool.name, args.input, args.date)
    sandbox.close()
    if args.json:
        print(json.dumps({"tool": tool.name, "input": args.input, **out.as_dict()}, ensure_ascii=False))
    elif out.error is None:
        print(out.result)
    else:
        print(f"error ({out.error['code']}): {out.error['message']}", file=sys.stderr)
    return 0 if out.ok else 1


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


def held_folders(cfg: PipelineConfig, command: str) -> list[tuple[str, str]]:
    """(config key, folder) a writing command holds: the run folder, and the
    output folders of its stages that lie outside it."""
    stages = cfg.stages if command == "run" else [command]
    run = Path(cfg.run_dir).resolve()
    held = [("run_dir", cfg.run_dir)]
    outputs = (("finetune", "finetune.output_dir", cfg.finetune.output_dir),
               ("evaluate", "evaluate.output_dir", cfg.evaluate.output_dir))
    for stage, key, value in outputs:
        if value and stage in stages and run != Path(value).resolve() and run not in Path(value).resolve().parents:
            held.append((key, value))
    return held


def cmd_generate(args) -> int:
    from toolformer.interact import cli_generate

    return cli_generate(args)


def cmd_chat(args) -> int:
    from toolformer.interact import cli_chat

    return cli_chat(args)


def cmd_bench(args) -> int:
    if "--contention" in args.args:
        from toolformer.bench_contention import main as contention_main

        return contention_main([a for a in args.args if a != "--contention"])
    from toolformer.bench import main as bench_main

    return bench_main(args.args)


def cmd_preflight(args) -> int:
    """Reads the model and the first documents; writes nothing (so it takes no lock)."""
    from toolformer.preflight import main as preflight_main

    if args.docs < 1 or args.probe < 0:
        raise ValueError("--docs must be at least 1 and --probe at least 0")
    return preflight_main(_load(args), args.docs, args.probe, args.json, args.config or "")


def cmd_inspect(args) -> int:
    """Reads any run folder; writes only RUN_DIR/inspect (so it takes no lock)."""
    cfg = _load(args)
    if args.run_dir:
        cfg.run_dir = args.run_dir
    run_stage("inspect", cfg, force=args.force, tool=args.tool, kept=args.kept,
              min_margin=args.min_margin, max_margin=args.max_margin)
    return 0


def cmd_export(args) -> int:
    """Reads RUN_DIR/build (trl-dpo: RUN_DIR/filter and sample); writes only its own output file or folder,
    atomically (so it takes no lock, like inspect)."""
    from toolformer.inspect.export import export_run
    from toolformer.inspect.trl import FORMATS as TRL_FORMATS
    from toolformer.inspect.trl import export_trl

    cfg = _load(args)
    cfg.run_dir = args.run_dir
    (export_trl if args.format in TRL_FORMATS else export_run)(cfg, args.format, args.out, args.kept_only)
    return 0


def cmd_world(args) -> int:
    """``world generate|pretrain|probe``: the first two write into the run folder, under its lock."""
    from toolformer.smallworld.probe import cli_probe

    sw = _load_world(args)
    if args.world_command == "probe":
        return cli_probe(sw, args.model, args.json)
    return _hold_and_run(sw.pipeline, f"world {args.world_command}",
                         lambda: WORLD_COMMANDS[args.world_command](sw, args.force))


def cmd_tools(args) -> int:
    from toolformer.tools import build_tools, catalogue, close_tools, known_tools

    cfg = _load(args)
    tools = build_tools(cfg.tools, known_tools(cfg.tools) if args.all else None)
    close_tools(tools)  # an MCP tool's schema was read when it was built
    print(json.dumps(catalogue(tools, args.format), indent=2, ensure_ascii=False))
    return 0


def cmd_mcp_serve(args) -> int:
    from toolformer.mcpserve import serve

    return serve(_load(args))


def cmd_tasks(args) -> int:
    from toolformer.tasks.score import check_report

    if args.tasks_command == "lmeval":
        return cmd_tasks_lmeval(args)
    report = check_report(Path(args.file), args.format)
    if args.json:
        print(json.dumps(report, indent=2, ensure_ascii=False))
        return 0
    print(f"{report['file']}: format {report['format']} ({report['kind']}); {report['in_file']:,} records in the "
          f"file, {report['loaded']:,} items loaded, {report['skipped']:,} skipped")
    for reason, n in report["skip_reasons"].items():
        print(f"  skipped {n:,}: {reason}")
        for ex in report["examples"][reason]:
            print(f"    {ex['where']} (id {ex['id']}){': ' + ex['detail'] if ex['detail'] else ''}")
    if report["first_item"]:
        first = report["first_item"]
        print(f"  first item: id {first['id']}: {first['question'][:120]!r} -> {first['answers'][:3]}")
    return 0


def cmd_tasks_lmeval(args) -> int:
    """``tasks lmeval FILE --name NAME --out DIR``: an lm-evaluation-harness task of a task file."""
    from toolformer.tasks.lmeval import write_task

    done = write_task(args.file, args.out, args.name, args.format, args.kind, args.prompt, args.max_words,
                      args.decimals, args.max_items, args.max_new_tokens, args.call_style)
    dropped = f", {done['not_numbers']:,} without a number left out" if done["not_numbers"] else ""
    print(f"tasks lmeval: {done['task']}: {done['items']:,} items ({done['format']}, {done['kind']}; "
          f"{done['skipped']:,} records skipped{dropped}) in {done['folder']}; run: toolformer lm-eval run --model "
          f"toolformer --model_args pretrained=MODEL --tasks {done['task']} --include_path {done['folder']}")
    return 0


def cmd_lm_eval(args) -> int:
    """``lm-eval ARGS``: lm-evaluation-harness's own command line, with the model ``toolformer`` registered."""
    from toolformer.lmeval import run_cli

    return run_cli(args.args)


def cmd_score(args) -> int:
    from toolformer.run.folder import atomic_write_text, dumps
    from toolformer.tasks import KINDS, load_task
    from toolformer.tasks.score import read_predictions, score_file
    from toolformer.tools.calls import get_style

    preds = Path(args.predictions)
    if not preds.is_file():
        raise FileNotFoundError(f"{preds}: predictions file not found (--predictions)")
    out = Path(args.out) if args.out else preds.with_name(preds.name.removesuffix(".jsonl") + ".scores.jsonl")
    if out.resolve() in (preds.resolve(), Path(args.file).resolve()):
        raise ValueError(f"--out {out}: would overwrite an input; choose another file")
    fmt, data = load_task(args.file, args.format)
    outputs, problems = read_predictions(preds)
    for problem in problems[:5]:
        print(f"score: {problem}", file=sys.stderr)
    records, counts = score_file(data, outputs, args.kind or KINDS[fmt], fmt, args.max_words, args.decimals,
                                 get_style(args.call_style))
    atomic_write_text(out, "".join(dumps(r) + "\n" for r in records))
    counts = {"file": args.file, "format": fmt, "predictions": str(preds), "unusable_lines": len(problems),
              "results": str(out), **counts}
    if args.json:
        print(json.dumps(counts, indent=2, ensure_ascii=False))
    else:
        acc = f"{100 * counts['accuracy']:.1f} %" if counts["accuracy"] is not None else "n/a"
        print(f"score: {counts['correct']:,} of {counts['scored']:,} correct ({acc}); {counts['in_file']:,} records "
              f"in the file, {counts['skipped']:,} skipped; {counts['without_output']:,} items without an output, "
              f"{counts['malformed_calls']:,} malformed calls; per item: {out}")
    return 0


def cmd_demo(args) -> int:
    """``demo``: the whole method on the small world, in its run folder, under its lock."""
    from toolformer.smallworld.demo import run_demo

    sw = _load_world(args)
    return _hold_and_run(sw.pipeline, "demo", lambda: run_demo(sw, force=args.force))


def _generate(sw, force: bool) -> None:
    from toolformer.smallworld.generator import generate_world

    generate_world(sw)


def _pretrain(sw, force: bool) -> None:
    from toolformer.smallworld.pretrain import pretrain_base_model

    pretrain_base_model(sw, force=force)


WORLD_COMMANDS: dict[str, Callable[[Any, bool], object]] = {"generate": _generate, "pretrain": _pretrain}


def _run(cfg: PipelineConfig, force: bool) -> None:
    from toolformer.pipeline import run_pipeline

    run_pipeline(cfg, force=force)


# Commands that read no pipeline config or hold their folders themselves: command -> function(args) -> exit code.
PLAIN_COMMANDS = {"tool": cmd_tool, "tiny-model": cmd_tiny_model, "generate": cmd_generate, "chat": cmd_chat,
                  "bench": cmd_bench, "inspect": cmd_inspect, "export": cmd_export, "demo": cmd_demo,
                  "world": cmd_world, "tasks": cmd_tasks, "score": cmd_score, "tools": cmd_tools,
                  "mcp-serve": cmd_mcp_serve, "preflight": cmd_preflight, "lm-eval": cmd_lm_eval}
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
    from toolformer.run.inputs import check_reads

    if args.command in PLAIN_COMMANDS:
        return PLAIN_COMMANDS[args.command](args)
    cfg = _load(args)
    check_reads(cfg, cfg.stages if args.command == "run" else [args.command])
    return _hold_and_run(cfg, args.command, lambda: WRITING_COMMANDS[args.command](cfg, args.force))


def _hold_and_run(cfg: PipelineConfig, command: str, work: Callable[[], object]) -> int:
    """``work()`` while holding the folders ``command`` writes (all checked before any is claimed)."""
    from toolformer.run.guard import check_owned, claim

    folders = held_folders(cfg, command)
    for key, folder in folders:
        check_owned(Path(folder), key)
    with ExitStack() as held:
        for key, folder in folders:
            held.enter_context(claim(folder, key))
        work()
    return 0


def main(argv: list[str] | None = None) -> int:
    from toolformer.run.folder import disk_full

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
