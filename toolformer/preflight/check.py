"""``toolformer preflight``: before a GPU run, whether the config will keep any call, in minutes and read-only.

It loads the model and tokenizer as the stages do, reads the first ``--docs`` documents and reports

* the tokenizer: how the call markers tokenize in context (:mod:`toolformer.preflight.tokens`);
* the sampler's view per tool: p(call start) over those documents, a few sampled calls, the rule proposers'
  candidates and a small filter probe (:mod:`toolformer.preflight.sampler`);
* the work the config implies for the whole corpus and the hours per stage on this device
  (:mod:`toolformer.preflight.work`);
* a verdict per tool, :func:`verdict` (docs/design.md, "Preflight", has the thresholds).

Nothing is written: no run folder is claimed or touched.
"""

from __future__ import annotations

import json
import re
import sys
import time
from dataclasses import dataclass
from typing import Any

from toolformer.config.schema import PipelineConfig
from toolformer.lm.modeling import (
    DTYPES,
    load_model,
    load_tokenizer,
    model_window,
    resolve_device,
    resolve_dtype,
    set_threads,
    with_weights,
)
from toolformer.preflight.sampler import (
    READS_RESULTS,
    Scan,
    ToolView,
    p_stats,
    probe_candidates,
    prompt_tokens,
    run_probe,
    sample_view,
    scan_corpus,
    score_views,
    view_samplers,
)
from toolformer.preflight.tokens import check_tokenizer
from toolformer.preflight.work import (
    CALL_TOKENS,
    count_documents,
    estimate_work,
    machine_load,
    peak_memory,
    time_forward,
    time_generate,
)
from toolformer.rundir.parallel import ranks
from toolformer.stages.filter import tau_for
from toolformer.stages.proposers import RULE_TOOLS
from toolformer.stages.sample import ANY_TOOL, ToolSettings, check_tools, tool_settings
from toolformer.tools import build_tools, close_tools
from toolformer.tools.calls import add_call_tokens, get_style

FEW_KEPT = 500  # fewer kept calls projected for the whole corpus: "few calls"
FEW_KEPT_PER_100 = 1.0  # the same per 100 documents, when the corpus size is unknown
KEYS = ("config", "model", "corpus", "tokenizer", "sampler", "tools", "work", "timing", "ready", "seconds")
"""The keys of ``--json``'s object (README.md lists them; a test keeps them equal)."""
TOOL_KEYS = ("method", "windows", "p_call_start", "sampled", "rules", "probe", "projected", "verdict", "reason",
             "fix")
"""The keys of each tool's entry under ``tools``."""


@dataclass
class Loaded:
    """A loaded model and its tokenizer, where they run."""

    model: Any
    tok: Any
    device: str
    dtype: str


def load_checked(model_cfg, style) -> Loaded:
    """Model and tokenizer as :func:`toolformer.lm.modeling.load` loads them (the markers of a special style
    added), but without refusing a tokenizer that cannot write the markers: the report names that instead."""
    device = resolve_device(ranks().device(model_cfg.device))
    dtype = resolve_dtype(model_cfg.dtype, device)
    tok = load_tokenizer(model_cfg.tokenizer or model_cfg.path, None)
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    add_call_tokens(tok, None, style)
    model = load_model(model_cfg.path, device, dtype, tok)
    return Loaded(model, tok, str(device), str(dtype).removeprefix("torch."))


def run_preflight(cfg: PipelineConfig, n_docs: int = 100, n_probe: int = 128, sample_windows: int = 4,
                  config_path: str = "") -> dict:
    """The report (see the module docstring); its keys are :data:`KEYS`."""
    clock = Clock()
    set_threads(cfg.model.threads)
    style = get_style(cfg.calls.style)
    names = check_tools(cfg)
    tools = build_tools(cfg.tools, names)
    try:
        settings = {t: tool_settings(cfg, t, tools[t]) for t in names}
        sampler_cfg = with_weights(cfg.model, cfg.sample.model)
        lm = load_checked(sampler_cfg, style)
        tokens = check_tokenizer(lm.tok, style, {t: tools[t].example if tools[t].takes_input else "" for t in names},
                                 free=cfg.sample.prompt == "none")
        clock.lap("load")
        scan = scan_corpus(cfg, lm.tok, lm.model, tools, n_docs)
        clock.lap("read")
        views, sampler_note = sampler_views(cfg, scan, settings, tools, lm, tokens["start_ok"], sample_windows)
        clock.lap("sampler")
        prompt_len = max((prompt_tokens(cfg, lm.tok, tools[t]) for t in names if tools[t].prompt), default=0)
        timing = device_timing(cfg, lm, scan, prompt_len if scan.prompt != "none" else 0)
        probe_lm = filter_model(cfg, lm, style, sampler_cfg)
        if probe_lm is not lm:
            length = min(model_window(probe_lm.model, cfg.model), filter_row(cfg, scan))
            timing["filter_tokens_per_s"] = time_forward(probe_lm.model, length,
                                                         cfg.filter.batch_tokens)["tokens_per_s"]
        clock.lap("timing")
        probes = run_probe(cfg, scan, probe_candidates(cfg, views, settings, n_probe), tools, probe_lm.model,
                           probe_lm.tok)
        clock.lap("probe")
    finally:
        close_tools(tools)
    report = assemble(cfg, scan, settings, views, probes, timing, lm, tools)
    report.update(config=config_path, tokenizer=tokens,
                  sampler={"prompt": scan.prompt, "note": sampler_note or scan.note})
    report["seconds"] = clock.done()
    return {k: report[k] for k in KEYS}


class Clock:
    """Wall seconds of each phase, and in all."""

    def __init__(self) -> None:
        self.start = self.last = time.perf_counter()
        self.laps: dict[str, float] = {}

    def lap(self, name: str) -> None:
        now = time.perf_counter()
        self.laps[name] = round(now - self.last, 1)
        self.last = now

    def done(self) -> dict[str, float]:
        return {**self.laps, "total": round(time.perf_counter() - self.start, 1)}


def sampler_views(cfg: PipelineConfig, scan: Scan, settings: dict, tools: dict, lm: Loaded, start_ok: bool,
                  sample_windows: int) -> tuple[dict[str, ToolView], str]:
    """Each tool's view (p(call start), sampled calls, rule candidates), and a note when the sampler could not
    run (the call-start marker is no token, or no BOS for the sampler without a prompt)."""
    samplers, note = {}, ""
    if start_ok:
        try:
            samplers = view_samplers(cfg, scan, settings, tools, lm.model, lm.tok)
        except ValueError as e:
            note = f"the sampler cannot run: {e}"
    else:
        note = "the sampler cannot run: the call-start marker is not one token of the tokenizer"
    views = score_views(cfg, scan, settings, samplers)
    for tool, view in views.items():  # a rule tool's candidates are the rules': its own calls are not sampled
        sampler = samplers.get(ANY_TOOL, samplers.get(tool))
        if sampler is not None and settings[tool].method != "rules":
            sample_view(cfg, scan, tool, view, sampler, tools[tool], settings[tool].num_calls, sample_windows)
    return views, note


def filter_model(cfg: PipelineConfig, lm: Loaded, style, sampler_cfg) -> Loaded:
    """The filter's model: the sampler's unless ``filter.model`` names others (then loaded; the sampler's is
    dropped) or ``filter.dtype`` asks for another dtype (the same weights, converted)."""
    filter_cfg = with_weights(cfg.model, cfg.filter.model)
    if filter_cfg.path != sampler_cfg.path:
        lm = load_checked(filter_cfg, style)
    if cfg.filter.dtype != "auto" and str(DTYPES[cfg.filter.dtype]).removeprefix("torch.") != lm.dtype:
        return Loaded(lm.model.to(DTYPES[cfg.filter.dtype]), lm.tok, lm.device, cfg.filter.dtype)
    return lm


def longest_window(scan: Scan) -> int:
    """Tokens of the longest scanned window (its real length, not the longest the window setting allows)."""
    return max((len(t.ids) for t in scan.tokenized), default=1)


def sampler_row(scan: Scan, prompt_len: int) -> int:
    """Tokens of the sampler's longest row on the scanned windows: the prompt, a copy of the text and the text
    (the text alone, after BOS, without a prompt)."""
    text = longest_window(scan)
    return 1 + text if scan.prompt == "none" else prompt_len + 2 * text


def filter_row(cfg: PipelineConfig, scan: Scan) -> int:
    """Tokens of the filter's longest row on the scanned windows: a call as the prefix, the text and the horizon."""
    return CALL_TOKENS + longest_window(scan) + cfg.filter.horizon


def device_timing(cfg: PipelineConfig, lm: Loaded, scan: Scan, prompt_len: int) -> dict:
    """A timed forward and a timed generate on rows of the lengths the run will use: the sampler's longest row
    on the scanned windows (``prompt_len``: the longest few-shot prompt's tokens, 0 without a prompt), never
    longer than the model window. Timing rows of the window's length instead projects hours for a 128k-token
    model whose documents are a few hundred tokens long."""
    window = model_window(lm.model, cfg.model)
    row = min(window, sampler_row(scan, prompt_len))
    fwd = time_forward(lm.model, row, cfg.filter.batch_tokens)
    gen = time_generate(lm.model, window, row, cfg.sample.max_new_tokens, lm.tok.pad_token_id or 0,
                        cfg.sample.batch_tokens)
    return {"device": lm.device, "dtype": lm.dtype, "forward": fwd, "generate": gen, "machine": machine_load(),
            "tokens_per_s": fwd["tokens_per_s"], "seconds_per_step": gen["seconds_per_step"],
            "generate_rows": gen["rows"]}


def document_id(window_id: str) -> str:
    """The corpus id of a window or piece id (``<id>#p<k>``, ``<id>#w<k>``, both)."""
    return re.sub(r"(#p\d+)?(#w\d+)?$", "", window_id)


def tool_entry(cfg: PipelineConfig, scan: Scan, tool: str, setting: ToolSettings, view: ToolView, probe: dict,
               prompt_len: int) -> tuple[dict, dict]:
    """(the tool's report entry before its verdict, its statistics for :func:`estimate_work`)."""
    tau, m, method = setting.tau, setting.num_calls, setting.method
    s = view.samples
    drawn = s.get("drawn", 0)
    per_doc = len(view.rules) / scan.documents
    entry = {"method": method, "windows": len(view.keep), "p_call_start": p_stats(view, tau),
             "sampled": {"windows": s.get("windows", 0), "drawn": drawn, "parsed": s.get("parsed", 0),
                         "closed": s.get("closed", 0), "valid": s.get("valid", 0), "distinct": len(view.valid)},
             "rules": {"candidates": len(view.rules), "per_document": round(per_doc, 3),
                       "documents_with": len({document_id(scan.windows[j]["doc_id"]) for j, _, _ in view.rules})}
             if view.rules or method != "sampler" else None,
             "probe": probe if probe.get("probed") else None}
    kept_positions = sum(len(k) for k in view.kept)
    stats = {"method": method, "m": m, "windows": len(view.keep), "kept_positions": kept_positions,
             "rule_candidates": len(view.rules), "usable_share": len(view.valid) / drawn if drawn else 0.0,
             "kept_share": probe["kept"] / probe["probed"] if probe and probe.get("probed") else None,
             "prompt_tokens": prompt_len, "seconds_per_sample": view.seconds / drawn if drawn else None}
    return entry, stats


def assemble(cfg: PipelineConfig, scan: Scan, settings: dict, views: dict, probes: dict, timing: dict, lm: Loaded,
             tools: dict) -> dict:
    """The report's model, corpus, tools, work, timing and ready keys."""
    entries, stats = {}, {}
    for tool, setting in settings.items():
        prompt_len = prompt_tokens(cfg, lm.tok, tools[tool]) if tools[tool].prompt and scan.prompt != "none" else 0
        entries[tool], stats[tool] = tool_entry(cfg, scan, tool, setting, views[tool], probes.get(tool, {}),
                                                prompt_len)
    text_bytes = sum(len(w["text"].encode()) for w in scan.windows)
    documents, how = count_documents(cfg, scan.documents, scan.exhausted, text_bytes)
    all_stats = {"documents": scan.documents, "windows": len(scan.windows), "window": scan.max_tokens,
                 "tokens": sum(len(t.ids) for t in scan.tokenized), "free": scan.prompt == "none", "tools": stats}
    seconds = [p["seconds"]["execute"] / p["probed"] for p in probes.values() if p.get("probed")]
    timing["seconds_per_call"] = sum(seconds) / len(seconds) if seconds else 0.0
    work = estimate_work(cfg, all_stats, documents if documents is not None else scan.documents, timing)
    work["documents_how"] = how if documents is not None else f"{how}; counted here: the {scan.documents:,} read"
    longest = max((t["prompt_tokens"] for t in stats.values()), default=0)  # the row the settings allow at most
    row = 1 + scan.max_tokens if scan.prompt == "none" else longest + 2 * scan.max_tokens
    work["memory"] = peak_memory(lm.model, min(model_window(lm.model, cfg.model), row), scan.max_tokens)
    for tool, entry in entries.items():
        entry["projected"] = projected(work["tools"][tool], documents, scan.documents)
        entry["verdict"], entry["reason"], entry["fix"] = verdict(cfg, scan, tool, settings[tool], entry, documents)
    model = lm.model
    params = sum(p.numel() for p in model.parameters())
    return {"model": {"path": cfg.sample.model or cfg.model.path, "type": model.config.model_type,
                      "parameters": params, "window": model_window(model, cfg.model), "device": lm.device,
                      "dtype": lm.dtype},
            "corpus": {"path": cfg.corpus.path, "read": scan.documents, "rejected": scan.rejected,
                       "windows": len(scan.windows), "window_tokens": scan.max_tokens},
            "tools": entries, "work": work, "timing": timing,
            "ready": [t for t, e in entries.items() if e["verdict"] == "ready"]}


def projected(work: dict, documents: int | None, scanned: int) -> dict:
    """A tool's usable candidates and kept calls (None: no probe) in the whole corpus and per 100 documents."""
    n = max(1, documents if documents is not None else scanned)
    kept = work["kept"]
    return {"candidates": work["usable_candidates"], "kept": kept,
            "candidates_per_100": round(100 * work["usable_candidates"] / n, 3),
            "kept_per_100": None if kept is None else round(100 * kept / n, 3)}


def _sampler_problem(cfg: PipelineConfig, scan: Scan, entry: dict, tau: float, tool: str) -> tuple[str, str]:
    """(why the sampler gives this tool no call, what to change), or ("", "") when it gives some."""
    p, s = entry["p_call_start"], entry["sampled"]
    if not entry["windows"]:
        return (f"none of the {len(scan.windows):,} windows passes {tool}'s pre-filter",
                "a corpus with text for this tool (Calendar: dated documents); or sample.prefilter: false")
    if scan.prompt == "none" and cfg.sample.prompt != "none":
        return (f"{scan.note.split(': p(call start)')[0]}: the sample stage stops with this error",
                "a model with a longer window")
    if p is None:
        return "the sampler cannot run (see the sampler's note and the tokenizer)", "calls.style: special"
    if p["above_tau"] == 0:
        return (f"no position has p(call start) above tau_s {tau:g} (p99 {p['p99']:.2g}, max {p['max']:.2g})",
                f"a lower sample.per_tool.{tool}.tau_sample (below {p['p99']:.2g} keeps 1 % of the positions)")
    if not s["valid"]:
        return (f"none of {s['drawn']} sampled calls is usable ({s['parsed']} parse, {s['closed']} close, "
                f"{s['valid']} pass the schema)", "a larger model (the paper saw prompt-following emerge near "
                                                  "775M parameters); a clearer few-shot prompt")
    return "", ""


def verdict(cfg: PipelineConfig, scan: Scan, tool: str, setting: ToolSettings, entry: dict,
            documents: int | None) -> tuple[str, str, list[str]]:
    """(verdict, reason, what to change) of one tool (docs/design.md, "Preflight"): ``no calls`` when its
    candidate source gives none, no probed call returns a result, the filter keeps none of them, or the model's
    losses do not react to the results; ``few calls`` when fewer than :data:`FEW_KEPT` kept calls are projected
    for the corpus (:data:`FEW_KEPT_PER_100` per 100 documents when its size is unknown); else ``ready``."""
    tau, method, rules = setting.tau, setting.method, setting.rules
    reasons, fixes = [], []
    if method in ("sampler", "both"):
        why, fix = _sampler_problem(cfg, scan, entry, tau, tool)
        if why:
            reasons.append(f"sampler: {why}")
            fixes.append(fix)
            if method == "sampler" and rules in RULE_TOOLS:
                fixes.append(f"sample.method.{tool}: rules (a rule proposer needs no prompt-following)")
    if method in ("rules", "both") and not entry["rules"]["candidates"]:
        reasons.append(f"rules: the rule proposer finds no candidate in {scan.documents:,} documents "
                       f"({entry['windows']} windows pass the pre-filter)")
    if not entry["projected"]["candidates"]:
        return "no calls", "; ".join(reasons) or "no candidate", fixes
    return _probe_verdict(cfg, tool, entry["probe"], entry["projected"], documents, "; ".join(reasons), fixes)


def _probe_verdict(cfg: PipelineConfig, tool: str, probe: dict | None, proj: dict, documents: int | None,
                   note: str, fixes: list[str]) -> tuple[str, str, list[str]]:
    """The verdict of a tool that has candidates: from its filter probe and the kept calls projected."""
    tail = f"; {note}" if note else ""
    if probe and not probe["ok"]:
        errors = ", ".join(f"{k} {v}" for k, v in probe["errors"].items())
        return "no calls", f"none of {probe['probed']} probed calls returned a result ({errors}){tail}", \
            fixes + [f"the tool's data and settings (try `toolformer tool {tool} INPUT`)"]
    if probe and not probe["kept"]:
        small = " (a small probe: more documents give a surer answer)" if probe["ok"] < 10 else ""
        return "no calls", (f"the filter keeps none of {probe['ok']} probed calls (best L- - L+ "
                            f"{probe['best_margin']:.3g} < tau_f {tau_for(cfg, tool):g}){small}{tail}"), \
            fixes + [f"a lower filter.per_tool_tau.{tool}; a model that gains from the results"]
    if probe and probe["controls"] and probe["kept_controls"] <= READS_RESULTS * probe["kept_wrong_result"]:
        return "no calls", (f"keeping does not depend on the result: of {probe['controls']} probed calls the filter "
                            f"keeps {probe['kept_controls']} with their own results and {probe['kept_wrong_result']} "
                            f"with another document's: the model does not read results, so what it keeps is noise"
                            f"{tail}"), fixes + ["a trained model that reads its context (a random one cannot use "
                                                 "results)"]
    probed = proj["kept"] is not None
    kept = proj["kept"] if probed else proj["candidates"]
    per_100 = proj["kept_per_100"] if probed else proj["candidates_per_100"]
    few = kept < FEW_KEPT if documents is not None else (per_100 or 0) < FEW_KEPT_PER_100
    what = f"about {kept if documents is not None else per_100:,} " \
        + ("kept calls" if probed else "candidates (no filter probe: kept calls unknown)") \
        + f" projected for {f'{documents:,}' if documents is not None else 100} documents{tail}"
    if few:
        return "few calls", what, fixes + ["more documents; a lower tau_s or tau_f; a larger top_k or num_calls"]
    return "ready", what, fixes


def main(cfg: PipelineConfig, n_docs: int, n_probe: int, as_json: bool, config_path: str = "") -> int:
    """``toolformer preflight``: print the report; exit 0 when a tool is ready, 1 when none is (a missing path or
    a bad setting raises before any work: exit 2)."""
    from toolformer.rundir.inputs import check_reads

    check_reads(cfg, ("sample", "execute"))
    report = run_preflight(cfg, n_docs, n_probe, config_path=config_path)
    if as_json:
        print(json.dumps(report, ensure_ascii=False, default=str))
    else:
        from toolformer.preflight.text import render

        sys.stdout.write(render(report))
    return 0 if report["ready"] else 1
