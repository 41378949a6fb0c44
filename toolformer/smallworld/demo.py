"""``toolformer demo``: the whole method on the small world, on a CPU.

world → base model → sample/propose → execute → filter → chain → build → finetune
(+ a control model tuned on the same documents without calls) → evaluate →
inspect, into one run folder, ending with the results table and the wall time
of each stage. ``RUN_DIR/results.json`` holds, per row (``base``,
``control``, ``toolformer_disabled``, ``toolformer`` and, with
``demo.max_calls_row`` n, ``toolformer_<n>calls``: the tuned model allowed n
calls per item), the accuracy on each evaluation set (``math_seen``,
``math_unseen``, ``qa_seen``, ``qa_unseen``: the world's training forms and
its held-out forms; ``math_twostep`` with ``world.eval_twostep``), their
means ``arithmetic`` and ``qa``, ``perplexity`` (with tools disabled: no call-start
token), ``perplexity_calls_allowed`` and ``call_rate``; plus
``wall_seconds``, ``kept_calls``, ``filter_gold`` (precision and recall of
the kept calls against the corpus's gold calls, per tool), ``candidate_gold``
(the same for every candidate, before the filter), ``chain_rounds`` (the
chain stage's counts per round) and ``chained`` (the built documents where a
call's input holds an earlier call's result).

With ``demo.rounds`` 2 (``toolformer demo --rounds 2``), a second round of
self-training follows round 1's fine-tune: the round-1 model samples calls on
the same corpus with the paper's sampler and no few-shot prompt
(``sample.prompt: none``), they are executed and filtered (judged by the base
model and/or by the round-1 model: ``demo.round2_filters``), built, and the
base model is fine-tuned on them, in ``RUN_DIR/round2`` and
``RUN_DIR/round2_judged_by_round1``. Each is a row of the table
(``toolformer_round2``, ``toolformer_round2_judged_by_round1``), and
``results.json``'s ``round2`` gives, per judge, the candidates, their and the
kept calls' precision against gold, and the change on every evaluation set
against the ``toolformer`` row.
"""

from __future__ import annotations

import copy
import functools
import json
import re
from pathlib import Path

from toolformer.config.evaluation import ExtraModel, TaskConfig
from toolformer.config.schema import PipelineConfig
from toolformer.inspect.gold import candidate_gold, gold_summary, match_gold
from toolformer.pipeline import save_resolved_config
from toolformer.rundir.folder import StageFolder, fmt_pct
from toolformer.rundir.guard import mark
from toolformer.smallworld.config import SmallWorldConfig, dump_smallworld
from toolformer.worlds.demo import (
    Timed,
    Timer,
    eval_rows,
    finish_run,
    kept_calls,
    kept_in,
    start_run,
    table,
    tune_control,
)

ROWS = ("base", "control", "toolformer_disabled", "toolformer")


def chained_row(cfg: SmallWorldConfig) -> str | None:
    """The name of the row that allows ``demo.max_calls_row`` calls per item (None without one)."""
    return f"toolformer_{cfg.demo.max_calls_row}calls" if cfg.demo.max_calls_row else None


def demo_rows(cfg: SmallWorldConfig) -> tuple[str, ...]:
    chained = chained_row(cfg)
    return ROWS + ((chained,) if chained is not None else ()) + tuple(round2_configs(cfg))


def round2_configs(sw: SmallWorldConfig) -> dict[str, PipelineConfig]:
    """Round 2 of self-training (demo.rounds 2), per judge in demo.round2_filters: its row name and the
    config of its run folder (RUN_DIR/round2...). ``sw`` holds the round-1 (world) config."""
    if sw.demo.rounds < 2:
        return {}
    cfg = sw.pipeline
    round1 = str(Path(cfg.run_dir) / "model")
    out = {}
    for judge in sw.demo.round2_filters:
        folder = "round2" if judge == "base" else "round2_judged_by_round1"
        rcfg = copy.deepcopy(cfg)
        rcfg.run_dir = str(Path(cfg.run_dir) / folder)
        rcfg.sample.model, rcfg.sample.prompt = round1, "none"
        rcfg.sample.method = {t: "sampler" for t in cfg.tools.enabled}
        rcfg.filter.model = "" if judge == "base" else round1
        rcfg.chain.rounds = 1  # a chain round would sample every document with a call once more (~17 min on 2 cores)
        rcfg.finetune.output_dir = str(Path(rcfg.run_dir) / "model")
        rcfg.evaluate.extra_models = []
        out[f"toolformer_{folder}"] = rcfg
    return out


def world_config(sw: SmallWorldConfig) -> SmallWorldConfig:
    """``sw`` with its pipeline config pointed at the generated world and the base model."""
    from toolformer.smallworld.generator import EVAL_SETS, TWOSTEP_SET, base_model_dir, world_paths

    cfg = copy.deepcopy(sw.pipeline)
    paths = world_paths(sw)
    cfg.model.path = str(base_model_dir(sw))
    cfg.corpus.path = str(paths["corpus"])
    cfg.tools.collection = str(paths["collection"])
    cfg.tools.knowledge = str(paths["knowledge"])
    cfg.evaluate.perplexity_path = str(paths["heldout"])
    if sw.demo.plain_from_pretraining and not cfg.build.plain_path:
        cfg.build.plain_path = str(paths["pretrain"])
    if not cfg.evaluate.tasks:
        cfg.evaluate.tasks = [
            TaskConfig(name=name, path=str(paths[f"eval_{name}"]), format="svamp" if kind == "math" else "triviaqa",
                       kind=kind, prompt=sw.demo.math_prompt if kind == "math" else sw.demo.qa_prompt)
            for name, kind in ((s, s.split("_")[0]) for s in EVAL_SETS)
        ]
        if sw.world.eval_twostep:
            cfg.evaluate.tasks.append(TaskConfig(name=TWOSTEP_SET, path=str(paths[f"eval_{TWOSTEP_SET}"]),
                                                 format="svamp", kind="math", prompt=sw.demo.math_prompt,
                                                 max_new_tokens=sw.demo.twostep_max_new_tokens))
    return sw.with_pipeline(cfg)


def reuse_stages(src: str | Path, dst: str | Path, stages: tuple[str, ...]) -> None:
    """Copy complete stages of run folder ``src`` that ``dst`` lacks (configs equal up to them: the stages
    check their hashes when they run, and run again where the copy does not match)."""
    import shutil

    for name in stages:
        if StageFolder(src, name).manifest() and not StageFolder(dst, name).dir.exists():
            shutil.copytree(StageFolder(src, name).dir, StageFolder(dst, name).dir)


def summarise(sw: SmallWorldConfig, walls: dict[str, float]) -> dict:
    """RUN_DIR/results.json in the demo's shape, from the evaluate stage's results."""
    cfg = sw.pipeline
    rows = eval_rows(cfg, demo_rows(sw), ("arithmetic", "qa", "perplexity", "perplexity_calls_allowed", "call_rate"))
    kept = kept_calls(cfg.run_dir)
    chain = StageFolder(cfg.run_dir, "chain").manifest() or {"counts": {"rounds": {}}}
    tasks = [t.name for t in cfg.evaluate.tasks]
    round2 = {}
    for name, rcfg in round2_configs(sw).items():
        sample = StageFolder(rcfg.run_dir, "sample").manifest() or {"counts": {"per_tool": {}}}
        rfilt = StageFolder(rcfg.run_dir, "filter").manifest() or {"counts": {"per_tool": {}}}
        one, two = rows.get("toolformer"), rows.get(name)
        round2[name] = {
            "run_dir": rcfg.run_dir, "judged_by": "the round-1 model" if rcfg.filter.model else "the base model",
            "candidates": {t: c["candidates"] for t, c in sample["counts"]["per_tool"].items()},
            "candidate_gold": candidate_gold(rcfg.run_dir),
            "kept_calls": {t: c["kept"] for t, c in rfilt["counts"]["per_tool"].items()},
            "filter_gold": gold_summary(rcfg.run_dir),
            "change": {t: None if not one or not two or one.get(t) is None or two.get(t) is None
                       else round(two[t] - one[t], 4) for t in tasks}}
    return {"rows": rows, "wall_seconds": walls, "kept_calls": kept, "filter_gold": gold_summary(cfg.run_dir),
            "candidate_gold": candidate_gold(cfg.run_dir), "chain_rounds": chain["counts"]["rounds"],
            "chained": chained_documents(cfg.run_dir), "round2": round2, "seed": cfg.seed,
            "tasks": {t.name: t.path for t in cfg.evaluate.tasks}}


_NUMBER = re.compile(r"\d[\d,]*(?:\.\d+)?")


def _numbers(text: str) -> set[str]:
    return {n.replace(",", "") for n in _NUMBER.findall(text or "")}


def chained_documents(run_dir: str | Path) -> dict:
    """The built documents with chained calls: a call whose input holds the result of an earlier call of the same
    document (copied from the text). ``documents``, ``calls`` (all calls of those documents), ``precision``: their
    share right against the corpus's gold calls (the filter_gold rule), ``gold_documents``: corpus documents whose
    gold calls are chained (the world's two-step documents), ``gold_documents_chained``: those among them with a
    chain in the built data."""
    import datasets

    from toolformer.rundir.folder import read_documents

    built = datasets.load_from_disk(str(Path(run_dir) / "build" / "dataset"))
    docs = {str(k): d for k, d in read_documents(run_dir).items()}

    def chained(calls: list[dict]) -> bool:
        return any(str(c["result"]).replace(",", "") in _numbers(later["input"])
                   for k, c in enumerate(calls) for later in calls[k + 1:])

    found = {d: [{**c, "doc_id": d, "kept": True} for c in json.loads(calls)]
             for d, calls in zip(built["doc_id"], built["calls"]) if chained(json.loads(calls))}
    calls = [c for cs in found.values() for c in cs]
    matched = match_gold(calls, {d: docs[d] for d in found if d in docs}) if calls else None
    right = sum(t["kept_right"] for t in matched["per_tool"].values()) if matched else 0
    gold = [d for d, doc in docs.items() if chained(doc.get("gold_calls") or [])]
    return {"documents": len(found), "calls": len(calls), "calls_right": right,
            "precision": right / len(calls) if calls else None, "gold_documents": len(gold),
            "gold_documents_chained": sum(d in found for d in gold)}


def _gold_part(gold: dict | None, tool: str) -> str:
    """`` (precision P % against gold)`` for one tool of candidate_gold/gold_summary, or nothing."""
    g = (gold or {}).get(tool)
    if not g or g.get("precision") is None:
        return ""
    return f" ({fmt_pct(g['precision'])} right against gold)"


def _round1(sw: SmallWorldConfig, force: bool, timed: Timed) -> SmallWorldConfig:
    """Round 1 on the world: sample, execute, filter, chain, build and finetune; returns its config (the
    evaluate rows of the control model and, with ``demo.max_calls_row``, the chained-calls row added)."""
    from toolformer.stages import run_stage

    wsw = world_config(sw)
    wcfg = wsw.pipeline
    wcfg.evaluate.extra_models = [ExtraModel(name="control", path=str(Path(sw.run_dir) / "control" / "model"))]
    chained = chained_row(sw)
    if chained is not None:  # the tuned model again, allowed chained calls: a later call may copy an earlier result
        wcfg.evaluate.extra_models.append(ExtraModel(name=chained, path=str(Path(sw.run_dir) / "model"),
                                                     tools=True, max_calls=sw.demo.max_calls_row,
                                                     top_k_trigger=sw.demo.max_calls_row_top_k))
    save_resolved_config(wcfg)
    for stage in ("sample", "execute", "filter", "chain", "build", "finetune"):
        timed(stage, functools.partial(run_stage, stage, wcfg, force=force))
    return wsw


def _round2(wsw: SmallWorldConfig, force: bool, timed: Timed) -> None:
    """Round 2 of self-training (demo.rounds 2): the round-1 model proposes, the base model is tuned again, per
    judge; each tuned model becomes an evaluate row of ``wcfg``."""
    from toolformer.stages import run_stage

    wcfg = wsw.pipeline
    first = None
    for name, rcfg in round2_configs(wsw).items():
        mark(Path(rcfg.run_dir))  # a run folder of its own: later commands may run on it (toolformer evaluate ...)
        save_resolved_config(rcfg)
        if first is not None:  # the same candidates for every judge: sampled and run once
            reuse_stages(first, rcfg.run_dir, ("sample", "execute"))
        first = first or rcfg.run_dir
        for stage in ("sample", "execute", "filter", "chain"):
            timed(f"{name} {stage}", functools.partial(run_stage, stage, rcfg, force=force))
        if not kept_in(rcfg.run_dir):
            print(f"{name}: the filter kept no call in round 2, so there is nothing to tune on; the row is not run")
            continue
        for stage in ("build", "finetune"):
            timed(f"{name} {stage}", functools.partial(run_stage, stage, rcfg, force=force))
        wcfg.evaluate.extra_models.append(ExtraModel(name=name, path=rcfg.finetune.output_dir, tools=True))
    if wsw.demo.rounds > 1:
        save_resolved_config(wcfg)  # its evaluate rows now hold the round-2 models


def _print_results(results: dict, walls: dict[str, float]) -> None:
    """The results table, the kept calls, the chain rounds, the gold checks, round 2, the chained
    calls and the wall times, as the demo ends."""
    print("\n" + table(results))
    print("kept calls: " + ", ".join(f"{t} {n:,}" for t, n in results["kept_calls"].items()))
    for r, c in results["chain_rounds"].items():
        print(f"kept in chain round {r} ({c['documents']:,} documents with calls inline): "
              + ", ".join(f"{t} {v['kept']:,} of {v['candidates']:,}" for t, v in c["per_tool"].items()))
    for tool, g in (results["filter_gold"] or {}).items():
        precision = "–" if g["precision"] is None else fmt_pct(g["precision"])
        print(f"kept {tool} calls against the corpus's gold calls: precision {precision} ({g['kept_right']:,} of "
              f"{g['kept']:,} right), recall {fmt_pct(g['recall'])} ({g['gold_with_kept']:,} of {g['gold']:,})")
    for name, r2 in results["round2"].items():
        print(f"{name}: calls sampled by the round-1 model without a prompt, judged by {r2['judged_by']}: "
              + ", ".join(f"{t} {n:,} candidates" + _gold_part(r2["candidate_gold"], t)
                          + f", {r2['kept_calls'].get(t, 0):,} kept" + _gold_part(r2["filter_gold"], t)
                          for t, n in r2["candidates"].items())
              + "; against toolformer: " + ", ".join(f"{t} {'–' if d is None else f'{100 * d:+.1f}'}"
                                                     for t, d in r2["change"].items()))
    ch = results["chained"]
    if ch["documents"] or ch["gold_documents"]:
        precision = "–" if ch["precision"] is None else fmt_pct(ch["precision"])
        print(f"chained calls (an input holding an earlier call's result): {ch['documents']:,} built documents, "
              f"their {ch['calls']:,} calls {precision} right against gold; {ch['gold_documents_chained']:,} of the "
              f"{ch['gold_documents']:,} corpus documents whose gold calls chain got a chain")
    print("wall time: " + ", ".join(f"{k} {v:.0f} s" for k, v in walls.items()))


def run_demo(cfg: SmallWorldConfig, force: bool = False) -> dict:
    """The demo into ``cfg.run_dir`` (see the module docstring); returns what ``RUN_DIR/results.json`` holds."""
    from toolformer.smallworld.generator import ensure_world
    from toolformer.smallworld.pretrain import pretrain_base_model
    from toolformer.stages import run_stage

    timed = Timer()
    start_run(cfg.run_dir, "smallworld.yaml", dump_smallworld(cfg))
    timed("world", lambda: ensure_world(cfg, force=force))
    timed("pretrain", lambda: pretrain_base_model(cfg, force=force))
    wsw = _round1(cfg, force, timed)
    tune_control(cfg.run_dir, wsw.pipeline, force, timed)
    _round2(wsw, force, timed)
    timed("evaluate", lambda: run_stage("evaluate", wsw.pipeline, force=force))
    timed("inspect", lambda: run_stage("inspect", wsw.pipeline, force=force))
    walls = timed.total()
    results = summarise(wsw, walls)
    finish_run(cfg.run_dir, results)
    _print_results(results, walls)
    print(f"demo: results in {Path(cfg.run_dir) / 'results.json'}")
    return results
