"""Preflight, the sampler's view: p(call start) over the first documents as the sample stage scores them, a few
calls sampled with the stage's own sampler (do they parse, close and pass the tool's JSON Schema?), the rule
proposers' candidates, and a small filter probe (a few candidates executed and scored with the filter's own
scorer, once with their results and once with another candidate's result).

Everything here calls the stage code (:func:`~toolformer.stages.sample.make_samplers`,
:meth:`~toolformer.lm.sampler.Sampler.score_positions`, :func:`~toolformer.stages.sample.top_positions`,
:func:`~toolformer.stages.proposers.propose`, :class:`~toolformer.stages.filter.CandidateScorer`,
:func:`~toolformer.tools.sandbox.build_sandbox`); nothing is written anywhere.
"""

from __future__ import annotations

import dataclasses
import random
import time
from collections import Counter
from dataclasses import dataclass, field

import numpy as np
import torch

from toolformer.config.schema import PipelineConfig
from toolformer.corpus.reader import iter_corpus
from toolformer.corpus.windows import pieces, split_windows
from toolformer.lm.modeling import model_window
from toolformer.lm.textpos import TokenizedText, tokenize_text
from toolformer.stages.filter import CandidateScorer
from toolformer.stages.proposers import RULE_TOOLS, passes_prefilter, propose
from toolformer.stages.sample import ANY_TOOL, ToolSettings, make_samplers, top_positions, window_tokens
from toolformer.tools import Tool, render_prompt
from toolformer.tools.calls import get_style, parse_calls
from toolformer.tools.sandbox import build_sandbox, check_arguments, schema_validator

SAMPLE_POSITIONS = 2  # kept positions per document where calls are sampled
READS_RESULTS = 2.0  # a model reads results when it keeps more than this many times as many calls with their own
# results as with another document's


@dataclass
class Scan:
    """The first documents of the corpus, cut into the sample stage's windows and tokenized."""

    documents: int  # corpus documents read
    exhausted: bool  # the corpus has no more
    windows: list[dict]
    tokenized: list[TokenizedText]
    max_tokens: int  # window length in tokens
    prompt: str  # the sampler's P(x): few-shot, none, or none because the prompt does not fit
    note: str = ""
    rejected: int = 0


@dataclass
class ToolView:
    """What one tool's sample stage would see on the scanned documents."""

    keep: list[int] = field(default_factory=list)  # the windows passing the tool's pre-filter
    scores: list[list[float]] = field(default_factory=list)  # p(call start) per position, per window
    kept: list[list[int]] = field(default_factory=list)  # the top-k positions over tau_s, per window
    samples: Counter = field(default_factory=Counter)  # drawn, parsed, closed, valid
    valid: list[tuple[int, int, str]] = field(default_factory=list)  # distinct (window, position, input)
    rules: list[tuple[int, int, str]] = field(default_factory=list)  # rule candidates (window, position, input)
    seconds: float = 0.0  # wall time of the sampled calls (the sampler's generation, rows forwarded in)


def scan_corpus(cfg: PipelineConfig, tok, model, tools: dict[str, Tool], n_docs: int) -> Scan:
    """The first ``n_docs`` documents in the sampler's windows (room for the prompt, a copy of the text and a
    call; a stage where only rules propose cuts longer windows, with the same candidates per document). When the
    few-shot prompts do not fit the model window, the windows of the sampler without a prompt (p(call start)
    from the text alone)."""
    rejected: list[dict] = []
    docs: list[dict] = []
    exhausted = True
    for doc in iter_corpus(cfg.corpus, rejected):
        if len(docs) == n_docs:
            exhausted = False
            break
        docs.append(doc)
    if not docs:
        raise ValueError(f"{cfg.corpus.path}: no usable documents ({len(rejected)} rejected)")
    window = model_window(model, cfg.model)
    prompt, note = cfg.sample.prompt, ""
    prompts = [t.prompt for t in tools.values() if t.prompt]
    try:
        if not prompts and prompt != "none":
            raise ValueError("no enabled tool has a few-shot prompt")
        max_tokens = window_tokens(cfg, tok, window, True, prompts)
    except ValueError as e:
        prompt, note = "none", f"{e}: p(call start) is scored on the text alone (P(x) = x)"
        max_tokens = window_tokens(free_config(cfg), tok, window, True, [])
    windows = split_windows([p for d in docs for p in pieces(d, cfg.corpus.max_doc_chars)], tok, max_tokens)
    return Scan(len(docs), exhausted, windows, [tokenize_text(tok, w["text"]) for w in windows], max_tokens,
                prompt, note, len(rejected))


def free_config(cfg: PipelineConfig) -> PipelineConfig:
    """``cfg`` with the sampler without a prompt (``sample.prompt: none``)."""
    return dataclasses.replace(cfg, sample=dataclasses.replace(cfg.sample, prompt="none"))


def view_samplers(cfg: PipelineConfig, scan: Scan, settings: dict[str, ToolSettings], tools: dict[str, Tool], model,
                  tok) -> dict:
    """The stage's samplers for every tool (rule tools too: their p(call start) is reported), with the prompt
    the scan settled on."""
    every = {t: s._replace(method="sampler") for t, s in settings.items()}
    view_cfg = free_config(cfg) if scan.prompt == "none" else cfg
    usable = {t: tools[t] for t in every if scan.prompt == "none" or tools[t].prompt}
    return make_samplers(view_cfg, {t: every[t] for t in usable}, usable, model, tok)


def tool_windows(cfg: PipelineConfig, scan: Scan, rules: str) -> list[int]:
    """The windows that pass a tool's pre-filter (all with ``sample.prefilter: false``)."""
    return [j for j, w in enumerate(scan.windows)
            if not cfg.sample.prefilter or passes_prefilter(rules, w, scan.tokenized[j])]


def score_views(cfg: PipelineConfig, scan: Scan, settings: dict[str, ToolSettings],
                samplers: dict) -> dict[str, ToolView]:
    """p(call start) at every position of each tool's windows, and its kept positions (p_i > tau_s, top k)."""
    views = {t: ToolView() for t in settings}
    shared: dict[int, list[float]] = {}
    if ANY_TOOL in samplers:  # without a prompt one pass serves every tool
        every = sorted({j for t, s in settings.items() for j in tool_windows(cfg, scan, s.rules)})
        scores = samplers[ANY_TOOL].score_positions([(scan.windows[j]["text"], scan.tokenized[j]) for j in every],
                                                    cfg.sample.batch_tokens)
        shared = dict(zip(every, scores))
    for tool, s in settings.items():
        view = views[tool]
        keep = view.keep = tool_windows(cfg, scan, s.rules)
        sampler = samplers.get(tool)
        if shared:
            view.scores = [shared[j] for j in keep]
        elif sampler is not None and keep:
            view.scores = sampler.score_positions([(scan.windows[j]["text"], scan.tokenized[j]) for j in keep],
                                                  cfg.sample.batch_tokens)
        view.kept = [top_positions(ps, s.tau, s.top_k) for ps in view.scores]
        if s.rules in RULE_TOOLS:
            limit = cfg.sample.max_rule_candidates
            view.rules = [(j, p.position, p.input) for j in keep
                          for p in propose(s.rules, scan.windows[j]["text"], scan.tokenized[j], limit)]
    return views


def p_stats(view: ToolView, tau: float) -> dict | None:
    """Percentiles of p(call start) over every scored position, the share above tau_s, kept positions per window."""
    flat = np.array([p for ps in view.scores for p in ps], dtype=np.float64)
    if not flat.size:
        return None
    q = np.percentile(flat, [50, 90, 99])
    return {"positions": int(flat.size), "p50": float(q[0]), "p90": float(q[1]), "p99": float(q[2]),
            "max": float(flat.max()), "above_tau": float((flat > tau).mean()),
            "kept_per_window": float(np.mean([len(k) for k in view.kept])) if view.kept else 0.0}


def classify(sampler, style, tool: str, tokens: list[int], built: Tool, validator,
             max_chars: int) -> tuple[bool, bool, bool, str]:
    """(parsed, closed, valid, input) of one sampled call: the text names ``tool`` with balanced parentheses;
    it ends at the call-end marker as the sample stage accepts it; its input passes the tool's JSON Schema and
    the sandbox's length cap."""
    raw = parse_calls(style.start + sampler.tok.decode(tokens), style, {tool})
    parsed = bool(raw) and raw[0].start == 0
    text = sampler.call_text(tokens)
    calls = parse_calls(style.start + text, style, {tool}) if text else []
    closed = parsed and bool(calls) and calls[0].start == 0 and calls[0].closed \
        and (calls[0].call.result is None or sampler.free)
    if not closed:
        return parsed, False, False, ""
    tool_input = calls[0].call.input
    valid = len(tool_input) <= max_chars and check_arguments(built, tool_input, validator) is None
    return parsed, True, valid, tool_input


def sample_view(cfg: PipelineConfig, scan: Scan, tool: str, view: ToolView, sampler, built: Tool, m: int,
                n_windows: int) -> None:
    """Calls sampled at up to :data:`SAMPLE_POSITIONS` kept positions x m in the first ``n_windows`` windows
    that keep a position, with the sampler's own generation; counted into ``view.samples``."""
    style = get_style(cfg.calls.style)
    validator = schema_validator(built)
    gen = torch.Generator().manual_seed(cfg.seed)
    picked = [(j, sorted(ps, key=lambda i: -view.scores[n][i])[:SAMPLE_POSITIONS])
              for n, (j, ps) in enumerate(zip(view.keep, view.kept)) if ps][:n_windows]
    seen = set()
    for group in _sample_groups(cfg, scan, sampler, picked, m):
        docs = [(scan.windows[j]["text"], scan.tokenized[j]) for j, _ in group]
        # The sampler's own generation; sample_any would drop the samples that do not parse, which are counted here.
        # Its wall time per sample is what the work estimate projects the stage's sampling from.
        t0 = time.perf_counter()
        drawn = sampler.sample_rows(sampler.prompt_rows(docs), [[(i, m) for i in ps] for _, ps in group],
                                     [scan.tokenized[j].ids for j, _ in group], cfg.sample.max_new_tokens,
                                     cfg.sample.temperature, gen)
        view.seconds += time.perf_counter() - t0
        for (j, _), samples in zip(group, drawn):
            for i, tokens in samples:
                parsed, closed, valid, tool_input = classify(sampler, style, tool, tokens, built, validator,
                                                             cfg.tools.max_input_chars)
                view.samples.update(drawn=1, parsed=int(parsed), closed=int(closed), valid=int(valid))
                if valid and (j, i, tool_input) not in seen:
                    seen.add((j, i, tool_input))
                    view.valid.append((j, i, tool_input))
    view.samples["windows"] = len(picked)


def _sample_groups(cfg: PipelineConfig, scan: Scan, sampler, picked: list[tuple[int, list[int]]],
                   m: int) -> list[list[tuple[int, list[int]]]]:
    """``picked`` windows in groups whose samples fit ``sample.batch_tokens`` (rows x (row + new tokens)), as the
    sample stage batches them; a window alone may exceed it."""
    groups: list[list[tuple[int, list[int]]]] = []
    used = 0
    for j, positions in picked:
        row = len(sampler.prompt_rows([(scan.windows[j]["text"], scan.tokenized[j])])[0][0])
        cost = len(positions) * m * (row + cfg.sample.max_new_tokens)
        if not groups or used + cost > cfg.sample.batch_tokens:
            groups.append([])
            used = 0
        groups[-1].append((j, positions))
        used += cost
    return groups


def prompt_tokens(cfg: PipelineConfig, tok, tool: Tool) -> int:
    """Tokens of the tool's few-shot prompt around an empty text."""
    return len(tok(render_prompt(tool, "", get_style(cfg.calls.style)), add_special_tokens=False)["input_ids"])


def probe_candidates(cfg: PipelineConfig, views: dict[str, ToolView], settings: dict[str, ToolSettings],
                     n_probe: int) -> dict[str, list[tuple[int, int, str, str]]]:
    """Up to ``n_probe`` candidates per tool, drawn by seed from the sources its ``sample.method`` uses:
    (window, position, input, source)."""
    rng = random.Random(cfg.seed)
    out = {}
    for tool, view in views.items():
        method = settings[tool].method
        pool = [(*c, "rules") for c in view.rules] if method in ("rules", "both") else []
        pool += [(*c, "sampler") for c in view.valid] if method in ("sampler", "both") else []
        out[tool] = rng.sample(pool, min(n_probe, len(pool)))
    return out


def run_probe(cfg: PipelineConfig, scan: Scan, candidates: dict[str, list[tuple[int, int, str, str]]],
              tools: dict[str, Tool], model, tok) -> dict[str, dict]:
    """Execute the candidates (the sandbox) and score them with the filter's scorer, with their results and with
    another document's result; per tool: probed, ok (with a result), errors, kept, controls (calls also scored
    with another document's result), kept_controls and kept_wrong_result (of those, kept with their own result and
    with the other one), the best margin L- - L+ and the largest change of L+ from one result to the other."""
    records = [{"doc_id": scan.windows[j]["doc_id"], "tool": t, "input": x, "position": i,
                "char_start": scan.tokenized[j].char_starts[i], "p_i": None, "source": s}
               for t, cs in candidates.items() for j, i, x, s in cs]
    t0 = time.perf_counter()
    sandbox = build_sandbox(cfg, tools)  # closing it releases the tools (stops MCP servers)
    try:
        dates = {w["doc_id"]: w.get("date") for w in scan.windows}
        outcomes = sandbox.run_many([(r["tool"], r["input"], dates[r["doc_id"]]) for r in records])
    finally:
        sandbox.close()
    executed = time.perf_counter() - t0
    executed_records = [{**r, "result": o.result, "error": o.error} for r, o in zip(records, outcomes)]
    wrong = swapped_results(executed_records)
    t0 = time.perf_counter()
    scorer = CandidateScorer(cfg, model, tok, {w["doc_id"]: w for w in scan.windows}, all_losses=True)
    scored: list[dict] = list(scorer.score(executed_records + [w for w in wrong if w is not None]))  # type: ignore
    filtered = time.perf_counter() - t0
    true_rows, wrong_rows = scored[: len(records)], iter(scored[len(records):])
    pairs: list[tuple[dict, dict | None]] = [(r, next(wrong_rows) if w is not None else None)
                                             for r, w in zip(true_rows, wrong)]
    report = {t: probe_counts([p for p in pairs if p[0]["tool"] == t]) for t in candidates}
    for t in report:
        report[t]["seconds"] = {"execute": executed * report[t]["probed"] / max(1, len(records)),
                                "filter": filtered * report[t]["probed"] / max(1, len(records))}
    return report


def swapped_results(records: list[dict]) -> list[dict | None]:
    """Each executed record with the result of the next record of its tool from another document whose result
    differs (another document: its result is not the answer at this position); None when there is none or the
    record has no result."""
    by_tool: dict[str, list[int]] = {}
    for k, r in enumerate(records):
        if r["result"] is not None:
            by_tool.setdefault(r["tool"], []).append(k)
    out: list[dict | None] = [None] * len(records)
    for ks in by_tool.values():
        for n, k in enumerate(ks):
            others = (records[ks[(n + d) % len(ks)]] for d in range(1, len(ks)))
            other = next((o["result"] for o in others
                          if o["doc_id"] != records[k]["doc_id"] and o["result"] != records[k]["result"]), None)
            if other is not None:
                out[k] = {**records[k], "result": other}
    return out


def probe_counts(pairs: list[tuple[dict, dict | None]]) -> dict:
    """One tool's probe: counts over (record with its result, the same with another's result or None)."""
    scored = [r for r, _ in pairs if r["loss_plus"] is not None]
    controls = [(r, w) for r, w in pairs if w is not None and r["loss_plus"] is not None]
    effect = max((abs(w["loss_plus"] - r["loss_plus"]) for r, w in controls), default=None)
    errors = Counter(r["error"]["code"] for r, _ in pairs if r["error"] is not None)
    return {"probed": len(pairs), "ok": len(scored), "errors": dict(errors), "kept": sum(r["kept"] for r in scored),
            "controls": len(controls), "kept_controls": sum(r["kept"] for r, _ in controls),
            "kept_wrong_result": sum(w["kept"] for _, w in controls),
            "best_margin": max((r["loss_minus"] - r["loss_plus"] for r in scored), default=None),
            "result_effect": effect}
