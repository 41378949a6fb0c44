"""Reading a run folder for ``toolformer inspect``: stages, call records, the
funnel per tool, the distribution of L⁻ − L⁺ and calls shown in their
sentence. The kept calls against gold calls are in :mod:`toolformer.inspect.gold`,
one whole inspection in :mod:`toolformer.inspect.inspection`.

Pure data, no printing: :mod:`toolformer.stages.inspect` prints it and
:mod:`toolformer.inspect.report` writes the HTML pages. Works on whatever call stages
exist (sample only, sample + execute, or a full run) and on a stage that was
interrupted (shards but no manifest, "partial").
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from toolformer.config.load import ConfigError, load_config
from toolformer.config.schema import PipelineConfig
from toolformer.corpus.records import margin, read_records, scored_margin
from toolformer.rundir.files import read_jsonl
from toolformer.rundir.folder import DOCUMENTS, MANIFEST

CALL_STAGES = ("sample", "execute", "filter")
LATER_STAGES = ("build", "finetune", "evaluate")
# Funnel steps, in order, and how each is shown.
STEPS = ("documents", "positions", "candidates", "executed_ok", "kept")
STEP_LABELS = {
    "documents": "documents passing pre-filter",
    "positions": "positions kept",
    "candidates": "candidate calls",
    "executed_ok": "executed without error",
    "kept": "kept (L⁻ − L⁺ ≥ tau_f)",
}
QUANTILES = (("min", 0.0), ("p10", 0.10), ("p25", 0.25), ("p50", 0.50), ("p75", 0.75), ("p90", 0.90), ("max", 1.0))
KEPT_CHOICES = ("yes", "no", "all")


@dataclass
class StageState:
    name: str
    state: str  # complete (manifest), partial (shards, no manifest) or missing
    manifest: dict | None = None
    records: list[dict] = field(default_factory=list)

    def per_tool(self, tool: str) -> dict:
        counts = (self.manifest or {}).get("counts") or {}
        return (counts.get("per_tool") or {}).get(tool) or {}


def read_stage(run_dir: Path, name: str) -> StageState:
    d = run_dir / name
    manifest_path = d / MANIFEST
    manifest = None
    if manifest_path.exists():
        try:
            manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as e:
            raise ValueError(f"{manifest_path}: invalid JSON: {e.msg}") from None
    shards = sorted(d.glob("shard-*.jsonl")) if name in CALL_STAGES else []
    records = [r for s in shards for _, r in read_records(s, name)]
    state = "complete" if manifest is not None else ("partial" if shards else "missing")
    return StageState(name, state, manifest, records)


def status(rec: dict, stage: str) -> str:
    """kept, rejected (scored, below tau_f), failed (execution error),
    unscored (executed, no filter record) or pending (not executed)."""
    if stage == "sample":
        return "pending"
    if rec.get("error") is not None:
        return "failed"
    if stage == "execute" or margin(rec) is None:
        return "unscored"
    return "kept" if rec.get("kept") else "rejected"


@dataclass
class RunView:
    """Everything inspect reads from one run folder."""

    run_dir: Path
    stages: dict[str, StageState]
    documents: dict[str, dict]  # doc_id -> {"doc_id", "text", "date"}, corpus order
    calls: list[dict]  # records of the furthest call stage that has any
    calls_stage: str
    tools: list[str]
    later: dict[str, str]  # build / finetune / evaluate -> complete | missing

    @property
    def missing(self) -> list[str]:
        return [s for s in CALL_STAGES if self.stages[s].state == "missing"]


def load_run(run_dir: str | Path) -> RunView:
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise FileNotFoundError(f"{run_dir}: no such run folder")
    stages = {s: read_stage(run_dir, s) for s in CALL_STAGES}
    if stages["sample"].state == "missing" and not (run_dir / "sample" / DOCUMENTS).exists():
        raise FileNotFoundError(f"{run_dir}: no sample stage (sample/{MANIFEST} or shards); nothing to inspect")
    doc_path = run_dir / "sample" / DOCUMENTS
    documents = {}
    if doc_path.exists():
        documents = {d["doc_id"]: d for d in read_jsonl(doc_path, ("doc_id", "text"))}
    calls_stage = next((s for s in reversed(CALL_STAGES) if stages[s].records), "sample")
    tools: list[str] = []
    for s in CALL_STAGES:
        for t in ((stages[s].manifest or {}).get("counts") or {}).get("per_tool") or {}:
            tools.append(t)
        tools.extend(r["tool"] for r in stages[s].records)
    later = {s: "complete" if (run_dir / s / MANIFEST).exists() else "missing" for s in LATER_STAGES}
    return RunView(run_dir, stages, documents, stages[calls_stage].records, calls_stage, list(dict.fromkeys(tools)),
                   later)


def run_config(cfg: PipelineConfig) -> tuple[PipelineConfig, str | None]:
    """The config the run in ``cfg.run_dir`` saved (``config.yaml``, written by
    ``run`` and ``demo``), else ``cfg``; plus a note when the saved file
    cannot be read (``cfg`` is used then)."""
    saved = Path(cfg.run_dir) / "config.yaml"
    if not saved.exists():
        return cfg, None
    try:
        return load_config(PipelineConfig, saved), None
    except ConfigError as e:
        return cfg, f"{e}; using the current config"


# -- the funnel -----------------------------------------------------------------
def _step(step: str, count: int | None, source: str, previous: int | None) -> dict:
    """One funnel row; ``of_previous`` is a share for subsets (documents,
    executed, kept) and a mean for expansions (positions per document,
    candidates per position)."""
    ratio = None
    if count is not None and previous:
        ratio = count / previous
    unit = "per document" if step == "positions" else "per position" if step == "candidates" else "share"
    return {"step": step, "label": STEP_LABELS[step], "count": count, "source": source,
            "of_previous": ratio, "unit": unit}


def _pick(stage: StageState, tool: str, key: str, from_records: int, warnings: list[str], exact: bool = True):
    """The manifest's count, cross-checked against the records; the record
    count when the stage has no manifest; None when the stage is missing."""
    if stage.state == "missing":
        return None, "missing"
    if stage.state == "partial":
        return from_records, "records (stage partial)"
    value = stage.per_tool(tool).get(key)
    if value is None:
        warnings.append(f"{stage.name}/{MANIFEST}: no counts.per_tool.{tool}.{key}; "
                        f"using the records ({from_records:,})")
        return from_records, "records"
    if (exact and value != from_records) or (not exact and value < from_records):
        rel = "" if exact else "at least "
        warnings.append(f"{stage.name}: {tool} {key}: manifest says {value:,}, "
                        f"shard records give {rel}{from_records:,}")
    return int(value), "manifest"


READ_AHEAD_SHOWN = 5  # candidates per tool that read ahead of their position, in funnel.json


def passes_tau(r: dict) -> bool:
    """The filter record's L⁻ − L⁺ ≥ tau_filter (the paper's criterion, before filter.lookahead)."""
    m = margin(r)
    return m is not None and m >= r["tau_filter"] - 1e-9


def error_codes(records: list[dict]) -> dict[str, int]:
    """How many execute records failed with each error code, the most frequent first."""
    errors: dict[str, int] = {}
    for r in records:
        if r["error"] is not None:
            code = str(r["error"].get("code", "error")) if isinstance(r["error"], dict) else "error"
            errors[code] = errors.get(code, 0) + 1
    return dict(sorted(errors.items(), key=lambda kv: -kv[1]))


def compute_funnel(view: RunView) -> dict:
    """Counts per tool from the manifests, cross-checked against the records."""
    warnings: list[str] = []
    sample, execute, filt = (view.stages[s] for s in CALL_STAGES)
    sample_counts = (sample.manifest or {}).get("counts") or {}
    scored_docs = len(view.documents) if view.documents else sample_counts.get("documents")
    per_tool = {}
    for tool in view.tools:
        s_recs = [r for r in sample.records if r["tool"] == tool]
        e_recs = [r for r in execute.records if r["tool"] == tool]
        f_recs = [r for r in filt.records if r["tool"] == tool]
        docs, docs_src = _pick(sample, tool, "documents", len({r["doc_id"] for r in s_recs}), warnings, exact=False)
        positions = len({(r["doc_id"], r["position"]) for r in s_recs})
        pos, pos_src = _pick(sample, tool, "positions", positions, warnings, exact=False)
        cands, cands_src = _pick(sample, tool, "candidates", len(s_recs), warnings)
        ok, ok_src = _pick(execute, tool, "ok", sum(r["error"] is None for r in e_recs), warnings)
        failed, _ = _pick(execute, tool, "failed", sum(r["error"] is not None for r in e_recs), warnings)
        kept, kept_src = _pick(filt, tool, "kept", sum(bool(r["kept"]) for r in f_recs), warnings)
        scored, _ = _pick(filt, tool, "scored", sum(margin(r) is not None for r in f_recs), warnings)
        if execute.state == "complete":
            _pick(execute, tool, "candidates", len(e_recs), warnings)
        if filt.state == "complete":
            _pick(filt, tool, "candidates", len(f_recs), warnings)
        for later, n in (("execute", len(e_recs) if execute.state == "complete" else None),
                         ("filter", len(f_recs) if filt.state == "complete" else None)):
            if n is not None and cands is not None and sample.state == "complete" and n != cands:
                warnings.append(f"{later}: {tool}: {n:,} records but sample has {cands:,} candidates")
        taus = {t for r in f_recs if (t := r.get("tau_filter")) is not None}
        drop = (filt.manifest or {}).get("lookahead") == "drop"
        wrong = sum(bool(r["kept"]) != (passes_tau(r) and not (drop and r.get("read_ahead")))
                    for r in f_recs if r.get("tau_filter") is not None)
        ahead = [r for r in f_recs if r.get("tau_filter") is not None and passes_tau(r) and r.get("read_ahead")]
        read_ahead, _ = _pick(filt, tool, "read_ahead", len(ahead), warnings)
        if wrong:
            warnings.append(f"filter: {tool}: {wrong:,} records whose `kept` disagrees with L⁻ − L⁺ ≥ tau_filter")
        counts = [(docs, docs_src), (pos, pos_src), (cands, cands_src), (ok, ok_src), (kept, kept_src)]
        prev_of = [scored_docs, docs, pos, cands, ok]
        steps = [_step(st, c, src, p) for st, (c, src), p in zip(STEPS, counts, prev_of)]
        per_tool[tool] = {
            "steps": steps,
            "counts": {st: c for st, (c, _) in zip(STEPS, counts)} | {"failed": failed, "scored": scored,
                                                                        "read_ahead": read_ahead},
            "read_ahead": {"mode": (filt.manifest or {}).get("lookahead"), "examples": [
                {k: r[k] for k in ("doc_id", "char_start", "input", "read_ahead")} for r in ahead[:READ_AHEAD_SHOWN]]},
            "tau_filter": next(iter(taus)) if len(taus) == 1 else (sorted(taus) or None),
            "errors": error_codes(e_recs),
        }
    return {
        "run_dir": str(view.run_dir),
        "documents_scored": scored_docs,
        "stages": {s: view.stages[s].state for s in CALL_STAGES} | view.later,
        "missing": view.missing,
        "calls_from": view.calls_stage,
        "per_tool": per_tool,
        "warnings": warnings,
    }


# -- selection, margins, rankings --------------------------------------------------
def select(view: RunView, tool: str | None = None, kept: str = "all",
           min_margin: float | None = None, max_margin: float | None = None) -> list[dict]:
    """The calls the filters let through (in record order)."""
    if kept not in KEPT_CHOICES:
        raise ValueError(f"kept: {kept!r} is not one of {', '.join(KEPT_CHOICES)}")
    if tool is not None and tool not in view.tools:
        raise ValueError(f"tool {tool!r} is not in {view.run_dir} (tools: {', '.join(view.tools) or 'none'})")
    if min_margin is not None and max_margin is not None and min_margin > max_margin:
        raise ValueError(f"--min-margin {min_margin} is above --max-margin {max_margin}")
    out = []
    for r in view.calls:
        if tool is not None and r["tool"] != tool:
            continue
        if kept != "all" and bool(r.get("kept")) != (kept == "yes"):
            continue
        if min_margin is not None or max_margin is not None:
            m = margin(r)
            if m is None or (min_margin is not None and m < min_margin) or (max_margin is not None and m > max_margin):
                continue
        out.append(r)
    return out


def margin_quantiles(margins: list[float]) -> dict | None:
    """min, 10, 25, 50, 75, 90 %, max of L⁻ − L⁺ (None without margins)."""
    if not margins:
        return None
    qs = np.quantile(np.asarray(margins, dtype=np.float64), [q for _, q in QUANTILES])
    return {"n": len(margins), **{name: float(v) for (name, _), v in zip(QUANTILES, qs)}}


def ranking(calls: list[dict], n: int, kept: str = "all") -> tuple[list[dict], list[dict]]:
    """Top and bottom ``n`` calls by L⁻ − L⁺: kept calls, or rejected ones when
    ``kept == "no"``. The bottom list starts with the lowest margin and never
    repeats a call of the top list."""
    want = kept != "no"
    pool = sorted((r for r in calls if margin(r) is not None and bool(r.get("kept")) == want),
                  key=scored_margin, reverse=True)
    top = pool[:n]
    bottom = pool[max(n, len(pool) - n):][::-1]
    return top, bottom


def by_tool(calls: list[dict], tools: list[str]) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {t: [] for t in tools}
    for r in calls:
        out.setdefault(r["tool"], []).append(r)
    return out


# -- text ----------------------------------------------------------------------------
_SENTENCE_ENDS = (". ", "! ", "? ", "\n")


def sentence_around(text: str, char_start: int, width: int) -> tuple[int, int]:
    """[start, end) of the sentence around ``char_start``, at most ``width``
    characters on each side."""
    lo = max(0, char_start - width)
    before = text[lo:char_start]
    cut = max(before.rfind(e) + len(e) if before.rfind(e) != -1 else -1 for e in _SENTENCE_ENDS)
    start = lo + cut if cut != -1 else lo
    hi = min(len(text), char_start + width)
    after = text[char_start:hi]
    ends = [after.find(e) for e in _SENTENCE_ENDS if after.find(e) != -1]
    end = char_start + min(ends) + 1 if ends else hi
    return start, end


def call_text(rec: dict, style) -> str:
    """e(c, r) as the filter rendered it, else rendered here (e(c) without a result)."""
    if rec.get("call_text"):
        return rec["call_text"]
    return style.render(rec["tool"], rec["input"], rec.get("result"))


def in_context(doc_text: str | None, rec: dict, style, separator: str, width: int) -> tuple[str, str, str]:
    """(before, call, after): the call inserted inline in its sentence, as
    ``insert_calls`` would place it."""
    call = call_text(rec, style)
    if doc_text is None:
        return "", call, ""
    pos = min(max(0, int(rec["char_start"])), len(doc_text))
    s, e = sentence_around(doc_text, pos, width)
    before = ("…" if s > 0 and doc_text[s - 1] not in ".!?\n " else "") + doc_text[s:pos]
    after = separator + doc_text[pos:e] + ("…" if e < len(doc_text) and doc_text[e - 1] not in ".!?\n" else "")
    return before.lstrip(), call, after.rstrip()
