"""Scoring outputs against a task file: one function for the evaluate stage
and for ``toolformer score`` (any system's outputs), and the report of
``toolformer tasks check``."""

from __future__ import annotations

import json
from pathlib import Path

from toolformer.config.text import decode_utf8, parse_json
from toolformer.tasks.formats import FORMATS, KINDS, TaskData, TaskItem, detect_format
from toolformer.tasks.metrics import default_max_words, gold_fits, math_score, model_answer, qa_score
from toolformer.tools.calls import CallStyle, get_style, parse_calls


def score_output(item: TaskItem, output: str, kind: str, max_words: int, decimals: int,
                 style: CallStyle | None = None) -> dict:
    """One item: the answer read from ``output`` (calls removed, an unclosed call cut) against its gold. An output
    the scorer cannot read is wrong, with ``score_error`` saying why: one item never stops an evaluation."""
    answer, malformed = model_answer(output, style)
    gold: str | list[str] = item.answers[0] if kind == "math" else item.answers
    try:
        if kind == "math":
            pred, correct = math_score(answer, item.answers[0], decimals)
        else:
            pred, correct = qa_score(answer, item.answers, max_words)
    except (ValueError, ArithmeticError, RecursionError) as e:
        return {"id": item.id, "prediction": None, "gold": gold, "correct": False, "malformed_call": malformed,
                "score_error": f"{type(e).__name__}: {e}"[:300]}
    return {"id": item.id, "prediction": pred, "gold": gold, "correct": correct, "malformed_call": malformed}


def holds_call(output: str, style: CallStyle | None = None) -> bool:
    """Whether ``output`` holds a call the model started: closed, closed without its result, or with its input
    never closed. The call rate of the evaluate stage and of ``toolformer tasks lmeval``'s tasks is the mean of this
    over the items."""
    style = style or get_style("plain")
    return bool(parse_calls(output, style)) or model_answer(output, style)[1]


def score_counts(records: list[dict]) -> dict:
    """Items scored, correct, accuracy and malformed calls of one system's per-item results."""
    n = len(records)
    correct = sum(bool(r["correct"]) for r in records)
    return {"scored": n, "correct": correct, "accuracy": correct / n if n else None,
            "malformed_calls": sum(bool(r.get("malformed_call")) for r in records)}


# Malformed calls, by kind: the error codes of a call record (toolformer.lm.generate, the sandbox, the tools) that
# say the call itself was wrong, not that a well-formed call found no result (not_found, division_by_zero ...).
MALFORMED_KINDS = {
    "unknown_tool": ("unknown_tool",),
    "unparsable_input": ("unparseable", "invalid_arguments", "syntax", "not_arithmetic", "empty", "too_long"),
    "no_result_marker": ("no_result_marker",),
}


def call_counts(records: list[dict], style: CallStyle | None = None) -> dict:
    """Calls of one system's per-item results and the malformed ones by kind: unknown tool, unparsable input,
    closed without the result marker, unclosed; ``malformed_per_100_calls`` is their sum per 100 calls (None
    without calls). An item's calls are its ``calls`` (those the decoder ran or refused) and the calls left
    open in its ``output``, which are not among them: one whose input never closed (``malformed_call``,
    ``[QA(Who``) and one whose input closed but whose result marker never came (``[QA(Who?)`` at the end)."""
    style = style or get_style("plain")
    by_code: dict[str | None, str] = {code: kind for kind, codes in MALFORMED_KINDS.items() for code in codes}
    malformed = dict.fromkeys([*MALFORMED_KINDS, "unclosed"], 0)
    calls = 0
    for r in records:
        for c in r.get("calls") or []:
            calls += 1
            kind = by_code.get((c.get("error") or {}).get("code"))
            if kind is not None:
                malformed[kind] += 1
        unclosed = int(bool(r.get("malformed_call")))
        unclosed += sum(not pc.closed for pc in parse_calls(r.get("output") or "", style))
        calls += unclosed
        malformed["unclosed"] += unclosed
    return _call_summary(calls, malformed)


def merge_call_counts(counts: list[dict]) -> dict:
    """:func:`call_counts` of several sets of results (a row's tasks) together."""
    malformed = {k: sum(c["malformed"][k] for c in counts) for k in [*MALFORMED_KINDS, "unclosed"]}
    return _call_summary(sum(c["calls"] for c in counts), malformed)


def _call_summary(calls: int, malformed: dict[str, int]) -> dict:
    total = sum(malformed.values())
    return {"calls": calls, "malformed": malformed,
            "malformed_per_100_calls": round(100 * total / calls, 2) if calls else None}


def file_counts(data: TaskData, kind: str, max_words: int) -> dict:
    """Records in the file, skipped (with reasons); for QA, the golds longer than the word window (no
    output can match them)."""
    out = {"in_file": data.total, "skipped": len(data.skipped), "skip_reasons": data.reasons()}
    if kind == "qa":
        out["golds_longer_than_window"] = sum(not gold_fits(i.answers, max_words) for i in data.items)
    return out


def task_counts(data: TaskData, records: list[dict], kind: str, max_words: int) -> dict:
    """:func:`file_counts` and :func:`score_counts` together."""
    return {**file_counts(data, kind, max_words), **score_counts(records)}


def check_report(path: Path, fmt: str = "auto") -> dict:
    """What ``toolformer tasks check`` prints: format, records, items, skips by reason with examples."""
    fmt = detect_format(path) if fmt == "auto" else fmt
    if fmt not in FORMATS:
        raise ValueError(f"{path}: unknown task format {fmt!r} (known: auto, {', '.join(FORMATS)})")
    data = FORMATS[fmt](path)
    examples: dict[str, list[dict]] = {}
    for s in data.skipped:
        examples.setdefault(s["reason"], [])
        if len(examples[s["reason"]]) < 3:
            examples[s["reason"]].append(s)
    return {"file": str(path), "format": fmt, "kind": KINDS[fmt], "in_file": data.total, "loaded": len(data.items),
            "skipped": len(data.skipped), "skip_reasons": data.reasons(), "examples": examples,
            "first_item": data.items[0].__dict__ if data.items else None}


def read_predictions(path: Path) -> tuple[dict[str, str], list[str]]:
    """id -> output of a JSONL file of ``{"id", "output"}`` (split at ``\\n`` only), and the lines not used."""
    outputs: dict[str, str] = {}
    problems: list[str] = []
    for n, line in enumerate(decode_utf8(path.read_bytes(), path).split("\n"), 1):
        if not line.strip():
            continue
        try:
            rec = parse_json(line, long_ints_as_text=True)
        except json.JSONDecodeError as e:
            problems.append(f"{path}: line {n}: invalid JSON: {e.msg}")
            continue
        if not isinstance(rec, dict) or "id" not in rec or not isinstance(rec.get("output"), str):
            problems.append(f'{path}: line {n}: expected {{"id", "output": text}}')
        elif str(rec["id"]) in outputs:
            problems.append(f"{path}: line {n}: id {rec['id']!r} again (the first is used)")
        else:
            outputs[str(rec["id"])] = rec["output"]
    return outputs, problems


def score_file(data: TaskData, outputs: dict[str, str], kind: str, fmt: str, max_words: int = 0,
               decimals: int = 2, style: CallStyle | None = None) -> tuple[list[dict], dict]:
    """Per-item results and counts for ``outputs`` (id -> text) on every item of ``data``; an item
    without an output counts as wrong."""
    window = max_words or default_max_words(fmt)
    records = []
    for item in data.items:
        if item.id in outputs:
            records.append({**score_output(item, outputs[item.id], kind, window, decimals, style),
                            "output": outputs[item.id]})
        else:
            records.append({"id": item.id, "prediction": None, "gold": item.answers if kind == "qa" else
                            item.answers[0], "correct": False, "malformed_call": False, "output": None})
    counts = task_counts(data, records, kind, window)
    item_ids = {i.id for i in data.items}
    counts["without_output"] = sum(r["output"] is None for r in records)
    counts["outputs_not_in_file"] = sum(i not in item_ids for i in outputs)
    return records, counts
