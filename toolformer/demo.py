"""``toolformer demo``: the whole method on the small world, on a CPU.

world → base model → sample/propose → execute → filter → build → finetune
(+ a control model tuned on the same documents without calls) → evaluate →
inspect, into one run folder, ending with the results table and the wall time
of each stage. ``RUN_DIR/results.json`` holds, per row (``base``,
``control``, ``toolformer_disabled``, ``toolformer``), the accuracy on each
evaluation set (``math_seen``, ``math_unseen``, ``qa_seen``, ``qa_unseen``:
the world's training forms and its held-out forms), their means
``arithmetic`` and ``qa``, ``perplexity`` and ``call_rate``; plus
``wall_seconds``, ``kept_calls`` and ``filter_gold`` (precision and recall of
the kept calls against the corpus's gold calls, per tool).
"""

from __future__ import annotations

import copy
import json
import time
from pathlib import Path

from toolformer.config.schema import ExtraModel, PipelineConfig, TaskConfig
from toolformer.inspect.view import gold_summary
from toolformer.pipeline import save_resolved_config
from toolformer.run.folder import Stage, atomic_write_text

ROWS = ("base", "control", "toolformer_disabled", "toolformer")


def world_config(cfg: PipelineConfig) -> PipelineConfig:
    """The pipeline config pointed at the generated world and the base model."""
    from toolformer.world.generator import EVAL_SETS, base_model_dir, world_paths

    cfg = copy.deepcopy(cfg)
    paths = world_paths(cfg)
    cfg.model.path = str(base_model_dir(cfg))
    cfg.corpus.path = str(paths["corpus"])
    cfg.tools.collection = str(paths["collection"])
    cfg.tools.knowledge = str(paths["knowledge"])
    cfg.evaluate.perplexity_path = str(paths["heldout"])
    if cfg.demo.plain_from_pretraining and not cfg.build.plain_path:
        cfg.build.plain_path = str(paths["pretrain"])
    if not cfg.evaluate.tasks:
        cfg.evaluate.tasks = [
            TaskConfig(name=name, path=str(paths[f"eval_{name}"]), format="svamp" if kind == "math" else "triviaqa",
                       kind=kind, prompt=cfg.demo.math_prompt if kind == "math" else cfg.demo.qa_prompt)
            for name, kind in ((s, s.split("_")[0]) for s in EVAL_SETS)
        ]
    return cfg


def control_dataset(cfg: PipelineConfig) -> Path:
    """The build stage's documents with their original text: no calls (the
    plain ones, from the corpus or build.plain_path, as they are). Made again
    every run (a second or two), so it follows the build stage's data set."""
    import datasets

    from toolformer.run.folder import read_documents
    from toolformer.stages.build import save_dataset

    out = Path(cfg.run_dir) / "control" / "dataset"
    docs = read_documents(cfg.run_dir)
    built = datasets.load_from_disk(str(Path(cfg.run_dir) / "build" / "dataset"))
    rows = [{"text": docs[d]["text"] if aug else text, "doc_id": d, "augmented": False, "calls": "[]"}
            for d, aug, text in zip(built["doc_id"], built["augmented"], built["text"])]
    out.parent.mkdir(parents=True, exist_ok=True)
    save_dataset(rows, out)
    return out


def summarise(cfg: PipelineConfig, walls: dict[str, float]) -> dict:
    """RUN_DIR/results.json in the demo's shape, from the evaluate stage's results."""
    out_dir = Path(cfg.evaluate.output_dir or Path(cfg.run_dir) / "eval")
    full = json.loads((out_dir / "results.json").read_text())
    rows = {}
    for name in ROWS:
        r = full["rows"].get(name)
        rows[name] = None if r is None else (
            {t: c["accuracy"] for t, c in r["tasks"].items()}
            | {k: r.get(k) for k in ("arithmetic", "qa", "perplexity", "call_rate")})
    filt = Stage(cfg.run_dir, "filter").manifest() or {"counts": {"per_tool": {}}}
    kept = {t: c["kept"] for t, c in filt["counts"]["per_tool"].items()}
    return {"rows": rows, "wall_seconds": walls, "kept_calls": kept, "filter_gold": gold_summary(cfg.run_dir),
            "seed": cfg.seed, "tasks": {t.name: t.path for t in cfg.evaluate.tasks}}


def table(results: dict) -> str:
    def pct(v):
        return "–" if v is None else f"{100 * v:.1f}"

    tasks = list(results["tasks"])
    head = ["row", *(f"{t} %" for t in tasks), "perplexity", "call rate %"]
    lines = ["| " + " | ".join(head) + " |", "| " + " | ".join("---" for _ in head) + " |"]
    for name, r in results["rows"].items():
        if r is None:
            lines.append(f"| {name} | not run |" + " |" * (len(head) - 2))
            continue
        ppl = "–" if r["perplexity"] is None else f"{r['perplexity']:.2f}"
        cells = [pct(r.get(t)) for t in tasks]
        lines.append(f"| {name} | " + " | ".join([*cells, ppl, pct(r["call_rate"])]) + " |")
    return "\n".join(lines)


def run_demo(cfg: PipelineConfig, force: bool = False) -> dict:
    from toolformer.stages import run_stage
    from toolformer.world.generator import ensure_world
    from toolformer.world.pretrain import pretrain_base_model

    walls: dict[str, float] = {}
    t_all = time.perf_counter()

    def timed(name, fn):
        t0 = time.perf_counter()
        out = fn()
        walls[name] = round(time.perf_counter() - t0, 1)
        return out

    timed("world", lambda: ensure_world(cfg, force=force))
    timed("pretrain", lambda: pretrain_base_model(cfg, force=force))
    wcfg = world_config(cfg)
    wcfg.evaluate.extra_models = [ExtraModel(name="control", path=str(Path(cfg.run_dir) / "control" / "model"))]
    save_resolved_config(wcfg)
    for stage in ("sample", "execute", "filter", "build", "finetune"):
        timed(stage, lambda s=stage: run_stage(s, wcfg, force=force))

    # The paper's "+ CC" row: the same documents, fine-tuned the same way, without calls.
    ccfg = copy.deepcopy(wcfg)
    ccfg.run_dir = str(Path(cfg.run_dir) / "control")
    ccfg.finetune.dataset = str(timed("control data", lambda: control_dataset(wcfg)))
    ccfg.finetune.output_dir = str(Path(ccfg.run_dir) / "model")
    timed("control finetune", lambda: run_stage("finetune", ccfg, force=force))

    timed("evaluate", lambda: run_stage("evaluate", wcfg, force=force))
    timed("inspect", lambda: run_stage("inspect", wcfg, force=force))
    walls["total"] = round(time.perf_counter() - t_all, 1)
    results = summarise(wcfg, walls)
    atomic_write_text(Path(cfg.run_dir) / "results.json", json.dumps(results, indent=2) + "\n")
    print("\n" + table(results))
    print("kept calls: " + ", ".join(f"{t} {n:,}" for t, n in results["kept_calls"].items()))
    for tool, g in (results["filter_gold"] or {}).items():
        precision = "–" if g["precision"] is None else f"{100 * g['precision']:.1f} %"
        print(f"kept {tool} calls against the corpus's gold calls: precision {precision} ({g['kept_right']:,} of "
              f"{g['kept']:,} right), recall {100 * g['recall']:.1f} % ({g['gold_with_kept']:,} of {g['gold']:,})")
    print("wall time: " + ", ".join(f"{k} {v:.0f} s" for k, v in walls.items()))
    print(f"demo: results in {Path(cfg.run_dir) / 'results.json'}")
    return results
