"""Kept calls against the calls people placed.

- Calculator: GSM8K's ``<<expr=result>>`` annotations (the world puts each at the annotated result's text): a
  kept call is right when it sits before that text (within the product's tolerance) and its value equals the
  annotation's. Judged on the GSM8K documents of the annotation corpus only.
- QA: a call right before a mention of a T-REx fact's object whose result names the object. Judged on the T-REx
  documents only.
Calls kept by the chain stage's later rounds (a calculation that uses an earlier one's result) count with those
of the filter, and are also counted apart (``chained_kept``, ``chained_right``)."""

from __future__ import annotations

from pathlib import Path

from toolformer.inspect.gold import match_gold
from toolformer.inspect.sweep import gold_by_tau
from toolformer.inspect.view import read_stage
from toolformer.published.world import CORPUS_ID
from toolformer.rundir.files import read_jsonl
from toolformer.rundir.folder import read_documents

GOLD_SOURCES = {"Calculator": (f"{CORPUS_ID}gsm8k-", "GSM8K's annotated calculations"),
                "QA": (f"{CORPUS_ID}trex-", "T-REx objects")}
TAUS = (1.0, 1.5, 2.0, 3.0, 4.0)


def chain_records(run_dir: Path) -> list[dict]:
    """The records of the chain stage's rounds (their char_start in the original document)."""
    return [r | {"chained": True} for shard in sorted((run_dir / "chain").glob("round-*/shard-*.jsonl"))
            for r in read_jsonl(shard)]


def _tool_gold(tool: str, calls: list[dict], documents: dict[str, dict]) -> dict | None:
    prefix, source = GOLD_SOURCES[tool]
    docs = {d: doc for d, doc in documents.items() if d.startswith(prefix)}
    mine = [r for r in calls if r["tool"] == tool and r["doc_id"] in docs]
    matched = match_gold(mine, docs) if mine else None
    if matched is None or tool not in matched["per_tool"]:
        return None
    c = matched["per_tool"][tool]
    chained = [r for r in mine if r.get("chained") and r.get("kept")]
    judged = match_gold(chained, docs) if chained else None
    chained_right = judged["per_tool"].get(tool, {}).get("kept_right", 0) if judged else 0
    return {"source": source, "documents": len(docs), **{k: c[k] for k in (
        "kept", "kept_right", "precision", "gold", "gold_with_right_kept", "recall_right", "candidates",
        "candidate_precision")}, "chained_kept": len(chained), "chained_right": chained_right}


def gold_report(run_dir: str | Path) -> dict:
    """``{"gold": {tool: counts}, "gold_by_tau": {tool: rows}}`` for the run's filter and chain stages."""
    run_dir = Path(run_dir)
    filt = read_stage(run_dir, "filter")
    if filt.state == "missing":
        return {"gold": {}, "gold_by_tau": {}}
    documents = read_documents(run_dir)
    calls = filt.records + chain_records(run_dir)
    gold = {t: g for t in GOLD_SOURCES if (g := _tool_gold(t, calls, documents))}
    by_tau = {}
    for tool in gold:
        try:
            by_tau[tool] = gold_by_tau(run_dir, tool, list(TAUS))
        except ValueError as e:
            by_tau[tool] = [{"error": str(e)}]
    return {"gold": gold, "gold_by_tau": by_tau}
