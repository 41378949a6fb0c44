"""Benchmark: ``toolformer lm-eval`` against the evaluate stage on the same items of the same model folder.

    toolformer bench --lmeval --config configs/tiny.yaml [--model DIR] [--items N] [--repeats R]

Each of the config's ``evaluate.tasks`` (its first ``--items`` items) is written as an lm-eval task
(:func:`~toolformer.integrations.lmeval_tasks.write_task`, as ``toolformer tasks lmeval`` writes it). Then,
``--repeats`` times, alternating: the evaluate stage with the one row ``toolformer`` on the model folder
(``--model``, default the config's tuned folder), and lm-eval's command line as ``toolformer lm-eval run`` runs it
(``--model toolformer``, ``--log_samples``), each loading the model itself. Printed: per task the items, whether
every output is identical, accuracy and call rate by each; the median wall time of each and their ratio (lm-eval /
evaluate; the machines these run on are shared, so only the ratio in one run means anything). The last line is one
JSON object. Nothing is written outside a temporary folder.
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import tempfile
import time
from pathlib import Path

from toolformer.config.load import load_config
from toolformer.config.schema import PipelineConfig


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="toolformer bench --lmeval", description=__doc__.split("\n")[0])
    p.add_argument("--config", default="configs/tiny.yaml", help="the config whose evaluate.tasks are run")
    p.add_argument("--model", default="", help="the model folder (default: the config's tuned folder)")
    p.add_argument("--items", type=int, default=24, help="the first N items of each task (0: all)")
    p.add_argument("--repeats", type=int, default=3, help="timings of each, alternating; the median is kept")
    args = p.parse_args(argv)
    if args.items < 0 or args.repeats < 1:
        raise ValueError("--items: 0 or more; --repeats: at least 1")
    return args


def evaluate_once(cfg: PipelineConfig, out: Path) -> tuple[float, dict]:
    """The evaluate stage's row ``toolformer`` into ``out``: (seconds, per task its outputs, accuracy, call rate)."""
    from toolformer.rundir.files import iter_jsonl
    from toolformer.stages import run_stage

    run_cfg = copy.deepcopy(cfg)
    run_cfg.run_dir, run_cfg.evaluate.output_dir = str(out / "run"), str(out / "eval")
    t0 = time.perf_counter()
    rows = run_stage("evaluate", run_cfg, force=True).output["rows"]
    took = time.perf_counter() - t0
    cells = rows["toolformer"]["tasks"]
    return took, {name: {"outputs": [r["output"] for _, r in iter_jsonl(out / "eval/predictions/toolformer" /
                                                                          f"{name}.jsonl")],
                         "accuracy": cell["accuracy"], "call_rate": cell["call_rate"]}
                  for name, cell in cells.items()}


def lm_eval_once(cfg: PipelineConfig, config: str, tasks: Path, out: Path) -> tuple[float, dict]:
    """``toolformer lm-eval run`` on the written tasks, the model read with the same ``config`` as the evaluate
    stage's: (seconds, per task its outputs in item order, accuracy, call rate)."""
    from toolformer.integrations.lmeval import run_cli

    names = [tc.name for tc in cfg.evaluate.tasks]
    argv = ["run", "--model", "toolformer", "--model_args", f"pretrained={cfg.finetune.output_dir},config={config}",
            "--tasks", ",".join(names), "--include_path", str(tasks), "--batch_size", str(cfg.evaluate.batch_size),
            "--device", "cpu" if cfg.model.device == "cpu" else "cuda", "--log_samples", "--output_path", str(out)]
    t0 = time.perf_counter()
    run_cli(argv)
    took = time.perf_counter() - t0
    [results] = list(out.rglob("results_*.json"))
    scores = json.loads(results.read_text())["results"]
    found = {}
    for name in names:
        [samples] = list(out.rglob(f"samples_{name}_*.jsonl"))
        rows = sorted((json.loads(line) for line in samples.read_text().splitlines() if line.strip()),
                      key=lambda s: s["doc_id"])
        found[name] = {"outputs": [s["resps"][0][0] for s in rows], "accuracy": scores[name]["acc,none"],
                       "call_rate": scores[name]["call_rate,none"]}
    return took, found


def bench_config(args: argparse.Namespace) -> PipelineConfig:
    cfg = load_config(PipelineConfig, args.config)
    folder = args.model or cfg.finetune.output_dir or str(Path(cfg.run_dir) / "model")
    if not Path(folder).is_dir():
        raise FileNotFoundError(f"--model {folder}: no such model folder (run the pipeline first, or name one)")
    cfg.finetune.output_dir = folder
    cfg.evaluate.rows, cfg.evaluate.extra_models, cfg.evaluate.perplexity_path = ["toolformer"], [], ""
    for tc in cfg.evaluate.tasks:
        tc.max_items = args.items
    return cfg


def main(argv: list[str] | None = None) -> int:
    from toolformer.integrations.lmeval import require_lm_eval
    from toolformer.integrations.lmeval_tasks import write_task

    args = parse(list(argv or []))
    require_lm_eval()
    cfg = bench_config(args)
    times: dict[str, list[float]] = {"evaluate": [], "lm_eval": []}
    with tempfile.TemporaryDirectory(prefix="bench-lmeval-") as tmp:
        root = Path(tmp)
        for tc in cfg.evaluate.tasks:
            write_task(tc.path, root / "tasks", tc.name, tc.format, tc.kind, tc.prompt, tc.max_words, tc.decimals,
                       tc.max_items, tc.max_new_tokens, cfg.calls.style)
        for k in range(args.repeats):
            took, evaluated = evaluate_once(cfg, root / f"evaluate-{k}")
            times["evaluate"].append(took)
            took, harnessed = lm_eval_once(cfg, args.config, root / "tasks", root / f"lm_eval-{k}")
            times["lm_eval"].append(took)
    seconds = {k: statistics.median(v) for k, v in times.items()}
    tasks: dict[str, dict] = {}
    report = {"model": cfg.finetune.output_dir, "tasks": tasks, "seconds": seconds,
              "ratio_lm_eval_over_evaluate": round(seconds["lm_eval"] / seconds["evaluate"], 3)}
    for name, ours in evaluated.items():
        theirs = harnessed[name]
        tasks[name] = {
            "items": len(ours["outputs"]), "identical_outputs": ours["outputs"] == theirs["outputs"],
            "accuracy": [ours["accuracy"], theirs["accuracy"]], "call_rate": [ours["call_rate"], theirs["call_rate"]]}
        print(f"{name}: {len(ours['outputs'])} items; outputs identical: {ours['outputs'] == theirs['outputs']}; "
              f"accuracy {ours['accuracy']:.3f} / {theirs['accuracy']:.3f}, call rate {ours['call_rate']:.3f} / "
              f"{theirs['call_rate']:.3f} (evaluate / lm-eval)")
    print(f"wall time, median of {args.repeats}: evaluate {seconds['evaluate']:.2f} s, lm-eval "
          f"{seconds['lm_eval']:.2f} s, lm-eval / evaluate {report['ratio_lm_eval_over_evaluate']:.2f}")
    print(json.dumps(report))
    return 0
