"""The HTML report and margin histograms of ``toolformer inspect``.

Design: ``RUN_DIR/inspect/report.html`` is self-contained (inline CSS, PNGs as
base64 data URIs, no JavaScript) and holds the funnel table, the quantiles of
L⁻ − L⁺, one histogram per tool, the top and bottom calls by margin, the kept
calls against the documents' gold calls (when they have some: precision and
recall per tool, the wrong kept calls in their sentence) and the first page of
documents. Documents with at least one shown call follow in
corpus order, ``inspect.page_size`` per page: page k > 1 is ``report-k.html``,
and every page links to every other. Each candidate call sits in place in its
document (kept, rejected, failed, not yet scored or executed in different
colours) with its losses, result or error in a ``title`` tooltip. Every piece
of text is escaped: call inputs and results are model-written and untrusted.
"""

from __future__ import annotations

import base64
import html
import io
import re
from pathlib import Path

import numpy as np

from toolformer.corpus.records import margin
from toolformer.inspect.inspection import Inspection
from toolformer.inspect.view import QUANTILES, call_text, in_context, status
from toolformer.rundir.files import atomic_write_text
from toolformer.rundir.folder import fmt_pct

CSS = """
body{font-family:system-ui,sans-serif;margin:1.5em auto;max-width:72em;padding:0 1em;color:#222}
h1{font-size:1.4em}h2{font-size:1.2em;margin-top:1.6em;border-bottom:1px solid #ccc}
table{border-collapse:collapse;margin:.5em 0}td,th{padding:.2em .6em;border-bottom:1px solid #e4e4e4}
td.num,th.num{text-align:right;font-variant-numeric:tabular-nums}
.warn{color:#a40}.missing{color:#a40;font-weight:bold}.muted{color:#777}
.call{border-radius:3px;padding:0 .15em;font-family:ui-monospace,monospace;font-size:.92em;cursor:help}
.call.kept{background:#c8f0c8;border:1px solid #3a3}.call.rejected{background:#fbe0dc;color:#833;font-size:.8em}
.call.failed{background:#eee;color:#888;text-decoration:line-through;font-size:.8em}
.call.unscored,.call.pending{background:#dde8fb;color:#235;font-size:.85em}
.call:hover{outline:2px solid #555}
.doc{margin:1em 0;padding:.6em .8em;border:1px solid #ddd;border-radius:4px}
.doc h3{font-size:.95em;margin:0 0 .4em 0;font-weight:normal;color:#555}
.text{white-space:pre-wrap;line-height:1.7}
nav.pages a,nav.pages b{margin-right:.4em}
#hide-rejected:checked ~ main .call.rejected,#hide-rejected:checked ~ main .call.failed{display:none}
img.hist{max-width:100%;border:1px solid #eee;margin:.3em}
"""


def _e(value) -> str:
    return html.escape(str(value), quote=True)


def _num(x, digits: int = 3) -> str:
    return "–" if x is None else f"{x:.{digits}f}"


def _count(x) -> str:
    return "–" if x is None else f"{x:,}"


def page_name(k: int) -> str:
    return "report.html" if k == 1 else f"report-{k}.html"


# -- histograms --------------------------------------------------------------------
def _bin_edges(margins: np.ndarray, tau: float | None, bins: int) -> np.ndarray:
    """At most ``bins`` equal bins over the margins (about 2·sqrt(n) for few
    calls), shifted so that tau_f is an edge: no bar mixes kept and rejected."""
    n_bins = max(5, min(bins, 2 * int(np.sqrt(margins.size))))
    lo, hi = float(margins.min()), float(margins.max())
    if tau is not None:
        lo, hi = min(lo, tau), max(hi, tau)
    width = (hi - lo) / n_bins or 1.0
    anchor = tau if tau is not None else lo
    below = int(np.ceil((anchor - lo) / width))
    above = max(1, int(np.ceil((hi - anchor) / width)))
    return anchor + width * np.arange(-below, above + 1)  # exactly tau at offset 0


def split_margins(calls: list[dict]) -> tuple[list[float], list[float], list[float]]:
    """L⁻ − L⁺ of the kept calls, of the rejected ones, and the upper bounds L(ε) − L⁺ of the rejected ones whose
    L(e(c, ε)) the filter left out (L(ε) − L⁺ alone rejected them); calls without losses are left out."""
    kept: list[float] = []
    rejected: list[float] = []
    bounded: list[float] = []
    for r in calls:
        m = margin(r)
        if m is not None:
            (kept if r.get("kept") else bounded if r.get("loss_no_result") is None else rejected).append(m)
    return kept, rejected, bounded


def margin_histogram(tool: str, calls: list[dict], tau: float | None, bins: int) -> bytes | None:
    """PNG of the L⁻ − L⁺ histogram of ``calls`` (kept, rejected, and rejected by L(ε) − L⁺ alone, stacked),
    with tau_f marked; None when no call has losses."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    kept, rejected, bounded = split_margins(calls)
    if not kept and not rejected and not bounded:
        return None
    edges = _bin_edges(np.asarray(kept + rejected + bounded, dtype=np.float64), tau, bins)
    fig = Figure(figsize=(6.4, 3.2), dpi=100)
    FigureCanvasAgg(fig)  # Agg canvas without pyplot: no global backend state
    ax = fig.add_subplot()
    ax.hist([bounded, rejected, kept], bins=edges.tolist(), stacked=True, color=["#efbcb5", "#d9776b", "#4caf50"],
            label=["rejected by L(ε) − L⁺ (at most)", "rejected", "kept"])
    if tau is not None:
        ax.axvline(tau, color="black", linestyle="--", linewidth=1.2, label=f"tau_f = {tau:g}")
    ax.set_xlabel(r"$L^- - L^+$")
    ax.set_ylabel("calls")
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_title(f"{tool}: {len(kept):,} kept of {len(kept) + len(rejected) + len(bounded):,} scored")
    ax.legend(fontsize="small")
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    return buf.getvalue()


# -- pieces of a page -----------------------------------------------------------------
def tooltip(rec: dict, stage: str) -> str:
    st = status(rec, stage)
    m = margin(rec)
    lines = [f"{rec['tool']}({rec['input']})"]
    if st in ("kept", "rejected"):
        rel = "≥" if st == "kept" else "<"
        bound = rec.get("loss_no_result") is None  # L(e(c, ε)) left out: L(ε) − L⁺ alone rejects the call
        lines.append(f"{st}: L⁻ − L⁺ {'≤' if bound else '='} {_num(m)} {rel} tau_f {_num(rec.get('tau_filter'), 2)}"
                     + (" (L(e(c,ε)) not computed: L⁻ ≤ L(ε))" if bound else ""))
        lines.append(f"L(ε) = {_num(rec.get('loss_none'))}   L(e(c,ε)) = {_num(rec.get('loss_no_result'))}   "
                     f"L(e(c,r)) = {_num(rec.get('loss_with_result'))}")
        lines.append(f"L⁻ = {_num(rec.get('loss_minus'))}   L⁺ = {_num(rec.get('loss_plus'))}   margin = {_num(m)}")
    else:
        lines.append({"failed": "execution failed", "unscored": "executed, not scored (no filter record)",
                      "pending": "not executed (no execute record)"}[st])
    if rec.get("error") is not None:
        err = rec["error"]
        lines.append(f"error: {err.get('code')}: {err.get('message')}" if isinstance(err, dict) else f"error: {err}")
    elif "result" in rec:
        lines.append(f"result: {rec['result']}")
    p_i = rec.get("p_i")
    lines.append(f"position {rec['position']}, char {rec['char_start']}, "
                 f"p_i {_num(p_i) if p_i is not None else 'n/a'}, source {rec.get('source', '?')}")
    return "\n".join(lines)


def call_span(rec: dict, ins: Inspection) -> str:
    st = status(rec, ins.view.calls_stage)
    return (f'<span class="call {st}" title="{_e(tooltip(rec, ins.view.calls_stage))}">'
            f'{_e(call_text(rec, ins.style))}</span>')


def _order(rec: dict):
    m = margin(rec)
    return (not rec.get("kept"), -(m if m is not None else float("-inf")))


def document_html(anchor: str, doc_id: str, doc: dict | None, calls: list[dict], ins: Inspection) -> str:
    """The document with each call inserted in place (as ``insert_calls`` would)."""
    states = [status(r, ins.view.calls_stage) for r in calls]
    tally = ", ".join(f"{states.count(s)} {s}" for s in ("kept", "rejected", "failed", "unscored", "pending")
                      if states.count(s))
    head = f'<h3><b>{_e(doc_id)}</b>{" · " + _e(doc["date"]) if doc and doc.get("date") else ""} · {tally}</h3>'
    if doc is None:
        body = "<br>".join(call_span(r, ins) for r in sorted(calls, key=_order))
        return (f'<section class="doc" id="{anchor}">{head}<p class="muted">text not in sample/documents.jsonl</p>'
                f'{body}</section>')
    text = doc["text"]
    groups: dict[int, list[dict]] = {}
    for r in calls:
        groups.setdefault(min(max(0, int(r["char_start"])), len(text)), []).append(r)
    parts, last = [], 0
    sep = _e(ins.separator)
    for pos in sorted(groups):
        parts.append(_e(text[last:pos]))
        parts.extend(call_span(r, ins) + sep for r in sorted(groups[pos], key=_order))
        last = pos
    parts.append(_e(text[last:]))
    return f'<section class="doc" id="{anchor}">{head}<div class="text">{"".join(parts)}</div></section>'


def funnel_html(ins: Inspection) -> str:
    rows = []
    for tool in ins.tools:
        for step in ins.funnel["per_tool"][tool]["steps"]:
            r = step["of_previous"]
            prev = "–" if r is None else (fmt_pct(r) if step["unit"] == "share" else f"{r:.2f} {step['unit']}")
            rows.append(f'<tr data-tool="{_e(tool)}" data-step="{_e(step["step"])}"><td>{_e(tool)}</td>'
                        f'<td>{_e(step["label"])}</td><td class="num count">{_count(step["count"])}</td>'
                        f'<td class="num">{prev}</td><td class="muted">{_e(step["source"])}</td></tr>')
    return ('<table id="funnel"><tr><th>tool</th><th>step</th><th class="num">count</th>'
            f'<th class="num">of previous</th><th>from</th></tr>{"".join(rows)}</table>')


def margins_html(ins: Inspection) -> str:
    head = "".join(f'<th class="num">{n if n in ("min", "max") else n[1:] + " %"}</th>' for n, _ in QUANTILES)
    rows = []
    for tool in ins.tools:
        q = ins.quantiles[tool]
        cells = "".join(f'<td class="num">{_num(q[n]) if q else "–"}</td>' for n, _ in QUANTILES)
        rows.append(f'<tr data-tool="{_e(tool)}"><td>{_e(tool)}</td><td class="num">{_num(ins.tau(tool), 2)}</td>'
                    f'<td class="num">{_count(q["n"]) if q else 0}</td>{cells}</tr>')
    return (f'<table id="margins"><tr><th>tool</th><th class="num">tau_f</th><th class="num">n</th>{head}</tr>'
            f'{"".join(rows)}</table>')


def ranking_html(ins: Inspection, where: dict[str, str], width: int) -> str:
    which = "rejected" if ins.filters["kept"] == "no" else "kept"
    out = []
    for tool in ins.tools:
        top, bottom = ins.rankings[tool]
        for title, calls in ((f"highest L⁻ − L⁺, {which}", top), (f"lowest L⁻ − L⁺, {which}", bottom)):
            if not calls:
                continue
            rows = []
            for r in calls:
                doc = ins.view.documents.get(r["doc_id"])
                before, _, after = in_context(doc["text"] if doc else None, r, ins.style, ins.separator, width)
                link = where.get(r["doc_id"])
                doc_cell = f'<a href="{_e(link)}">{_e(r["doc_id"])}</a>' if link else _e(r["doc_id"])
                rows.append(f'<tr><td class="num">{_num(margin(r))}</td>'
                            f'<td class="num">{_num(r.get("loss_minus"))}</td>'
                            f'<td class="num">{_num(r.get("loss_plus"))}</td><td>{doc_cell}</td>'
                            f'<td>{_e(before)}{call_span(r, ins)}{_e(after)}</td></tr>')
            out.append(f'<h3>{_e(tool)}: {title}</h3><table class="ranking"><tr><th class="num">L⁻ − L⁺</th>'
                       f'<th class="num">L⁻</th><th class="num">L⁺</th><th>doc</th><th>in context</th></tr>'
                       f'{"".join(rows)}</table>')
    return "".join(out) or '<p class="muted">no scored calls match the filters</p>'


def _share(part: int, whole: int, share: float | None) -> str:
    return f'{"–" if share is None else fmt_pct(share)} ({part:,}/{whole:,})'


def gold_html(ins: Inspection) -> str:
    """Per shown tool, the candidates' share right, precision and recall of the kept calls, then each tool's
    wrong kept calls in their sentence beside the gold call they were compared
    against."""
    g = ins.gold
    if g is None:  # no document has gold calls
        return ""
    tools = [t for t in ins.tools if t in g["per_tool"]]
    rows = []
    for tool in tools:
        c = g["per_tool"][tool]
        rows.append(f'<tr data-tool="{_e(tool)}"><td>{_e(tool)}</td><td class="num">{c["candidates"]:,}</td>'
                    f'<td class="num">{_share(c["candidates_right"], c["candidates"], c["candidate_precision"])}</td>'
                    f'<td class="num">{c["kept"]:,}</td>'
                    f'<td class="num">{_share(c["kept_right"], c["kept"], c["precision"])}</td>'
                    f'<td class="num">{c["gold"]:,}</td>'
                    f'<td class="num">{_share(c["gold_with_kept"], c["gold"], c["recall"])}</td>'
                    f'<td class="num">{_share(c["gold_with_right_kept"], c["gold"], c["recall_right"])}</td></tr>')
    no_gold = ", ".join(f"{_e(t)} ({n:,} kept)" for t, n in g["no_gold"].items() if t in ins.tools)
    out = [f'<p>{g["documents"]:,} annotated documents (with gold_calls); a kept call is at a gold call when their '
           f'positions differ by at most {g["tolerance"]} characters, right when the results agree too.</p>'
           '<table id="gold"><tr><th>tool</th><th class="num">candidates</th>'
           '<th class="num">right (right/candidates)</th><th class="num">kept</th>'
           '<th class="num">precision (right/kept)</th>'
           '<th class="num">gold</th><th class="num">recall (with a kept call)</th>'
           f'<th class="num">recall (with a right kept call)</th></tr>{"".join(rows)}</table>'
           + (f'<p class="muted">no gold calls of: {no_gold}</p>' if no_gold else "")]
    for tool in tools:
        wrong = g["wrong"][tool]
        if not wrong:
            continue
        n_all = g["per_tool"][tool]["kept"] - g["per_tool"][tool]["kept_right"]
        rows = []
        for w in wrong:
            gold = "no gold call here" if w["gold"] is None else w["gold"]["call"]
            rows.append(f'<tr><td class="num">{_num(w["margin"])}</td><td>{_e(w["doc_id"])}</td>'
                        f'<td>{_e(w["before"])}<span class="call kept">{_e(w["call"])}</span>{_e(w["after"])}</td>'
                        f'<td{" class=muted" if w["gold"] is None else ""}>{_e(gold)}</td></tr>')
        out.append(f'<h3>{_e(tool)}: wrong kept calls ({len(wrong):,} of {n_all:,}, largest L⁻ − L⁺ first)</h3>'
                   f'<table class="gold-wrong" data-tool="{_e(tool)}"><tr><th class="num">L⁻ − L⁺</th><th>doc</th>'
                   f'<th>in context</th><th>gold call</th></tr>{"".join(rows)}</table>')
    return "".join(out)


def summary_html(ins: Inspection, images: dict[str, bytes], where: dict[str, str], width: int) -> str:
    f = ins.funnel
    stages = ", ".join(f'<span class="{"missing" if st == "missing" else ""}">{_e(s)}: {_e(st)}</span>'
                       for s, st in f["stages"].items())
    warn = "".join(f'<li class="warn">{_e(w)}</li>' for w in f["warnings"])
    missing = (f'<p class="missing">missing stages: {_e(", ".join(f["missing"]))}</p>' if f["missing"] else "")
    imgs = "".join(f'<img class="hist" alt="{_e(t)} histogram of L⁻ − L⁺" '
                   f'src="data:image/png;base64,{base64.b64encode(png).decode("ascii")}">' for t, png in images.items())
    errors = "".join(f"<tr><td>{_e(t)}</td><td>{_e(code)}</td><td class='num'>{n:,}</td></tr>"
                     for t in ins.tools for code, n in f["per_tool"][t]["errors"].items())
    return (f"<p>stages: {stages}</p>{missing}{'<ul>' + warn + '</ul>' if warn else ''}"
            f"<h2>Funnel</h2>{funnel_html(ins)}"
            f"<h2>L⁻ − L⁺ (calls shown)</h2>{margins_html(ins)}{imgs or '<p class=muted>no losses to plot</p>'}"
            f"<h2>Calls by margin</h2>{ranking_html(ins, where, width)}"
            + (f'<h2>Kept calls against gold calls</h2>{gold_html(ins)}' if ins.gold is not None else "")
            + ("<h2>Execution errors</h2><table id='errors'>"
               f"<tr><th>tool</th><th>code</th><th class='num'>calls</th></tr>{errors}</table>" if errors else "")
            + read_ahead_html(ins))


def read_ahead_html(ins: Inspection) -> str:
    """The candidates that passed tau_f but read ahead of their position (filter.lookahead), with examples; ""
    when there are none."""
    rows = []
    for t in ins.tools:
        info = ins.funnel["per_tool"][t].get("read_ahead") or {}
        for e in info.get("examples", []):
            doc = ins.view.documents.get(e["doc_id"]) or {}
            text, at = doc.get("text", ""), int(e["char_start"])
            rows.append(f"<tr><td>{_e(t)}</td><td>{_e(info.get('mode') or '')}</td><td>{_e(e['input'])}</td>"
                        f"<td>{_e(', '.join(e['read_ahead']))}</td><td>{_e(text[max(0, at - 60):at])}"
                        f"<b>▸</b>{_e(text[at:at + 60])}</td></tr>")
    if not rows:
        return ""
    counts = ", ".join(f"{_e(t)} {n:,}" for t in ins.tools
                       if (n := ins.funnel["per_tool"][t]["counts"].get("read_ahead")))
    return ("<h2>Calls that read ahead</h2><p>Passed tau_f, but their input holds what the text states only after "
            f"the call's position (filter.lookahead): {counts}.</p><table id='read-ahead'><tr><th>tool</th>"
            "<th>mode</th><th>input</th><th>read ahead</th><th>text around (▸ the position)</th></tr>"
            + "".join(rows) + "</table>")


def _page(title: str, nav: str, body: str) -> str:
    legend = ('<p class="muted">calls: <span class="call kept">kept</span> <span class="call rejected">rejected</span> '
              '<span class="call failed">failed</span> <span class="call unscored">not scored</span>; '
              'hover a call for its losses and result.</p>')
    return (f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>{_e(title)}</title>'
            f'<style>{CSS}</style></head><body><h1>{_e(title)}</h1>{nav}{legend}'
            '<input type="checkbox" id="hide-rejected">'
            '<label for="hide-rejected"> hide rejected and failed calls</label>'
            f"<main>{body}</main>{nav}</body></html>\n")


def write_report(out_dir: Path, ins: Inspection, images: dict[str, bytes], page_size: int, width: int) -> list[Path]:
    """Write report.html and report-2.html ...; return the pages written."""
    if page_size < 1:
        raise ValueError(f"inspect.page_size: must be at least 1, got {page_size}")
    per_doc: dict[str, list[dict]] = {}
    for tool in ins.tools:
        for r in ins.selected[tool]:
            per_doc.setdefault(r["doc_id"], []).append(r)
    order = [d for d in ins.view.documents if d in per_doc] + [d for d in per_doc if d not in ins.view.documents]
    pages = [order[i:i + page_size] for i in range(0, len(order), page_size)] or [[]]
    where = {d: f"{page_name(k)}#doc-{i}" for k, docs in enumerate(pages, 1)
             for i, d in enumerate(docs, sum(len(p) for p in pages[:k - 1]))}
    f = ins.filters
    shown = ", ".join(f"{k} = {v}" for k, v in f.items() if v is not None and not (k == "kept" and v == "all"))
    title = f"toolformer inspect: {ins.view.run_dir}"
    written = []
    start = 0
    for k, docs in enumerate(pages, 1):
        links = " ".join(f"<b>{j}</b>" if j == k else f'<a href="{page_name(j)}">{j}</a>'
                         for j in range(1, len(pages) + 1))
        nav = (f'<nav class="pages">page {k} of {len(pages)} ({len(order):,} documents with shown calls, '
               f'{page_size:,} a page): {links}</nav>')
        body = (f'<p>filters: {_e(shown or "none")}</p>' + (summary_html(ins, images, where, width) if k == 1 else "")
                + f'<h2>Documents {start + 1:,}–{start + len(docs):,} of {len(order):,}</h2>'
                + "".join(document_html(f"doc-{start + i}", d, ins.view.documents.get(d), per_doc[d], ins)
                          for i, d in enumerate(docs))
                + ("" if docs else '<p class="muted">no calls match the filters</p>'))
        path = out_dir / page_name(k)
        atomic_write_text(path, _page(title, nav, body))
        written.append(path)
        start += len(docs)
    for old in out_dir.glob("report-*.html"):  # pages of an earlier, longer report
        m = re.fullmatch(r"report-(\d+)\.html", old.name)
        if m and int(m.group(1)) > len(pages):
            old.unlink()
    return written

