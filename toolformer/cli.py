"""Command line: ``toolformer <command> [--config FILE] [key=value ...]``.

Each stage command runs one stage of the pipeline on the run folder named in
the config; ``run`` runs the stages listed in ``stages`` in order. Exit codes:
0 success, 1 a tool error (``tool``) or a failed stage, 2 a usage or config
error.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys

from toolformer.config import STAGES, PipelineConfig
from toolformer.configuration import ConfigError, load_config

# stage name -> (module, function); each function takes (cfg, force=bool).
STAGE_FUNCTIONS = {s: (f"toolformer.stages.{s}", "run_stage") for s in STAGES}

STAGE_HELP = {
    "sample": "propose candidate API calls at positions of the corpus",
    "execute": "run every candidate call through the tool sandbox",
    "filter": "keep calls whose result lowers the weighted loss by tau_f",
    "build": "write the augmented data set with kept calls inline",
    "finetune": "fine-tune the causal LM on the augmented data set",
    "evaluate": "evaluate base / disabled / enabled models on math and QA",
    "inspect": "show which calls survived and why (terminal, PNG, HTML)",
}


def _add_config_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", "-c", help="YAML config file (configs/*.yaml)")
    p.add_argument("overrides", nargs="*", help="key=value overrides, e.g. filter.tau_filter=0.5")
    p.add_argument("--force", action="store_true", help="rerun stages even if their outputs are complete")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="toolformer",
        description="Teach a causal LM to use tools by itself (Schick et al., 2023).",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", metavar="<command>")
    p = sub.add_parser("run", help="run the stages listed in the config's `stages`, in order")
    _add_config_args(p)
    for stage in STAGES:
        if stage == "inspect":
            continue
        p = sub.add_parser(stage, help=STAGE_HELP[stage])
        _add_config_args(p)

    p = sub.add_parser("inspect", help=STAGE_HELP["inspect"])
    p.add_argument("run_dir", nargs="?", help="run folder to inspect (default: the config's run_dir)")
    p.add_argument("--tool", help="only this tool")
    p.add_argument("--kept", choices=["yes", "no", "all"], default="all", help="only kept or rejected calls")
    p.add_argument("--min-margin", type=float, default=None, help="only calls with L⁻ − L⁺ at least this")
    p.add_argument("--max-margin", type=float, default=None, help="only calls with L⁻ − L⁺ at most this")
    _add_config_args(p)

    p = sub.add_parser("tool", help="run one tool by hand and print its result")
    p.add_argument("name", help="tool name, e.g. Calculator")
    p.add_argument("input", help="tool input, e.g. '18 + 12 * 3'")
    p.add_argument("--date", help="document date YYYY-MM-DD (Calendar)")
    p.add_argument("--json", action="store_true", help="print a JSON object")
    _add_config_args(p)

    p = sub.add_parser("tiny-model", help="write a tiny random causal LM and tokenizer (for tests)")
    p.add_argument("--out", required=True, help="output folder")
    p.add_argument("--seed", type=int, default=0)

    p = sub.add_parser("generate", help="generate text with tool calls from a tuned model")
    p.add_argument("--model", required=True, help="model folder")
    p.add_argument("prompts", nargs="+", help="prompt(s)")
    p.add_argument("--disabled", action="store_true", help="never call a tool (Toolformer disabled)")
    p.add_argument("--max-new-tokens", type=int, default=48)
    p.add_argument("--top-k-trigger", type=int, default=10, help="call when the call-start token is in the top k")
    p.add_argument("--max-calls", type=int, default=1)
    p.add_argument("--sample", action="store_true", help="sample instead of greedy decoding")
    p.add_argument("--json", action="store_true", help="print one JSON object per prompt")
    _add_config_args(p)

    p = sub.add_parser("demo", help="the whole method on the generated small world (configs/demo.yaml)")
    _add_config_args(p)
    p = sub.add_parser("world", help="generate the small world's files (knowledge, corpora, eval sets)")
    _add_config_args(p)
    p = sub.add_parser("pretrain", help="train the small world's tokenizer and base model from scratch")
    _add_config_args(p)
    p = sub.add_parser("probe", help="copy probe and arithmetic accuracy of a small-world model")
    p.add_argument("--model", help="model folder (default: the config's base model)")
    p.add_argument("--json", action="store_true", help="print the full report as JSON")
    _add_config_args(p)

    p = sub.add_parser("bench", help="benchmark the filter and sampler against raw forward speed")
    p.add_argument("args", nargs=argparse.REMAINDER, help="arguments of scripts/bench.py")
    return parser


def _load(args) -> PipelineConfig:
    return load_config(PipelineConfig, args.config, args.overrides)


def run_stage(name: str, cfg: PipelineConfig, force: bool = False, **kwargs):
    module_name, fn = STAGE_FUNCTIONS[name]
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as e:
        if e.name == module_name:
            raise SystemExit(f"toolformer: stage {name!r} is not implemented yet") from None
        raise
    return getattr(module, fn)(cfg, force=force, **kwargs)


def cmd_tool(args) -> int:
    from toolformer.sandbox import Sandbox
    from toolformer.tools import REGISTRY, build_tool

    cfg = _load(args)
    if args.name not in REGISTRY:
        print(f"toolformer: unknown tool {args.name!r}; known: {', '.join(sorted(REGISTRY))}", file=sys.stderr)
        return 2
    tool = build_tool(args.name, cfg.tools)
    sandbox = Sandbox({tool.name: tool}, cfg.tools.timeout_s, cfg.tools.max_result_chars, cache=False)
    out = sandbox.run(tool.name, args.input, args.date)
    if args.json:
        print(json.dumps({"tool": tool.name, "input": args.input, **out.as_dict()}, ensure_ascii=False))
    elif out.ok:
        print(out.result)
    else:
        print(f"error ({out.error['code']}): {out.error['message']}", file=sys.stderr)
    return 0 if out.ok else 1


def cmd_tiny_model(args) -> int:
    from toolformer.modeling import write_tiny_model

    path = write_tiny_model(args.out, seed=args.seed)
    print(f"tiny-model: wrote {path}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    # `inspect RUN --tool X key=value`: overrides after options arrive as extras.
    if extra:
        if not hasattr(args, "overrides") or any("=" not in e or e.startswith("-") for e in extra):
            parser.error(f"unrecognized arguments: {' '.join(extra)}")
        args.overrides = [*args.overrides, *extra]
    if args.command is None:
        parser.print_help()
        return 2
    try:
        if args.command == "tool":
            return cmd_tool(args)
        if args.command == "tiny-model":
            return cmd_tiny_model(args)
        if args.command == "generate":
            from toolformer.generate import cli_generate

            return cli_generate(args)
        if args.command == "bench":
            from toolformer.bench import main as bench_main

            return bench_main(args.args)
        cfg = _load(args)
        if args.command == "inspect":
            if args.run_dir:
                cfg.run_dir = args.run_dir
            run_stage("inspect", cfg, force=args.force, tool=args.tool, kept=args.kept,
                      min_margin=args.min_margin, max_margin=args.max_margin)
            return 0
        if args.command == "demo":
            from toolformer.demo import run_demo

            run_demo(cfg, force=args.force)
            return 0
        if args.command == "world":
            from toolformer.world.generator import generate_world

            generate_world(cfg)
            return 0
        if args.command == "pretrain":
            from toolformer.world.pretrain import pretrain_base_model

            pretrain_base_model(cfg, force=args.force)
            return 0
        if args.command == "probe":
            from toolformer.world.probe import cli_probe

            return cli_probe(cfg, args.model, args.json)
        if args.command == "run":
            from toolformer.pipeline import run_pipeline

            run_pipeline(cfg, force=args.force)
            return 0
        run_stage(args.command, cfg, force=args.force)
        return 0
    except ConfigError as e:
        print(f"toolformer: config error: {e}", file=sys.stderr)
        return 2
    except (FileNotFoundError, ValueError) as e:
        print(f"toolformer: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
