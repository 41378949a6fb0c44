"""``toolformer demo --config configs/published.yaml``: the whole method on published data, on a CPU.

world (:mod:`.world`) → base model (:mod:`.pretrain`, the shipped one when it matches) → sample (rule
proposers) → execute → filter → chain → build → finetune (+ the control model, tuned on the same documents
without calls) → evaluate → inspect, into one run folder. ``RUN_DIR/results.json`` has the small world's shape:
per row (``base``, ``control``, ``toolformer_disabled``, ``toolformer``, ``toolformer_2calls``) the accuracy on
each set (``lama``, ``asdiv``, ``mawps``, ``gsm8k``), ``perplexity`` (tools disabled) and ``call_rate``; plus
``kept_calls``, ``gold`` (kept calls against the calls people placed, :mod:`.gold`), ``gold_by_tau``,
``wall_seconds`` and ``paper`` (the paper's GPT-J numbers, printed beside the table)."""

from __future__ import annotations

import copy
import functools
import json
from pathlib import Path

from toolformer.config.evaluation import ExtraModel, TaskConfig
from toolformer.config.schema import PipelineConfig
from toolformer.pipeline import save_resolved_config
from toolformer.published.config import PublishedWorldConfig, dump_published, holding
from toolformer.rundir.folder import StageFolder
from toolformer.worlds.demo import Timer, eval_rows, finish_run, kept_calls, kept_in, start_run, tune_control
from toolformer.worlds.demo import table as rows_table

ROWS = ("base", "control", "toolformer_disabled", "toolformer", "toolformer_2calls")
SETS = ("lama", "asdiv", "mawps", "gsm8k")
PAPER = {"lama": (31.9, 53.5), "asdiv": (7.5, 40.4), "mawps": (9.9, 44.0), "svamp": (5.2, 29.4)}
"""The paper's GPT-J numbers (Tables 3 and 4): (without tools, Toolformer)."""


def world_pipeline(cfg: PublishedWorldConfig, root: Path, base: Path, extras: bool = True) -> PipelineConfig:
    """The pipeline config pointed at the world's files and the base model, with its evaluation sets and (with
    ``extras``) the control and two-call rows."""
    p = copy.deepcopy(cfg.pipeline)
    p.model.path = p.model.path or str(base)  # model.path set: annotate and tune that model instead
    p.corpus.path = str(root / "corpus.jsonl")
    p.tools.knowledge = str(root / "knowledge.jsonl")
    p.evaluate.perplexity_path = str(root / "heldout.jsonl")
    if not p.build.plain_path:
        p.build.plain_path = str(root / "pretrain.jsonl")
    d = cfg.demo
    if not p.evaluate.tasks:
        p.evaluate.tasks = [TaskConfig(name="lama", path=str(root / "eval" / "lama.jsonl"), format="lama", kind="qa",
                                       prompt=d.lama_prompt)]
        tokens = {"asdiv": d.math_max_new_tokens, "mawps": d.math_max_new_tokens, "gsm8k": d.gsm8k_max_new_tokens}
        p.evaluate.tasks += [TaskConfig(name=n, path=str(root / "eval" / f"{n}.jsonl"), format="gsm8k", kind="math",
                                        prompt=d.math_prompt, max_new_tokens=k) for n, k in tokens.items()]
    run = Path(p.run_dir)
    p.evaluate.extra_models = [
        ExtraModel(name="control", path=str(run / "control" / "model")),
        ExtraModel(name="toolformer_2calls", path=str(run / "model"), tools=True, max_calls=2, top_k_trigger=1),
    ] if extras else []
    return p


def summarise(cfg: PublishedWorldConfig, p: PipelineConfig, walls: dict[str, float]) -> dict:
    from toolformer.published.gold import gold_report
    from toolformer.published.needed import needed_recall

    rows = eval_rows(p, ROWS, ("perplexity", "call_rate"))
    report = gold_report(p.run_dir)
    if "Calculator" in report["gold"]:
        report["gold"]["Calculator"]["needed"] = needed_recall(p.run_dir, p.model.path)
    chain = StageFolder(p.run_dir, "chain").manifest() or {"counts": {"rounds": {}}}
    world = json.loads((cfg.world_dir() / "world.json").read_text())
    return {"rows": rows, "wall_seconds": walls,
            "kept_calls": kept_calls(p.run_dir),
            "chain_rounds": chain["counts"]["rounds"], **report, "world": world["counts"],
            "contamination": world["contamination"], "seed": p.seed,
            "tasks": {t.name: t.path for t in p.evaluate.tasks},
            "paper": {k: {"without_tools": a, "toolformer": b} for k, (a, b) in PAPER.items()}}


def table(results: dict) -> str:
    """The results table (:func:`toolformer.worlds.demo.table`) with the paper's GPT-J rows."""
    tasks = list(results["tasks"])
    lines = [rows_table(results)]
    for label, k in (("paper, GPT-J without tools", 0), ("paper, GPT-J Toolformer", 1)):
        lines.append(f"| {label} | " + " | ".join(
            f"{PAPER[t][k]:.1f}" if t in PAPER else "–" for t in tasks) + " | – | – |")
    return "\n".join(lines)


def _judged(c: dict) -> str:
    """Gold counts (:mod:`.gold`) as ``precision P (right of kept), recall R (found of gold)``."""
    prec = "–" if c["precision"] is None else f"{100 * c['precision']:.1f} %"
    return (f"precision {prec} ({c['kept_right']:,} of {c['kept']:,}), recall {100 * c['recall_right']:.1f} % "
            f"({c['gold_with_right_kept']:,} of {c['gold']:,})")


def _print(results: dict) -> None:
    print("\n" + table(results))
    print("kept calls: " + ", ".join(f"{t} {n:,}" for t, n in results["kept_calls"].items()))
    for tool, g in results["gold"].items():
        print(f"kept {tool} calls against the calls people placed ({g['source']}): {_judged(g)}; chained calls "
              f"{g['chained_kept']:,} kept, {g['chained_right']:,} right")
        if len(g.get("by_source", {})) > 1:
            print("  per source: " + "; ".join(f"{name} {_judged(c)}" for name, c in g["by_source"].items()))
        if (need := g.get("needed")) and need["needed"]:
            print(f"  where the base model gets the result wrong itself ({need['needed']:,} of {need['gold']:,} "
                  f"gold calls): {need['needed_with_right_kept']:,} with a right kept call, recall "
                  f"{100 * need['recall_right']:.1f} %")
    c = results["contamination"]
    print(f"contamination: {c['prompts']:,} evaluation prompts searched in every training text; "
          f"{sum(c['training_documents_left_out'].values()):,} training documents holding one left out; longest "
          f"shared n-gram {c['longest_shared']['words']} words")
    print("wall time: " + ", ".join(f"{k} {v:.0f} s" for k, v in results["wall_seconds"].items()))
    if results["wall_seconds_run"]["total"] > results["wall_seconds"]["total"] + 1:
        print("wall time of the run over every invocation: "
              + ", ".join(f"{k} {v:.0f} s" for k, v in results["wall_seconds_run"].items()))


def nothing_kept(p: PipelineConfig) -> None:
    """A ValueError (exit 2) naming the cause when the filter and chain kept no call: there is nothing to tune on."""
    from toolformer.inspect.view import read_stage

    if kept_in(p.run_dir):
        return
    best: dict[str, float] = {}
    for r in read_stage(Path(p.run_dir), "filter").records:
        if r.get("loss_plus") is not None:
            best[r["tool"]] = max(best.get(r["tool"], float("-inf")), r["loss_minus"] - r["loss_plus"])
    raise ValueError("demo: the filter kept no call, so there is nothing to fine-tune on: the largest L⁻ − L⁺ was "
                     + ", ".join(f"{t} {v:.2f}" for t, v in best.items())
                     + f" (tau_f {p.filter.tau_filter:g}); the base model gains too little from a result in its "
                     f"context (`python -m toolformer.published.lab copy {p.model.path}`; docs/published-world.md, "
                     "\"Where it stands\")")


def base_model(cfg: PublishedWorldConfig, force: bool, timed: Timer) -> Path:
    """The model annotated and tuned: ``model.path`` when set; else the pretrained model ``pretrain.weights`` names
    (fetched into the cache once: :func:`toolformer.worlds.importing.fetch`); else the one trained here."""
    from toolformer.published.pretrain import pretrain_base_model
    from toolformer.worlds.importing import fetch

    if cfg.pipeline.model.path:
        return Path(cfg.pipeline.model.path)
    if cfg.pretrain.weights:
        record, _written, folder = timed("weights", lambda: fetch(cfg.pretrain.weights))
        print(f"demo: base model {record['model_name']} ({record['model']['parameters']:,} parameters) in {folder}")
        return folder
    with holding(cfg, ("base",)):
        return timed("pretrain", lambda: pretrain_base_model(cfg, force=force))


def tune(p: PipelineConfig, base: Path, force: bool, timed: Timer, extras: bool, empty_ok: bool) -> None:
    """build → finetune (and the control model with ``extras``). Where the filter kept no call and ``empty_ok``,
    nothing is tuned: the rows of the tuned model are the base model's, with tools and without (the method
    leaves the model as it was), and the control and two-call rows are left out."""
    from toolformer.stages import run_stage

    if empty_ok and not kept_in(p.run_dir):
        print("demo: the filter kept no call, so there is nothing to tune on: the tuned model's rows are the base "
              "model's (tools enabled and disabled)")
        p.finetune.output_dir, p.evaluate.extra_models = str(base), []
        save_resolved_config(p)
        return
    nothing_kept(p)
    for stage in ("build", "finetune"):
        timed(stage, functools.partial(run_stage, stage, p, force=force))
    if extras:
        tune_control(p.run_dir, p, force, timed)


def run_published(cfg: PublishedWorldConfig, force: bool = False, world: Path | None = None,
                  extras: bool = True, empty_ok: bool = False) -> dict:
    """The demo on published data into ``cfg.run_dir``; returns what ``RUN_DIR/results.json`` holds.

    ``world``: a world built already (:mod:`.scale`: one world for several models), read and not rebuilt;
    ``extras=False`` leaves out the control and two-call rows; ``empty_ok``: a filter that kept no call does not
    stop the run (:func:`tune`)."""
    from toolformer.published.world import build_world
    from toolformer.stages import run_stage

    timed = Timer(Path(cfg.run_dir) / "walls.json")
    start_run(cfg.run_dir, "published.yaml", dump_published(cfg))
    if force:
        timed.reset()
    if world is None:
        with holding(cfg, ("world",)):  # each output folder outside the run folder: locked while it is written
            world = timed("world", lambda: build_world(cfg, force=force))
    base = base_model(cfg, force, timed)
    p = world_pipeline(cfg, world, base, extras)
    save_resolved_config(p)
    for stage in ("sample", "execute", "filter", "chain"):
        timed(stage, functools.partial(run_stage, stage, p, force=force))
    tune(p, base, force, timed, extras, empty_ok)
    timed("evaluate", lambda: run_stage("evaluate", p, force=force))
    timed("inspect", lambda: run_stage("inspect", p, force=force))
    results = summarise(cfg, p, timed.total()) | {"wall_seconds_run": timed.spent(),
                                                     "base_model": str(base)}
    finish_run(cfg.run_dir, results)
    _print(results)
    print(f"demo: results in {Path(cfg.run_dir) / 'results.json'}")
    return results
