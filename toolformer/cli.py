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

import argparse
import json
import signal
import sys
from contextlib import ExitStack
from pathlib import Path

from toolformer.config.load import ConfigError, load_config
from toolformer.config.schema import STAGES, PipelineConfig
from toolformer.run import stops
from toolformer.stages import run_stage

STAGE_HELP = {
    "sample": "propose candidate API calls at positions of the corpus",
    "execute": "run every candidate call through the tool sandbox",
    "filter": "keep calls whose result lowers the weighted loss by tau_f",
    "chain": "more rounds of sample/execute/filter with the kept calls inline (chain.rounds)",
    "build": "write the augmented data set with kept calls inline",
    "finetune": "fine-tune the causal LM on the augmented data set",
    "evaluate": "evaluate base / disabled / enabled models on math and QA",
    "inspect": "show which calls survived and why (terminal, PNG, HTML)",
}

# Commands that write into the run folder: they hold it while they run.
WRITERS = ("run", *(s for s in STAGES if s != "inspect"), "demo", "world", "pretrain")
EXPORT_FORMATS = ("openai", "anthropic", "jsonl")  # toolformer.inspect.export.FORMATS, kept out of the import
# Commands whose arguments are prompts: their settings come after `--set` (or `--`).
PROMPT_COMMANDS = ("generate", "chat")
# Options of `toolformer tool`, and whether each takes a value.
TOOL_OPTIONS = {"--json": False, "--force": False, "-h": False, "--help": False, "--date": True, "--config": True,
                "-c": True}


def _add_config_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", "-c", help="YAML config file (configs/*.yaml)")
    p.add_argument("overrides", nargs="*", help="key=value overrides, e.g. filter.tau_filter=0.5")
    p.add_argument("--force", action="store_true", help="rerun stages even if their outputs are complete")


def _add_trust_arg(p: argparse.ArgumentParser) -> None:
    """``--trust-folder-tools`` of the commands that evaluate model folders (= evaluate.trust_folder_tools=true)."""
    p.add_argument("--trust-folder-tools", action="store_true",
                   help="let the model folders' toolformer.json start the MCP servers they declare, allow the side "
                        "effects they name and read tool data outside the folders (off: they are refused)")


def _add_model_args(p: argparse.ArgumentParser) -> None:
    """Options of the commands that use a tuned model folder (generate, chat)."""
    p.add_argument("--model", required=True, help="model folder")
    p.add_argument("--disabled", action="store_true", help="never call a tool (Toolformer disabled)")
    p.add_argument("--max-new-tokens", type=int, help="tokens to generate (default: the folder's decoding rule)")
    p.add_argument("--top-k-trigger", type=int, help="call when the call-start token is in the top k (default: "
                                                     "the folder's, the paper's 10)")
    p.add_argument("--max-calls", type=int, help="calls per prompt (default: the folder's, the paper's 1)")
    p.add_argument("--config", "-c", help="YAML config over the folder's record")
    p.add_argument("--trust-folder-tools", action="store_true",
                   help="let the folder's toolformer.json start the MCP servers it declares, allow the side effects "
                        "it names and read tool data outside the folder (off: they are refused)")
    p.add_argument("--set", nargs="+", metavar="KEY=VALUE", dest="settings_help",
                   help="config overrides, e.g. tools.knowledge=FILE; everything after --set (or --) is a setting, "
                        "never a prompt")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="toolformer",
        description="Teach a causal LM to use tools by itself (Schick et al., 2023).",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", metavar="<command>")
    p = sub.add_parser("run", help="run the stages listed in the config's `stages`, in order")
    _add_config_args(p)
    _add_trust_arg(p)
    for stage in STAGES:
        if stage == "inspect":
            continue
        p = sub.add_parser(stage, help=STAGE_HELP[stage])
        _add_config_args(p)
        if stage == "evaluate":
            _add_trust_arg(p)

    p = sub.add_parser("inspect", help=STAGE_HELP["inspect"])
    p.add_argument("run_dir", nargs="?", help="run folder to inspect (default: the config's run_dir)")
    p.add_argument("--tool", help="only this tool")
    p.add_argument("--kept", choices=["yes", "no", "all"], default="all", help="only kept or rejected calls")
    p.add_argument("--min-margin", type=float, default=None, help="only calls with L⁻ − L⁺ at least this")
    p.add_argument("--max-margin", type=float, default=None, help="only calls with L⁻ − L⁺ at most this")
    _add_config_args(p)

    p = sub.add_parser("export", help="write the built data set as chat conversations with tool calls",
                       description="Each row of RUN_DIR/build/dataset as one conversation: the text before "
                                   "each call, the call with JSON arguments, its result, the rest of the text.")
    p.add_argument("run_dir", help="run folder with a finished build")
    p.add_argument("--format", required=True, choices=EXPORT_FORMATS,
                   help="openai (chat fine-tuning with tools), anthropic (Messages API), jsonl (neutral segments)")
    p.add_argument("--kept-only", action="store_true", help="only rows with at least one kept call")
    p.add_argument("--out", help="output file (default: RUN_DIR/export/FORMAT.jsonl)")
    p.add_argument("--config", "-c", help="config for a run folder without config.yaml (call style, tools)")
    p.add_argument("overrides", nargs="*", help="key=value overrides, e.g. calls.style=special")

    p = sub.add_parser("tool", help="run one tool by hand and print its result",
                       description="Options may come anywhere; an input that starts with `-` is taken as "
                                   "it is (`toolformer tool Calculator \"-(-(-1))\"`), also after `--`.")
    p.add_argument("name", help="tool name, e.g. Calculator")
    p.add_argument("input", help="tool input, e.g. '18 + 12 * 3' or '-(-(-1))'")
    p.add_argument("--date", help="document date YYYY-MM-DD (Calendar)")
    p.add_argument("--json", action="store_true", help="print a JSON object")
    _add_config_args(p)

    p = sub.add_parser("tiny-model", help="write a tiny random causal LM and tokenizer (for tests)")
    p.add_argument("--out", required=True, help="output folder")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--data", default="data", help="folder with the texts its tokenizer learns from (default: data)")

    p = sub.add_parser("generate", help="generate text with tool calls from a tuned model",
                       description="Uses the tools, data and decoding rule the model folder records "
                                   "(toolformer.json); --config and the settings after --set go over them.")
    p.add_argument("prompts", nargs="*", help="prompt(s); more from --file, or from stdin when none is given")
    p.add_argument("--file", help="prompts, one a line, or JSON Lines with `prompt` (and `date`); - is stdin")
    p.add_argument("--sample", action="store_true", help="sample instead of greedy decoding")
    p.add_argument("--constrained", action="store_true",
                   help="well-formed calls only: tool names, inputs in each tool's grammar, closed calls")
    p.add_argument("--json", action="store_true", help="print one JSON object per prompt")
    _add_model_args(p)

    p = sub.add_parser("chat", help="talk to a tuned model; each tool call is shown as it is made",
                       description="A prompt loop: /disabled, /topk N, /calls N, /tokens N, /help, /quit.")
    _add_model_args(p)

    p = sub.add_parser("demo", help="the whole method on the generated small world (configs/demo.yaml)")
    _add_config_args(p)
    p.add_argument("--rounds", type=int, choices=(1, 2), help="rounds of self-training (demo.rounds): 2 samples "
                   "calls again with the round-1 model, no few-shot prompt, and tunes the base model on them")
    p = sub.add_parser("world", help="generate the small world's files (knowledge, corpora, eval sets)")
    _add_config_args(p)
    p = sub.add_parser("pretrain", help="train the small world's tokenizer and base model from scratch")
    _add_config_args(p)
    p = sub.add_parser("probe", help="copy probe and arithmetic accuracy of a small-world model")
    p.add_argument("--model", help="model folder (default: the config's base model)")
    p.add_argument("--json", action="store_true", help="print the full report as JSON")
    _add_config_args(p)

    p = sub.add_parser("tools", help="the tools: `tools list [--format json|openai|anthropic|mcp]` prints their "
                                     "schemas")
    tools_sub = p.add_subparsers(dest="tools_command", metavar="<subcommand>", required=True)
    c = tools_sub.add_parser("list", help="name, description and JSON Schema of every tool, in a wire format")
    c.add_argument("--format", default="json", choices=("json", "openai", "anthropic", "mcp"))
    c.add_argument("--all", action="store_true", help="every tool (and MCP tool allowed), not only tools.enabled")
    _add_config_args(c)

    p = sub.add_parser("mcp-serve", help="serve the enabled tools over stdio as a Model Context Protocol server")
    _add_config_args(p)

    p = sub.add_parser("tasks", help="evaluation files: `tasks check FILE` lists what loads and what is skipped")
    tasks_sub = p.add_subparsers(dest="tasks_command", metavar="<subcommand>", required=True)
    c = tasks_sub.add_parser("check", help="items in a task file, items loaded, items skipped and why")
    c.add_argument("file", help="task file (ASDiv.xml, SVAMP.json, MAWPS, WebQuestions, TriviaQA, LAMA)")
    c.add_argument("--format", default="auto", help="auto (from the file) or a format name")
    c.add_argument("--json", action="store_true", help="print the report as JSON")

    p = sub.add_parser("score", help="score any system's outputs on a task file with the paper's metrics")
    p.add_argument("file", help="task file")
    p.add_argument("--predictions", required=True, help='JSONL of {"id", "output"} per line')
    p.add_argument("--format", default="auto", help="auto (from the file) or a format name")
    p.add_argument("--kind", choices=("math", "qa"), help="metric (default: by format)")
    p.add_argument("--max-words", type=int, default=0, help="qa: words searched (0: the paper's 20, 5 for lama)")
    p.add_argument("--decimals", type=int, default=2, help="math: decimals compared, rounded half up")
    p.add_argument("--call-style", default="plain", help="call syntax removed from outputs (plain, special, ...)")
    p.add_argument("--out", help="per-item results (default: PREDICTIONS with .scores.jsonl)")
    p.add_argument("--json", action="store_true", help="print the counts as JSON")

    p = sub.add_parser("bench", help="benchmark the filter and sampler against raw forward speed")
    p.add_argument("args", nargs=argparse.REMAINDER, help="arguments of scripts/bench.py")
    return parser


def _load(args) -> PipelineConfig:
    overrides = list(args.overrides)
    if getattr(args, "rounds", None) is not None:
        overrides.append(f"demo.rounds={args.rounds}")
    if getattr(args, "trust_folder_tools", False):
        overrides.append("evaluate.trust_folder_tools=true")
    return load_config(PipelineConfig, args.config, overrides)


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
    elif out.ok:
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


def tool_argv(argv: list[str]) -> list[str]:
    """``toolformer tool``: options anywhere, and inputs that start with ``-``
    (``-(-(-1))``) taken as they are. Its options go first, the rest after ``--``."""
    if not argv or argv[0] != "tool":
        return argv
    options, positional = [], []
    rest = iter(argv[1:])
    for a in rest:
        name = a.split("=", 1)[0]
        if a == "--":
            continue
        if name in TOOL_OPTIONS:
            options.append(a)
            value = next(rest, None) if TOOL_OPTIONS[name] and "=" not in a else None
            if value is not None:
                options.append(value)
        else:
            positional.append(a)
    return ["tool", *options, *(["--"] if any(a.startswith("-") for a in positional) else []), *positional]


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


def settings_argv(argv: list[str]) -> tuple[list[str], list[str]]:
    """``generate`` and ``chat``: (the arguments before ``--set`` or ``--``, the settings after it)."""
    if not argv or argv[0] not in PROMPT_COMMANDS:
        return argv, []
    for i, a in enumerate(argv):
        if a in ("--set", "--"):
            return argv[:i], [x for x in argv[i + 1:] if x not in ("--set", "--")]
    return argv, []


def cmd_bench(args) -> int:
    from toolformer.bench import main as bench_main

    return bench_main(args.args)


def cmd_inspect(args) -> int:
    """Reads any run folder; writes only RUN_DIR/inspect (so it takes no lock)."""
    cfg = _load(args)
    if args.run_dir:
        cfg.run_dir = args.run_dir
    run_stage("inspect", cfg, force=args.force, tool=args.tool, kept=args.kept,
              min_margin=args.min_margin, max_margin=args.max_margin)
    return 0


def cmd_export(args) -> int:
    """Reads RUN_DIR/build; writes only its own output file, atomically (so it takes no lock, like inspect)."""
    from toolformer.inspect.export import export_run

    cfg = _load(args)
    cfg.run_dir = args.run_dir
    export_run(cfg, args.format, args.out, args.kept_only)
    return 0


def cmd_probe(args) -> int:
    from toolformer.world.probe import cli_probe

    return cli_probe(_load(args), args.model, args.json)


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


def _demo(cfg: PipelineConfig, force: bool) -> None:
    from toolformer.demo import run_demo

    run_demo(cfg, force=force)


def _world(cfg: PipelineConfig, force: bool) -> None:
    from toolformer.world.generator import generate_world

    generate_world(cfg)


def _pretrain(cfg: PipelineConfig, force: bool) -> None:
    from toolformer.world.pretrain import pretrain_base_model

    pretrain_base_model(cfg, force=force)


def _run(cfg: PipelineConfig, force: bool) -> None:
    from toolformer.pipeline import run_pipeline

    run_pipeline(cfg, force=force)


# Commands that need no run folder: command -> function(args) -> exit code.
PLAIN_COMMANDS = {"tool": cmd_tool, "tiny-model": cmd_tiny_model, "generate": cmd_generate, "chat": cmd_chat,
                  "bench": cmd_bench, "inspect": cmd_inspect, "export": cmd_export, "probe": cmd_probe,
                  "tasks": cmd_tasks, "score": cmd_score, "tools": cmd_tools, "mcp-serve": cmd_mcp_serve}
# Commands that write into a run folder, run under its lock: command -> function(cfg, force).
WRITING_COMMANDS = {"demo": _demo, "world": _world, "pretrain": _pretrain, "run": _run,
                    **{s: (lambda cfg, force, s=s: run_stage(s, cfg, force=force)) for s in STAGES if s != "inspect"}}


def dispatch(args) -> int:
    """Run one parsed command; errors propagate to :func:`main`. A writing
    command first checks the paths its stages read, then claims and locks
    every folder it writes (all checked before any is created)."""
    from toolformer.run.guard import check_owned, claim
    from toolformer.run.inputs import check_reads

    if args.command in PLAIN_COMMANDS:
        return PLAIN_COMMANDS[args.command](args)
    cfg = _load(args)
    if args.command in ("run", *STAGES):
        check_reads(cfg, cfg.stages if args.command == "run" else [args.command])
    folders = held_folders(cfg, args.command)
    for key, folder in folders:
        check_owned(Path(folder), key)
    with ExitStack() as held:
        for key, folder in folders:
            held.enter_context(claim(folder, key))
        WRITING_COMMANDS[args.command](cfg, args.force)
    return 0


def main(argv: list[str] | None = None) -> int:
    from toolformer.run.folder import disk_full

    parser = build_parser()
    argv, settings = settings_argv(tool_argv(list(sys.argv[1:] if argv is None else argv)))
    args, extra = parser.parse_known_args(argv)
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
