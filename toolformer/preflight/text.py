"""Preflight's report as text for a terminal (``toolformer preflight`` without ``--json``)."""

from __future__ import annotations

from toolformer.rundir.folder import fmt_pct


def _n(value) -> str:
    return "-" if value is None else f"{value:,}" if isinstance(value, int) else f"{value:,.3g}"


def _head(report: dict) -> list[str]:
    m, c, s = report["model"], report["corpus"], report["sampler"]
    w = report["work"]
    lines = [f"preflight {report['config'] or '(defaults)'}: model {m['path']} ({m['type']}, "
             f"{m['parameters'] / 1e6:,.2f}M parameters, window {m['window']}, {m['device']} {m['dtype']})",
             f"corpus {c['path']}: {_n(w['documents'])} documents ({w['documents_how']}); read {c['read']:,} "
             f"({c['windows']:,} windows of at most {c['window_tokens']:,} tokens, {c['rejected']:,} rejected)",
             "sampler: P(x) = " + ("the text alone" if s["prompt"] == "none" else "each tool's few-shot prompt")
             + (f" -- {s['note']}" if s["note"] else "")]
    t = report["tokenizer"]
    if t["ok"]:
        lines.append(f"tokenizer (calls.style {t['style']}): every marker is whole in context")
    else:
        lines.append(f"tokenizer (calls.style {t['style']}): {len(t['problems'])} problem(s)")
        if t.get("merges"):
            lines.append("  markers merge into: " + ", ".join(repr(m) for m in t["merges"]))
        for e in t["markers"]:
            for p in e["problems"]:
                lines.append(f"  {e['role']} {e['marker']!r}: {p}")
            if e["fix"]:
                lines.append(f"    fix: {e['fix']}")
    return lines


def _tool_lines(name: str, e: dict) -> list[str]:
    p, s, r, pr = e["p_call_start"], e["sampled"], e["rules"], e["probe"]
    lines = [f"{name} (sample.method {e['method']}, {e['windows']:,} windows pass the pre-filter)"]
    if p:
        lines.append(f"  p(call start) over {p['positions']:,} positions: p50 {_n(p['p50'])}, p90 {_n(p['p90'])}, "
                     f"p99 {_n(p['p99'])}, max {_n(p['max'])}; {fmt_pct(p['above_tau'])} above tau_s; "
                     f"{p['kept_per_window']:.2f} positions kept per window")
    if s["drawn"]:
        lines.append(f"  sampled calls: {s['drawn']} in {s['windows']} windows; {s['parsed']} parse, {s['closed']} "
                     f"close, {s['valid']} pass the schema ({s['distinct']} distinct)")
    if r is not None:
        lines.append(f"  rules: {r['candidates']:,} candidates ({r['per_document']:.2f} per document, in "
                     f"{r['documents_with']:,} documents)")
    if pr and pr["probed"]:
        effect = "" if pr["result_effect"] is None else f"; L+ moves up to {_n(pr['result_effect'])} between results"
        lines.append(f"  filter probe: {pr['probed']} calls, {pr['ok']} with a result, {pr['kept']} kept "
                     f"(of {pr['controls']} also scored with another document's result: {pr['kept_controls']} kept "
                     f"with their own, {pr['kept_wrong_result']} with the other){effect}")
    return lines


def _work_lines(report: dict) -> list[str]:
    w, t = report["work"], report["timing"]
    h = w["hours"]
    lines = [f"work for {_n(w['documents'])} documents: {w['windows']:,} windows, {w['positions']:,} positions"]
    for name, tw in w["tools"].items():
        kept = "" if tw["kept"] is None else f"; ~{tw['kept']:,} kept"
        lines.append(f"  {name}: {tw['candidates']:,} candidates ({tw['sampled_calls']:,} sampled at "
                     f"{tw['kept_positions']:,} positions, {tw['rule_candidates']:,} by rules), ~"
                     f"{tw['usable_candidates']:,} usable{kept}")
    lines.append(f"  sample: {w['sample']['forward_tokens']:,} tokens forward, {w['sample']['sampled_calls']:,} calls "
                 f"sampled; filter: {w['filter']['rows']:,} rows, {w['filter']['tokens']:,} tokens; finetune: "
                 f"{w['finetune']['steps']:,} steps, {w['finetune']['tokens']:,} tokens")
    lines.append(f"  hours on {t['device']} ({t['dtype']}; forward {t['tokens_per_s']:,.0f} tokens/s, generate "
                 f"{t['seconds_per_step']:.3g} s/step for {t['generate_rows']} rows): sample {h['sample']:.3g}, "
                 f"execute {h['execute']:.3g} (rough), filter {h['filter']:.3g}, finetune {h['finetune']:.3g}, "
                 f"total {h['total']:.3g}")
    m, gib = w["memory"], 2**30
    lines.append(f"  peak memory about {m['peak_bytes'] / gib:.3g} GiB: the model {m['model_bytes'] / gib:.3g} GiB + "
                 f"the logits of one row {m['logits_bytes'] / gib:.3g} GiB ({m['row_tokens']:,} tokens x "
                 f"{m['vocabulary']:,} x 4 bytes); {m['bound_by']} bounds the row (windows of "
                 f"{m['window_tokens']:,} tokens now)")
    load = t["machine"]
    if t["device"] == "cpu" and load["load_1min"] is not None and load["load_1min"] > load["cores"]:
        lines.append(f"  (timed on a busy machine: load {load['load_1min']:g} on {load['cores']} cores; the hours "
                     "are longer than on a machine of the run's own)")
    return lines


def render(report: dict) -> str:
    """The report as lines of text."""
    lines = _head(report)
    for name, e in report["tools"].items():
        lines += _tool_lines(name, e)
    lines += _work_lines(report)
    lines.append("verdicts:")
    for name, e in report["tools"].items():
        source = "" if e["method"] == "sampler" else f" ({e['method']})"
        lines.append(f"  {name}: {e['verdict']}{source} -- {e['reason']}")
        for fix in e["fix"]:
            lines.append(f"    change: {fix}")
    ready = ", ".join(report["ready"]) or "none"
    lines.append(f"ready: {ready} (exit {0 if report['ready'] else 1}; {report['seconds']['total']:.0f} s)")
    return "\n".join(lines) + "\n"
