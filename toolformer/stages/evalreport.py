"""What the evaluate stage (:mod:`toolformer.stages.evaluate`) reports from its summary: the paper-shaped
table of ``results.md`` (rows = models and modes, columns = evaluation sets) and its one line of counts."""

from __future__ import annotations

from pathlib import Path

from toolformer.rundir.folder import fmt_pct

ROW_TITLES = {"base": "Base model", "toolformer_disabled": "Toolformer (disabled)", "toolformer": "Toolformer"}


def _pct(x: float | None) -> str:
    return "–" if x is None else f"{100 * x:.1f}"


def results_markdown(summary: dict) -> str:
    """The paper-shaped table: rows = models/modes, columns = data sets."""
    tasks = list(summary["tasks"])
    has_ppl = summary["perplexity"] is not None
    head = ["Model", *tasks, "Arith.", "QA"] + (["Perplexity"] if has_ppl else [])
    lines = ["# Evaluation results", "",
             "Accuracy in % (share of items with a tool call in brackets); Arith. and QA are the means over the "
             "math and QA columns; perplexity on the held-out plain text, with tools disabled (the call-start tokens "
             "taken out of every next-token distribution; results.json keeps perplexity_calls_allowed too).", "",
             "| " + " | ".join(head) + " |", "| --- " + "| ---: " * (len(head) - 1) + "|"]
    for name, row in summary["rows"].items():
        cells = [f"{_pct(row['tasks'][t]['accuracy'])} ({fmt_pct(row['tasks'][t]['call_rate'], digits=0)})"
                 for t in tasks]
        cells += [_pct(row["arithmetic"]), _pct(row["qa"])]
        if has_ppl:
            cells.append("–" if row["perplexity"] is None else f"{row['perplexity']:.2f}")
        lines.append(f"| {ROW_TITLES.get(name, name)} | " + " | ".join(cells) + " |")
    lines += ["", "Models:", ""]
    for n, p in summary["models"].items():
        setup = summary["rows"][n].get("tool_setup")
        tools = f"; tools {', '.join(setup['enabled'])} from `{setup['description'] or 'the config'}`" if setup else ""
        calls = summary["rows"][n].get("max_calls")
        if setup and calls != summary["decoding"]["max_calls"]:
            tools += f"; at most {calls} call(s) per item"
        top_k = summary["rows"][n].get("top_k_trigger")
        if setup and top_k and top_k != summary["decoding"]["top_k_trigger"]:
            tools += f"; a call starts when the call-start token is in the top {top_k}"
        lines.append(f"- {ROW_TITLES.get(n, n)} (`{n}`): `{p}`{tools}")
    lines += [f"- {ROW_TITLES.get(n, n)} (`{n}`): skipped, {why}" for n, why in summary["skipped_rows"].items()]
    lines += ["", "Tasks:", ""]
    for t, v in summary["tasks"].items():
        why = "; ".join(f"{n} {reason}" for reason, n in (v.get("skip_reasons") or {}).items())
        lines.append(f"- {t}: {v['n']} items scored of {v.get('in_file', v['n'])} in the file, {v['left_out']} "
                     f"skipped{f' ({why})' if why else ''}; {v['kind']}, format {v['format']}, `{v['path']}`")
        calls = [f"{n} {malformed_text(r['tasks'][t])}" for n, r in summary["rows"].items()
                 if r["tasks"][t].get("calls")]
        if calls:
            lines.append("  calls: " + "; ".join(calls))
    d = summary["decoding"]
    lines += ["", f"Decoding: greedy, a call starts when the call-start token is in the top {d['top_k_trigger']}, "
              f"at most {d['max_calls']} call(s) per item, {d['max_new_tokens']} new tokens"
              + (", calls constrained to the tools' grammars" if d.get("constrained") else "")
              + f"; seed {summary['seed']}.", ""]
    return "\n".join(lines)


def malformed_text(counts: dict) -> str:
    """``295 calls, 1.69 malformed per 100 (5 unclosed)`` from a cell's or a row's call counts."""
    kinds = ", ".join(f"{m} {kind.replace('_', ' ')}" for kind, m in counts["malformed"].items() if m)
    rate = counts["malformed_per_100_calls"]
    text = f"{counts['calls']:,} calls, {0 if rate is None else rate:g} malformed per 100"
    return text + (f" ({kinds})" if kinds else "")


def summary_line(summary: dict, out_dir: Path) -> str:
    """One line of counts: items correct (and with a call) per row."""
    n_items = sum(t["n"] for t in summary["tasks"].values())
    parts = []
    for name, r in summary["rows"].items():
        correct = sum(c["correct"] for c in r["tasks"].values())
        calls = sum(c["with_calls"] for c in r["tasks"].values())
        part = f"{name} {correct:,} ({fmt_pct(correct, n_items)})"
        if r["tools"]:
            part += f" with a call on {calls:,} ({fmt_pct(calls, n_items)}; {malformed_text(r)})"
        if r["perplexity"] is not None:
            part += f", perplexity {r['perplexity']:.2f}"
        parts.append(part)
    return (f"evaluate: {len(summary['rows'])} row(s) × {len(summary['tasks'])} task(s), {n_items:,} items per row; "
            f"correct: " + "; ".join(parts) + f"; results in {out_dir / 'results.md'}")
