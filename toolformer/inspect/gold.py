"""Kept calls against the gold calls of the documents: per tool, precision
(a kept call is right when a gold call of its tool starts within
GOLD_TOLERANCE characters and has the same result) and recall (the share of
gold calls with a kept call there), and the wrong kept calls shown in their
sentence. ``toolformer inspect`` and the demo's ``results.json`` report them."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from toolformer.corpus.records import margin
from toolformer.inspect.view import in_context, read_stage
from toolformer.rundir.folder import GOLD_CALLS, read_documents

# A kept call is at a gold call's position when their char_start differ by at
# most this many characters (a space or a punctuation mark between the words
# the sampler and the annotation chose).
GOLD_TOLERANCE = 3
GOLD_EXAMPLES = 20  # wrong kept calls listed per tool, largest L⁻ − L⁺ first
NUMERIC_TOOLS = ("Calculator",)  # results compared as numbers ("561" == "561.0")


def _margin_or_lowest(record: dict) -> float:
    """L⁻ − L⁺ of ``record``, or minus infinity without its losses (it sorts last)."""
    m = margin(record)
    return float("-inf") if m is None else m


def same_result(tool: str, a, b) -> bool:
    """Whether two results of ``tool`` agree: as numbers for NUMERIC_TOOLS
    (when both parse), else as stripped strings, case-insensitive."""
    if a is None or b is None:
        return False
    a, b = str(a).strip(), str(b).strip()
    if tool in NUMERIC_TOOLS:
        try:
            return math.isclose(float(a.replace(",", "")), float(b.replace(",", "")), rel_tol=1e-9, abs_tol=1e-9)
        except ValueError:
            pass
    return a.casefold() == b.casefold()


def _nearest_gold(rec: dict, golds: list[dict], tolerance: int) -> dict | None:
    """The gold call of ``rec``'s tool nearest to it within ``tolerance``
    characters, preferring one with the same result."""
    def distance(g: dict) -> int:
        return abs(int(g["char_start"]) - int(rec["char_start"]))

    near = [g for g in golds if g["tool"] == rec["tool"] and distance(g) <= tolerance]
    return min(near, key=lambda g: (not same_result(rec["tool"], g["result"], rec.get("result")), distance(g)),
               default=None)


def _judge_calls(calls: list[dict], annotated: dict[str, list[dict]], per_tool: dict[str, dict],
                 tolerance: int) -> tuple[dict[str, int], dict[str, list[tuple[dict, dict | None]]]]:
    """Count every call of ``calls`` in an annotated document into ``per_tool`` (candidates and kept, right or
    not); returns the kept calls of tools without gold calls per tool (those with any) and, per tool, the
    wrong kept calls with their nearest gold call."""
    no_gold: dict[str, int] = {}
    wrong: dict[str, list[tuple[dict, dict | None]]] = {t: [] for t in per_tool}
    for r in calls:
        if r["doc_id"] not in annotated:
            continue
        if r["tool"] not in per_tool:
            no_gold[r["tool"]] = no_gold.get(r["tool"], 0) + bool(r.get("kept"))
            continue
        g = _nearest_gold(r, annotated[r["doc_id"]], tolerance)
        right = g is not None and same_result(r["tool"], g["result"], r.get("result"))
        c = per_tool[r["tool"]]
        c["candidates"] += 1
        c["candidates_right"] += right
        if r.get("kept"):
            c["kept"] += 1
            c["kept_right"] += right
            if not right:
                wrong[r["tool"]].append((r, g))
    return {t: n for t, n in no_gold.items() if n}, wrong


def _count_gold(kept: list[dict], annotated: dict[str, list[dict]], per_tool: dict[str, dict],
                tolerance: int) -> None:
    """Count every gold call into ``per_tool``: with a kept call of its tool within ``tolerance`` characters,
    and with one that has its result."""
    kept_at: dict[tuple[str, str], list[dict]] = {}
    for r in kept:
        kept_at.setdefault((r["doc_id"], r["tool"]), []).append(r)
    for doc_id, golds in annotated.items():
        for g in golds:
            near = [r for r in kept_at.get((doc_id, g["tool"]), [])
                    if abs(int(r["char_start"]) - int(g["char_start"])) <= tolerance]
            c = per_tool[g["tool"]]
            c["gold"] += 1
            c["gold_with_kept"] += bool(near)
            c["gold_with_right_kept"] += any(same_result(g["tool"], g["result"], r.get("result")) for r in near)


def match_gold(calls: list[dict], documents: dict[str, dict], tolerance: int = GOLD_TOLERANCE) -> dict | None:
    """Kept ``calls`` (filter records) against the gold calls of ``documents``.

    Only documents with a ``gold_calls`` list count (a kept call in another
    document is not judged), and only gold calls of tools with at least one
    record in ``calls`` (a tool the run did not enable is not judged). A kept call is right when a gold call of its tool
    in its document starts within ``tolerance`` characters of it and has the
    same result (:func:`same_result`). Per tool with gold calls: ``candidates``
    (every call in ``calls``, kept or not), ``candidates_right``,
    ``candidate_precision`` = candidates_right / candidates, ``kept``,
    ``kept_right``, ``precision`` = kept_right / kept (None without kept
    calls), ``gold``, ``gold_with_kept`` (a kept call of the tool within
    ``tolerance``, right or not), ``recall`` = gold_with_kept / gold,
    ``gold_with_right_kept`` and ``recall_right`` = gold_with_right_kept /
    gold. Returns ``{"tolerance", "documents", "per_tool", "no_gold",
    "wrong"}``: ``no_gold`` counts the kept calls of tools without a single
    gold call; ``wrong`` is, per tool, ``(record, nearest gold call or None)``
    for each wrong kept call, largest L⁻ − L⁺ first. None when no document has
    a gold call."""
    present = {r["tool"] for r in calls}  # gold calls of a tool the run never proposed are not judged
    annotated = {d: [g for g in doc[GOLD_CALLS] if g["tool"] in present] for d, doc in documents.items()
                 if isinstance(doc.get(GOLD_CALLS), list)}
    gold_tools = list(dict.fromkeys(g["tool"] for golds in annotated.values() for g in golds))
    if not gold_tools:
        return None
    kept = [r for r in calls if r.get("kept") and r["doc_id"] in annotated]
    counters = ("candidates", "candidates_right", "kept", "kept_right", "gold", "gold_with_kept",
                "gold_with_right_kept")
    per_tool: dict[str, dict[str, Any]] = {t: dict.fromkeys(counters, 0) for t in gold_tools}  # + the ratios
    no_gold, wrong = _judge_calls(calls, annotated, per_tool, tolerance)
    _count_gold(kept, annotated, per_tool, tolerance)
    for c in per_tool.values():
        c["candidate_precision"] = c["candidates_right"] / c["candidates"] if c["candidates"] else None
        c["precision"] = c["kept_right"] / c["kept"] if c["kept"] else None
        c["recall"] = c["gold_with_kept"] / c["gold"]
        c["recall_right"] = c["gold_with_right_kept"] / c["gold"]
    for pairs in wrong.values():
        pairs.sort(key=lambda p: _margin_or_lowest(p[0]), reverse=True)
    return {"tolerance": tolerance, "documents": len(annotated), "per_tool": per_tool, "no_gold": no_gold,
            "wrong": wrong}


def gold_quality(calls: list[dict], documents: dict[str, dict], style, separator: str, width: int,
                 tolerance: int = GOLD_TOLERANCE, examples: int = GOLD_EXAMPLES) -> dict | None:
    """:func:`match_gold` ready to show and save as JSON: ``wrong`` holds, per
    tool, the first ``examples`` wrong kept calls (largest L⁻ − L⁺ first), each
    ``{"doc_id", "char_start", "input", "result", "margin", "before", "call",
    "after", "gold"}`` (``before`` + ``call`` + ``after``: the call in its
    sentence, see :func:`in_context`; ``gold``: the gold call it was compared
    against, ``{"input", "result", "char_start", "call"}``, or None when no
    gold call of the tool is within ``tolerance``). None when no document has
    a gold call."""
    matched = match_gold(calls, documents, tolerance)
    if matched is None:
        return None
    shown: dict[str, list[dict]] = {}
    for tool, pairs in matched["wrong"].items():
        shown[tool] = []
        for r, g in pairs[:examples]:
            before, call, after = in_context(documents[r["doc_id"]]["text"], r, style, separator, width)
            gold = None if g is None else {"input": g["input"], "result": g["result"], "char_start": g["char_start"],
                                           "call": style.render(tool, g["input"], g["result"])}
            shown[tool].append({"doc_id": r["doc_id"], "char_start": r["char_start"], "input": r["input"],
                                "result": r.get("result"), "margin": margin(r), "before": before, "call": call,
                                "after": after, "gold": gold})
    return matched | {"wrong": shown}


def gold_summary(run_dir: str | Path) -> dict | None:
    """Per tool, the kept calls of the run's filter stage against the gold
    calls of its documents (:func:`match_gold`): ``{tool: {"precision",
    "recall", "recall_right", "kept", "kept_right", "gold", "gold_with_kept",
    "gold_with_right_kept"}}``. None when the documents have no gold calls or
    the run has no filter records."""
    run_dir = Path(run_dir)
    filt = read_stage(run_dir, "filter")
    if filt.state == "missing":
        return None
    matched = match_gold(filt.records, read_documents(run_dir))
    return None if matched is None else matched["per_tool"]


def candidate_gold(run_dir: str | Path) -> dict | None:
    """Per tool, every candidate the run's filter judged (kept or not) against the gold calls (a candidate whose
    call failed has no result and is not right): ``{tool: {"candidates", "right", "precision"}}``, from
    :func:`gold_summary`. How good the proposals were before the filter; None as for gold_summary."""
    summary = gold_summary(run_dir)
    if summary is None:
        return None
    return {t: {"candidates": c["candidates"], "right": c["candidates_right"], "precision": c["candidate_precision"]}
            for t, c in summary.items()}
