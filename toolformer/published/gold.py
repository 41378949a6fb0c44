"""Kept calls against the calls people placed.

- Calculator: GSM8K's ``<<expr=result>>`` annotations (the world puts each at the annotated result's text), and
  MAWPS's and ASDiv's formulas (one call at the answer's text, where the formula's value is the answer): a kept
  call is right when it sits before that text (within the product's tolerance) and its value equals the gold
  call's. Judged on the GSM8K, MAWPS and ASDiv documents of the annotation corpus (a MAWPS or ASDiv document
  without a gold call is not judged).
- QA: a call right before a mention of a T-REx fact's object whose result names the object. Judged on the T-REx
  documents only.
Each tool's counts are over all its sources, with ``by_source`` the same counts per source. Calls kept by the chain
stage's later rounds (a calculation that uses an earlier one's result) count with those of the filter, and are
also counted apart (``chained_kept``, ``chained_right``)."""

from __future__ import annotations

from pathlib import Path

from toolformer.inspect.gold import match_gold
from toolformer.inspect.sweep import gold_by_tau
from toolformer.inspect.view import read_stage
from toolformer.published.world import CORPUS_ID
from toolformer.rundir.files import read_jsonl
from toolformer.rundir.folder import GOLD_CALLS, read_documents

GOLD_SOURCES = {
    "Calculator": ({s: f"{CORPUS_ID}{s}-" for s in ("gsm8k", "mawps", "asdiv")},
                   "GSM8K's annotated calculations, MAWPS's and ASDiv's formulas"),
    "QA": ({"trex": f"{CORPUS_ID}trex-"}, "T-REx objects"),
}
"""Per tool: the id prefix of each source's documents in the annotation corpus, and what its gold calls are."""
TAUS = (0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 4.0)
"""The tau_f that ``gold_by_tau`` reports, from the run's own tau_f of each tool up (the filter computed what
lower ones would need only where the run's could keep a call)."""


def chain_records(run_dir: Path) -> list[dict]:
    """The records of the chain stage's rounds (their char_start in the original document)."""
    return [r | {"chained": True} for shard in sorted((run_dir / "chain").glob("round-*/shard-*.jsonl"))
            for r in read_jsonl(shard)]


def gold_documents(tool: str, documents: dict[str, dict]) -> dict[str, dict]:
    """The documents of ``tool``'s gold sources that hold gold calls (the ones judged)."""
    prefixes = tuple(GOLD_SOURCES[tool][0].values())
    return {d: doc for d, doc in documents.items() if d.startswith(prefixes) and isinstance(doc.get(GOLD_CALLS), list)}


def _counts(tool: str, mine: list[dict], docs: dict[str, dict]) -> dict | None:
    """``tool``'s calls ``mine`` judged against the gold calls of ``docs``; None when there is none to judge."""
    matched = match_gold(mine, docs) if mine else None
    if matched is None or tool not in matched["per_tool"]:
        return None
    c = matched["per_tool"][tool]
    chained = [r for r in mine if r.get("chained") and r.get("kept")]
    judged = match_gold(chained, docs) if chained else None
    chained_right = judged["per_tool"].get(tool, {}).get("kept_right", 0) if judged else 0
    return {"documents": len(docs), **{k: c[k] for k in (
        "kept", "kept_right", "precision", "gold", "gold_with_right_kept", "recall_right", "candidates",
        "candidate_precision")}, "chained_kept": sum(r["doc_id"] in docs for r in chained),
        "chained_right": chained_right}


def _tool_gold(tool: str, calls: list[dict], documents: dict[str, dict]) -> dict | None:
    prefixes, source = GOLD_SOURCES[tool]
    docs = gold_documents(tool, documents)
    mine = [r for r in calls if r["tool"] == tool and r["doc_id"] in docs]
    whole = _counts(tool, mine, docs)
    if whole is None:
        return None
    by_source = {name: c for name, prefix in prefixes.items()
                 if (c := _counts(tool, mine, {d: doc for d, doc in docs.items() if d.startswith(prefix)}))}
    return {"source": source, **whole, "by_source": by_source}


def gold_report(run_dir: str | Path) -> dict:
    """``{"gold": {tool: counts}, "gold_by_tau": {tool: rows}}`` for the run's filter and chain stages; each
    tool's counts hold ``by_source``, the same counts per source (those whose documents hold gold calls)."""
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
            low = max((r["tau_filter"] for r in filt.records if r["tool"] == tool), default=min(TAUS))
            by_tau[tool] = gold_by_tau(run_dir, tool, [t for t in TAUS if t >= low])
        except ValueError as e:
            by_tau[tool] = [{"error": str(e)}]
    return {"gold": gold, "gold_by_tau": by_tau}
