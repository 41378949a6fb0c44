"""``python -m toolformer.world <command> [--config FILE] [key=value ...]``.

Commands: ``generate`` (write the world's files), ``pretrain`` (tokenizer and
base model; generates the world first if needed), ``probe`` (the copy probe
on a model folder, by default the base model).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from toolformer.config import PipelineConfig
from toolformer.configuration import ConfigError, load_config


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m toolformer.world",
                                     description="The small world: a generated world and a base model trained on it.")
    sub = parser.add_subparsers(dest="command", metavar="<command>")
    for name, text in (("generate", "write the world's knowledge, corpora and eval sets"),
                       ("pretrain", "train the tokenizer and the base model (minutes on CPU)"),
                       ("probe", "copy probe and eval_math accuracy of a model")):
        p = sub.add_parser(name, help=text)
        p.add_argument("--config", "-c", help="YAML config file, e.g. configs/world.yaml")
        p.add_argument("overrides", nargs="*", help="key=value overrides, e.g. pretrain.max_steps=200")
        if name == "pretrain":
            p.add_argument("--force", action="store_true", help="retrain even if the model is complete")
        if name == "probe":
            p.add_argument("--model", help="model folder (default: the base model of the config)")
            p.add_argument("--json", action="store_true", help="print the full report as JSON")
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    try:
        cfg = load_config(PipelineConfig, args.config, args.overrides)
        if args.command == "generate":
            from toolformer.world.generator import generate_world

            generate_world(cfg)
        elif args.command == "pretrain":
            from toolformer.world.pretrain import pretrain_base_model

            pretrain_base_model(cfg, force=args.force)
        else:
            from transformers import AutoModelForCausalLM, AutoTokenizer

            from toolformer.modeling import set_threads
            from toolformer.world.generator import world_paths
            from toolformer.world.pretrain import base_model_dir
            from toolformer.world.probe import run_probe

            set_threads(cfg.pretrain.threads)
            path = args.model or str(base_model_dir(cfg))
            if not Path(path, "config.json").exists():
                raise FileNotFoundError(f"{path}: model folder does not exist (run `pretrain` first)")
            paths = world_paths(cfg)
            report = run_probe(AutoModelForCausalLM.from_pretrained(path).eval(), AutoTokenizer.from_pretrained(path),
                               paths["corpus"], paths["eval_math"], cfg.pretrain.probe_items or 200, seed=cfg.seed)
            if args.json:
                print(json.dumps(report, indent=2, ensure_ascii=False))
        return 0
    except ConfigError as e:
        print(f"toolformer.world: config error: {e}", file=sys.stderr)
        return 2
    except (FileNotFoundError, ValueError) as e:
        print(f"toolformer.world: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
