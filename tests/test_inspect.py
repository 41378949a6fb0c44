"""`toolformer inspect` on run folders written by hand following the stage contracts."""

import base64
import json
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest
from helpers import shard_records, write_jsonl

from toolformer.cli import main
from toolformer.config.schema import PipelineConfig
from toolformer.inspect.gold import GOLD_TOLERANCE, gold_summary, same_result
from toolformer.inspect.view import in_context, sentence_around
from toolformer.run.folder import FORMAT
from toolformer.stages.inspect import run_stage
from toolformer.tools.calls import get_style, insert_calls

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
SCRIPT = "<script>alert('x')</script>"
STYLE = get_style("plain")

DOCS = [
    {"doc_id": "d0", "date": "2021-03-14",
     "text": "Intro. The market sold 340 crates and 275 crates, 615 crates in all. Bye."},
    {"doc_id": "d1", "date": "2021-03-20", "text": "Brightwater has 96,500 people and Aldermoor 18,240."},
    {"doc_id": "d2", "date": "2022-07-02", "text": "The Vell is 212 km long and the Oster 87 km, 299 km together."},
    {"doc_id": "d3", "date": "2022-07-09", "text": "Today the council of Kessford met."},
    {"doc_id": "d4", "date": "2023-01-30", "text": "The mill was rebuilt in 1888 by Ann Hale."},
]
# (doc, tool, input, char_start anchor, result or error code, L(ε), L(e(c,ε)), L(e(c,r)))
CALLS = [
    ("d0", "Calculator", "340 + 275", "615", "615", 3.0, 2.5, 0.4),   # margin 2.1, kept
    ("d0", "Calculator", "340 - 275", "615", "65", 3.0, 2.8, 3.3),    # -0.5
    ("d0", "Calculator", "340 / 0", "615", "division_by_zero", None, None, None),
    ("d2", "Calculator", "212 + 87", "299", "299", 2.0, 2.2, 0.5),    # 1.5, kept
    ("d2", "Calculator", "212 * 87", "299", "18444", 2.0, 1.9, 1.7),  # 0.2
    ("d1", "Calculator", SCRIPT, "18,240", "syntax", None, None, None),
    ("d1", "QA", "Who lives in Brightwater?", "96,500", "96,500", 4.0, 3.5, 2.0),   # 1.5, kept
    ("d3", "QA", SCRIPT, "Kessford", "</span><b>bold</b>", 1.0, 1.2, 1.1),          # -0.1
    ("d4", "QA", "Who rebuilt the mill?", "Ann", "Ann Hale", 2.5, 2.4, 0.9),        # 1.5, kept
    ("d4", "QA", "When was the mill rebuilt?", "1888", "not_found", None, None, None),
]
TAU = {"Calculator": 0.5, "QA": 1.0}
ERRORS = {"division_by_zero", "syntax", "not_found"}


def _records(docs: list[dict], calls: list[tuple]):
    out = []
    for doc_id, tool, tool_input, anchor, outcome, l_none, l_no_result, l_with in calls:
        text = next(d["text"] for d in docs if d["doc_id"] == doc_id)
        char_start = text.index(anchor)
        sample = {"doc_id": doc_id, "tool": tool, "input": tool_input, "position": char_start // 3,
                  "char_start": char_start, "p_i": None, "source": "rules"}
        failed = outcome in ERRORS
        executed = {**sample, "result": None if failed else outcome,
                    "error": {"code": outcome, "message": f"{outcome} in {tool_input}"} if failed else None}
        filtered = dict(executed, call_text=None if failed else STYLE.render(tool, tool_input, outcome),
                        call_text_no_result=STYLE.render(tool, tool_input, ""), loss_none=l_none,
                        loss_no_result=l_no_result, loss_with_result=l_with, loss_minus=None, loss_plus=None,
                        tau_filter=TAU[tool], read_ahead=[], kept=False)
        if not failed:
            filtered["loss_minus"] = l_none if l_no_result is None else min(l_none, l_no_result)  # None: left out
            filtered["loss_plus"] = l_with
            filtered["kept"] = filtered["loss_minus"] - l_with >= TAU[tool]
        out.append((sample, executed, filtered))
    return out


def _write_stage(run: Path, name: str, records: list[dict], counts: dict, shard_size: int = 4) -> None:
    d = run / name
    d.mkdir(parents=True, exist_ok=True)
    for i in range(0, len(records), shard_size):
        write_jsonl(d / f"shard-{i // shard_size:05d}.jsonl", records[i:i + shard_size])
    (d / "manifest.json").write_text(json.dumps({"format": FORMAT, "stage": name, "config_hash": "x", "seed": 0,
                                                 "counts": counts,
                                                 "shards": (len(records) + shard_size - 1) // shard_size}))


def make_run(root: Path, stages=("sample", "execute", "filter"), docs=DOCS, calls=CALLS) -> Path:
    run = root / "run"
    (run / "sample").mkdir(parents=True)
    write_jsonl(run / "sample" / "documents.jsonl", docs)
    recs = _records(docs, calls)
    tools = ("Calculator", "QA")
    # A tool's pre-filter passes more documents than end up with candidates.
    sample_counts = {"documents": len(docs), "windows": len(docs), "per_tool": {t: {
        "documents": len({s["doc_id"] for s, _, _ in recs if s["tool"] == t}) + 1,
        "positions": len({(s["doc_id"], s["position"]) for s, _, _ in recs if s["tool"] == t}),
        "candidates": sum(s["tool"] == t for s, _, _ in recs)} for t in tools}}
    _write_stage(run, "sample", [s for s, _, _ in recs], sample_counts)
    if "execute" in stages:
        _write_stage(run, "execute", [e for _, e, _ in recs], {"per_tool": {t: {
            "candidates": sum(e["tool"] == t for _, e, _ in recs),
            "ok": sum(e["tool"] == t and e["error"] is None for _, e, _ in recs),
            "failed": sum(e["tool"] == t and e["error"] is not None for _, e, _ in recs)} for t in tools}})
    if "filter" in stages:
        _write_stage(run, "filter", [f for _, _, f in recs], {"per_tool": {t: {
            "candidates": sum(f["tool"] == t for _, _, f in recs),
            "scored": sum(f["tool"] == t and f["loss_plus"] is not None for _, _, f in recs),
            "kept": sum(f["tool"] == t and f["kept"] for _, _, f in recs), "read_ahead": 0} for t in tools}})
    return run


def expected_counts(run: Path) -> dict:
    """Funnel counts straight from the shard records (and the manifest for the
    two counts the records cannot give: documents and positions)."""
    def records(stage):
        return shard_records(run, stage)
    manifest = json.loads((run / "sample" / "manifest.json").read_text())["counts"]["per_tool"]
    out = {}
    for t in ("Calculator", "QA"):
        out[t] = {"documents": manifest[t]["documents"], "positions": manifest[t]["positions"],
                  "candidates": sum(r["tool"] == t for r in records("sample"))}
        if (run / "execute").exists():
            out[t]["executed_ok"] = sum(r["tool"] == t and r["error"] is None for r in records("execute"))
        if (run / "filter").exists():
            out[t]["kept"] = sum(r["tool"] == t and r["kept"] for r in records("filter"))
    return out


def cfg_for(run: Path, **inspect) -> PipelineConfig:
    cfg = PipelineConfig(run_dir=str(run))
    for k, v in inspect.items():
        setattr(cfg.inspect, k, v)
    return cfg


LABEL_TO_STEP = {"documents passing pre-filter": "documents", "positions kept": "positions",
                 "candidate calls": "candidates", "executed without error": "executed_ok",
                 "kept (L⁻ − L⁺ ≥ tau_f)": "kept"}
ROW = re.compile(r"^\s*(\S*)\s+(" + "|".join(re.escape(k) for k in LABEL_TO_STEP) + r")\s+([\d,]+|–)\s")


def terminal_funnel(out: str) -> dict:
    table, tool = {}, None
    for line in out.splitlines():
        m = ROW.match(line)
        if m:
            tool = m.group(1) or tool
            count = None if m.group(3) == "–" else int(m.group(3).replace(",", ""))
            table.setdefault(tool, {})[LABEL_TO_STEP[m.group(2)]] = count
    return table


class ReportParser(HTMLParser):
    """Funnel rows, script tags, images, call spans and page links of one page."""

    def __init__(self):
        super().__init__()
        self.funnel, self.tags, self.images, self.calls, self.links, self.text = {}, [], [], [], [], []
        self._row = self._cell = self._call = self._doc = None
        self.docs = []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        self.tags.append(tag)
        if tag == "tr" and "data-step" in a:
            self._row = (a["data-tool"], a["data-step"])
        if tag == "td" and self._row and "count" in (a.get("class") or "").split():
            self._cell = ""
        if tag == "img":
            self.images.append(a["src"])
        if tag == "a" and a.get("href", "").startswith("report"):
            self.links.append(a["href"])
        if tag == "span" and "call" in (a.get("class") or "").split() and "title" in a:  # not the legend
            self._call = {"class": a["class"].split()[1], "title": a["title"], "text": "", "doc": self._doc}
        if tag == "section" and a.get("class") == "doc":
            self._doc = a["id"]
            self.docs.append(a["id"])

    def handle_endtag(self, tag):
        if tag == "td" and self._cell is not None:
            tool, step = self._row
            self.funnel.setdefault(tool, {})[step] = None if self._cell == "–" else int(self._cell.replace(",", ""))
            self._cell = None
        if tag == "tr":
            self._row = None
        if tag == "section":
            self._doc = None
        if tag == "span" and self._call is not None:
            self.calls.append(self._call)
            self._call = None

    def handle_data(self, data):
        self.text.append(data)
        if self._cell is not None:
            self._cell += data
        if self._call is not None:
            self._call["text"] += data


def parse_page(path: Path) -> ReportParser:
    p = ReportParser()
    p.feed(path.read_text(encoding="utf-8"))
    return p


def test_terminal_funnel_equals_record_counts(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "250")  # rich wraps to the terminal width
    run = make_run(tmp_path)
    ins = run_stage(cfg_for(run)).output
    out = capsys.readouterr().out
    expected = expected_counts(run)
    assert expected["Calculator"] == {"documents": 4, "positions": 3, "candidates": 6, "executed_ok": 4, "kept": 2}
    assert terminal_funnel(out) == expected
    saved = json.loads((run / "inspect" / "funnel.json").read_text())
    assert {t: v["counts"] for t, v in saved["per_tool"].items()} == {
        t: dict(expected[t], failed=2 if t == "Calculator" else 1, scored=4 if t == "Calculator" else 3, read_ahead=0)
        for t in expected}
    assert saved["warnings"] == [] and saved["missing"] == []
    assert "gold" not in saved and ins.gold is None and "gold calls" not in out  # the documents have none
    assert gold_summary(run) is None
    # Quantiles of L⁻ − L⁺ over the four scored calculator calls: -0.5, 0.2, 1.5, 2.1.
    q = ins.quantiles["Calculator"]
    assert q["n"] == 4 and q["min"] == pytest.approx(-0.5) and q["max"] == pytest.approx(2.1)
    assert q["p50"] == pytest.approx(0.85)
    assert "Calculator: highest L⁻ − L⁺, kept calls" in out
    assert "[Calculator(340 + 275) → 615] 615 crates in all." in out
    assert re.search(r"inspect: 2 tool\(s\), kept 4 of 10 calls \(40\.0 %\)", out)
    manifest = json.loads((run / "inspect" / "manifest.json").read_text())
    assert manifest["counts"]["per_tool"]["QA"] == {"candidates": 4, "kept": 2, "shown": 4}


def test_report_html_funnel_escaping_and_plots(tmp_path, capsys):
    run = make_run(tmp_path)
    run_stage(cfg_for(run))
    page = parse_page(run / "inspect" / "report.html")
    assert page.funnel == expected_counts(run)
    assert "script" not in page.tags and "link" not in page.tags
    raw = (run / "inspect" / "report.html").read_text(encoding="utf-8")
    assert "Kept calls against gold calls" not in raw
    assert "&lt;script&gt;" in raw and "<b>bold" not in raw
    # The untrusted input and result come back as text, in call spans and tooltips.
    qa_script = next(c for c in page.calls if c["text"].startswith("[QA(<script>"))
    assert qa_script["text"] == "[QA(<script>alert('x')</script>) → </span><b>bold</b>]"
    assert qa_script["class"] == "rejected" and "L⁻ − L⁺ = -0.100 < tau_f 1.00" in qa_script["title"]
    kept = [c for c in page.calls if c["class"] == "kept"]
    assert "[Calculator(340 + 275) → 615]" in {c["text"] for c in kept}
    title = next(c["title"] for c in kept if c["text"] == "[Calculator(340 + 275) → 615]")
    assert "L(ε) = 3.000" in title and "L(e(c,ε)) = 2.500" in title and "L(e(c,r)) = 0.400" in title
    assert "L⁻ = 2.500   L⁺ = 0.400   margin = 2.100" in title
    failed = next(c for c in page.calls if c["class"] == "failed" and "340 / 0" in c["text"])
    assert "error: division_by_zero" in failed["title"]
    # Histograms: one PNG per tool on disk, the same bytes embedded as data URIs.
    for tool in ("Calculator", "QA"):
        png = (run / "inspect" / f"margin-{tool}.png").read_bytes()
        assert png.startswith(PNG_MAGIC)
        assert "data:image/png;base64," + base64.b64encode(png).decode() in page.images
    from PIL import Image

    with Image.open(run / "inspect" / "margin-Calculator.png") as im:
        im.verify()
        assert im.size[0] > 100 and im.size[1] > 100


def test_documents_show_every_call_in_place(tmp_path, capsys):
    run = make_run(tmp_path)
    run_stage(cfg_for(run))
    page = parse_page(run / "inspect" / "report.html")
    text = "".join(page.text)
    # d0: the three calculator calls before "615", kept first, each followed by the separator.
    d0 = DOCS[0]["text"]
    calls = ["[Calculator(340 + 275) → 615]", "[Calculator(340 - 275) → 65]", "[Calculator(340 / 0)]"]
    at = d0.index("615")
    assert d0[:at] + " ".join(calls) + " " + d0[at:] in text
    assert insert_calls(d0, [(at, c) for c in calls]) == d0[:at] + " ".join(calls) + " " + d0[at:]
    assert [c["doc"] for c in page.calls if c["doc"]] == ["doc-0"] * 3 + ["doc-1", "doc-1", "doc-2", "doc-2",
                                                                       "doc-3", "doc-4", "doc-4"]


def test_filters_restrict_what_is_shown(tmp_path, capsys):
    run = make_run(tmp_path)
    ins = run_stage(cfg_for(run), tool="QA").output
    out = capsys.readouterr().out
    assert ins.tools == ["QA"] and set(terminal_funnel(out)) == {"QA"}
    page = parse_page(run / "inspect" / "report.html")
    assert set(page.funnel) == {"QA"} and page.calls and all(c["text"].startswith("[QA(") for c in page.calls)
    assert not (run / "inspect" / "margin-Calculator.png").exists()
    # The funnel file always covers the whole run.
    assert set(json.loads((run / "inspect" / "funnel.json").read_text())["per_tool"]) == {"Calculator", "QA"}

    ins = run_stage(cfg_for(run), kept="yes").output
    shown = [r for calls in ins.selected.values() for r in calls]
    assert len(shown) == 4 and all(r["kept"] for r in shown)
    assert {c["class"] for c in parse_page(run / "inspect" / "report.html").calls} == {"kept"}

    ins = run_stage(cfg_for(run), kept="no", max_margin=0.5).output
    shown = sorted(r["loss_minus"] - r["loss_plus"] for calls in ins.selected.values() for r in calls)
    assert shown == pytest.approx([-0.5, -0.1, 0.2])
    assert "Calculator: highest L⁻ − L⁺, rejected calls" in capsys.readouterr().out

    ins = run_stage(cfg_for(run), min_margin=1.5).output
    assert sorted(r["input"] for calls in ins.selected.values() for r in calls) == [
        "212 + 87", "340 + 275", "Who lives in Brightwater?", "Who rebuilt the mill?"]
    with pytest.raises(ValueError, match="tool 'Calendar' is not in"):
        run_stage(cfg_for(run), tool="Calendar")


def test_paging_links_every_page(tmp_path, capsys):
    run = make_run(tmp_path)
    run_stage(cfg_for(run, page_size=2))
    pages = sorted(p.name for p in (run / "inspect").glob("report*.html"))
    assert pages == ["report-2.html", "report-3.html", "report.html"]
    docs, in_docs = [], 0
    for name in ("report.html", "report-2.html", "report-3.html"):
        page = parse_page(run / "inspect" / name)
        assert {"report.html", "report-2.html", "report-3.html"} - {name} <= set(page.links)
        docs.append(page.docs)
        in_docs += sum(c["doc"] is not None for c in page.calls)
    assert docs == [["doc-0", "doc-1"], ["doc-2", "doc-3"], ["doc-4"]]
    assert in_docs == len(CALLS)  # every call once, in its document
    # Ranking rows link to the page that shows the document.
    assert "report-2.html#doc-2" in parse_page(run / "inspect" / "report.html").links
    # A shorter report removes the pages it no longer has.
    run_stage(cfg_for(run, page_size=5))
    assert sorted(p.name for p in (run / "inspect").glob("report*.html")) == ["report.html"]


def test_sample_only_run_names_missing_stages(tmp_path, capsys):
    run = make_run(tmp_path, stages=("sample",))
    ins = run_stage(cfg_for(run)).output
    out = capsys.readouterr().out
    assert "missing stages: execute, filter" in out
    funnel = terminal_funnel(out)
    assert funnel["Calculator"] == {"documents": 4, "positions": 3, "candidates": 6, "executed_ok": None, "kept": None}
    assert ins.funnel["missing"] == ["execute", "filter"]
    assert re.search(r"inspect: 2 tool\(s\), 10 candidate calls, 10 shown; .*report\.html \(1 page\(s\)\); "
                     r"missing stages: execute, filter", out)
    page = parse_page(run / "inspect" / "report.html")
    assert {c["class"] for c in page.calls} == {"pending"} and len(page.calls) == len(CALLS)
    assert "[Calculator(340 + 275)]" in {c["text"] for c in page.calls}
    assert "missing stages: execute, filter" in "".join(page.text)
    assert not list((run / "inspect").glob("*.png"))
    # Calls without a rendered call_text take the call style the run saved.
    (run / "config.yaml").write_text("calls:\n  style: special\n")
    run_stage(cfg_for(run))
    assert "<API>Calculator(340 + 275)</API>" in {c["text"] for c in parse_page(run / "inspect" / "report.html").calls}


def test_mismatch_partial_and_bad_records(tmp_path, capsys):
    run = make_run(tmp_path)
    m = json.loads((run / "filter" / "manifest.json").read_text())
    m["counts"]["per_tool"]["QA"]["kept"] = 3
    (run / "filter" / "manifest.json").write_text(json.dumps(m))
    run_stage(cfg_for(run))
    assert "warning: filter: QA kept: manifest says 3, shard records give 2" in capsys.readouterr().out
    (run / "execute" / "manifest.json").unlink()  # an interrupted execute stage: counts from its records
    ins = run_stage(cfg_for(run)).output
    assert ins.funnel["stages"]["execute"] == "partial"
    step = ins.funnel["per_tool"]["QA"]["steps"][3]
    assert step["step"] == "executed_ok" and step["count"] == 3 and step["source"] == "records (stage partial)"
    with (run / "execute" / "shard-00001.jsonl").open("a") as f:
        f.write("{not json\n")
    with pytest.raises(ValueError, match=r"execute/shard-00001\.jsonl:5: invalid JSON"):
        run_stage(cfg_for(run))


def test_cli_inspect(tmp_path, capsys):
    run = make_run(tmp_path)
    assert main(["inspect", str(run), "inspect.top=1", "--tool", "Calculator", "--kept", "yes"]) == 0
    out = capsys.readouterr().out
    assert "Calculator: highest L⁻ − L⁺, kept calls" in out and "Calculator: lowest L⁻ − L⁺, kept calls" in out
    assert out.count("[Calculator(") == 2  # top 1 and bottom 1
    assert main(["inspect", str(tmp_path / "nope")]) == 2
    assert "no such run folder" in capsys.readouterr().err


def test_call_in_its_sentence():
    text = DOCS[0]["text"]
    rec = {"tool": "Calculator", "input": "340 + 275", "result": "615", "char_start": text.index("615")}
    assert in_context(text, rec, STYLE, " ", 200) == (
        "The market sold 340 crates and 275 crates, ", "[Calculator(340 + 275) → 615]", " 615 crates in all.")
    assert sentence_around(text, text.index("615"), 10) == (text.index("615") - 10, text.index("615") + 10)
    assert in_context(text, rec, STYLE, " ", 10)[0].startswith("…")


# -- kept calls against gold calls -------------------------------------------------------
# doc_id -> (text, gold calls as (tool, input, result): each starts where its result's text does; None: the
# record has no gold_calls field)
GOLD_TEXTS = {
    "g0": ("The market sold 340 crates and 275 crates, 615 crates in all.", [("Calculator", "340 + 275", "615")]),
    "g1": ("The Vell is 212 km long and the Oster 87 km, 299 km together.", [("Calculator", "212 + 87", "299")]),
    "g2": ("Brightwater has 96,500 people and Aldermoor 18,240.", [("QA", "How many live in Aldermoor?", "18,240")]),
    "g3": ("The mill was rebuilt in 1888 by Ann Hale.", [("QA", "Who rebuilt the mill?", "Ann Hale")]),
    "g4": ("Today the council of 12 towns met.", []),
    "g5": ("Not annotated: 40 + 2 is 42.", None),
}
GOLD_DOCS = [{"doc_id": d, "date": None, "text": text}
             | ({} if gold is None else {"gold_calls": [
                 {"tool": t, "input": i, "result": r, "char_start": text.index(r)} for t, i, r in gold]})
             for d, (text, gold) in GOLD_TEXTS.items()]
GOLD_RUN_CALLS = [  # as CALLS; tau_f 0.5 (Calculator), 1.0 (QA)
    ("g0", "Calculator", "340 + 275", "615", "615.0", 3.0, 2.5, 0.4),  # 2.1 kept, right: 615.0 == 615
    ("g1", "Calculator", "212 * 87", "299", "18444", 2.0, 1.9, 0.9),  # 1.0 kept, wrong result at the gold position
    ("g1", "Calculator", "212 + 87", "km, 299", "299", 2.0, 2.2, 0.2),  # 1.8 kept, 4 characters early: not there
    ("g4", "Calculator", "12 + 0", "12", "12", 2.0, 2.0, 1.4),  # 0.6 kept, a document without gold calls
    ("g5", "Calculator", "40 + 2", "42", "42", 2.0, 2.0, 0.5),  # 1.5 kept, not annotated: not judged
    ("g2", "QA", "Who lives in Brightwater?", "96,500", "96,500", 4.0, 3.5, 2.0),  # 1.5 kept, no QA gold call here
    ("g2", "QA", "How many live in Aldermoor?", "18,240", "18,240", 1.0, 1.2, 0.5),  # 0.5 rejected: not counted
    ("g3", "QA", "who rebuilt the mill", "y Ann", " ann hale ", 2.5, 2.4, 0.9),  # 1.5 kept, 2 characters early, right
]


def test_same_result_compares_numbers_for_the_calculator():
    assert same_result("Calculator", "561", "561.0") and same_result("Calculator", "-561", " -561 ")
    assert not same_result("Calculator", "561", "-561") and not same_result("Calculator", "561", None)
    assert same_result("QA", "Ann Hale", " ann hale ") and not same_result("QA", "561", "561.0")


def test_gold_precision_and_recall_per_tool(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "250")
    assert GOLD_TOLERANCE == 3
    run = make_run(tmp_path, docs=GOLD_DOCS, calls=GOLD_RUN_CALLS)
    ins = run_stage(cfg_for(run)).output
    out = capsys.readouterr().out
    calc = {"candidates": 4, "candidates_right": 1, "candidate_precision": 0.25,  # every call, kept or not
            "kept": 4, "kept_right": 1, "gold": 2, "gold_with_kept": 2, "gold_with_right_kept": 1,
            "precision": 0.25, "recall": 1.0, "recall_right": 0.5}
    qa = {"candidates": 3, "candidates_right": 2, "candidate_precision": pytest.approx(2 / 3),  # + the rejected one
          "kept": 2, "kept_right": 1, "gold": 2, "gold_with_kept": 1, "gold_with_right_kept": 1,
          "precision": 0.5, "recall": 0.5, "recall_right": 0.5}
    assert ins.gold["per_tool"] == {"Calculator": calc, "QA": qa}
    assert ins.gold["documents"] == 5 and ins.gold["tolerance"] == 3 and ins.gold["no_gold"] == {}
    assert gold_summary(run) == {"Calculator": calc, "QA": qa}
    # Wrong kept calls, largest L⁻ − L⁺ first, each in its sentence beside the gold call it was compared with.
    wrong = ins.gold["wrong"]
    assert [(w["input"], w["margin"]) for w in wrong["Calculator"]] == [
        ("212 + 87", pytest.approx(1.8)), ("212 * 87", pytest.approx(1.0)), ("12 + 0", pytest.approx(0.6))]
    early, at_gold, no_gold_doc = wrong["Calculator"]
    assert early["gold"] is None and no_gold_doc["gold"] is None
    assert at_gold["before"] + at_gold["call"] + at_gold["after"] == (
        "The Vell is 212 km long and the Oster 87 km, [Calculator(212 * 87) → 18444] 299 km together.")
    assert at_gold["gold"] == {"input": "212 + 87", "result": "299", "char_start": GOLD_TEXTS["g1"][0].index("299"),
                               "call": "[Calculator(212 + 87) → 299]"}
    assert [(w["doc_id"], w["gold"]) for w in wrong["QA"]] == [("g2", None)]
    # Terminal: one line per tool, then the wrong kept calls.
    assert ("Calculator: candidates right 25.0 % (1/4), precision 25.0 % (1/4), recall 100.0 % (2/2), "
            "with a right call 50.0 % (1/2)") in out
    assert ("QA: candidates right 66.7 % (2/3), precision 50.0 % (1/2), recall 50.0 % (1/2), "
            "with a right call 50.0 % (1/2)") in out
    assert "Calculator: wrong kept calls (3 of 3, largest L⁻ − L⁺ first)" in out
    assert ("[Calculator(212 * 87) → 18444] 299 km together.  (gold [Calculator(212 + 87) → 299])" in out)
    assert "[QA(Who lives in Brightwater?) → 96,500] 96,500 people and Aldermoor 18,240.  (no gold call here)" in out
    # funnel.json: the same numbers and examples.
    saved = json.loads((run / "inspect" / "funnel.json").read_text())
    assert saved["gold"]["per_tool"] == {"Calculator": calc, "QA": qa}
    assert [w["call"] for w in saved["gold"]["wrong"]["Calculator"]] == [
        "[Calculator(212 + 87) → 299]", "[Calculator(212 * 87) → 18444]", "[Calculator(12 + 0) → 12]"]
    # report.html: a table per tool and the wrong kept calls.
    raw = (run / "inspect" / "report.html").read_text(encoding="utf-8")
    assert "<h2>Kept calls against gold calls</h2>" in raw and '<table id="gold">' in raw
    row = re.search(r'<tr data-tool="Calculator"><td>Calculator</td>(.*?)</tr>', raw.split('<table id="gold">')[1])
    assert re.findall(r'<td class="num">([^<]*)</td>', row.group(1)) == [
        "4", "25.0 % (1/4)", "4", "25.0 % (1/4)", "2", "100.0 % (2/2)", "50.0 % (1/2)"]
    assert "Calculator: wrong kept calls (3 of 3, largest L⁻ − L⁺ first)" in raw
    assert "[Calculator(212 * 87) → 18444]</span> 299 km together." in raw and "no gold call here" in raw


def test_gold_section_is_escaped_and_follows_the_tool_filter(tmp_path, capsys):
    docs = [{"doc_id": "x", "date": None, "text": "Fact: the answer is <b>bold</b>.",
             "gold_calls": [{"tool": "QA", "input": "?", "result": "<b>bold</b>", "char_start": 20}]}]
    run = make_run(tmp_path, docs=docs, calls=[("x", "QA", SCRIPT, "<b>", "<i>no</i>", 3.0, 3.0, 0.5)])
    run_stage(cfg_for(run))
    page = parse_page(run / "inspect" / "report.html")
    assert "script" not in page.tags and "i" not in page.tags
    raw = (run / "inspect" / "report.html").read_text(encoding="utf-8")
    assert "[QA(&lt;script&gt;" in raw and "[QA(?) → &lt;b&gt;bold&lt;/b&gt;]" in raw
    ins = run_stage(cfg_for(run), tool="Calculator").output
    assert ins.gold["per_tool"]["QA"]["precision"] == 0.0  # funnel.json keeps every tool
    assert '<tr data-tool="QA">' not in (run / "inspect" / "report.html").read_text(encoding="utf-8")
