"""`toolformer inspect` on run folders written by hand (tests/inspect_runs.py): the funnel in the terminal and in
the HTML report, untrusted text escaped, the margin histograms, the documents with their calls, the filters, paging,
missing and partial stages. (Kept calls against gold calls: test_inspect_gold.py.)"""

import base64
import json
import re

import pytest
from inspect_runs import CALLS, DOCS, PNG_MAGIC, STYLE, cfg_for, expected_counts, make_run, parse_page, terminal_funnel

from toolformer.cli.app import main
from toolformer.inspect.gold import gold_summary
from toolformer.inspect.view import in_context, sentence_around
from toolformer.stages.inspect import run_stage
from toolformer.tools.calls import insert_calls


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


def test_the_margin_histogram_keeps_upper_bounds_apart():
    """A rejected call whose L(e(c, ε)) the filter left out has only the upper bound L(ε) − L⁺: its own series."""
    from toolformer.inspect.report import margin_histogram, split_margins

    def rec(l_none, l_no, l_plus, kept):
        return {"loss_none": l_none, "loss_no_result": l_no, "loss_plus": l_plus, "kept": kept,
                "loss_minus": l_none if l_no is None else min(l_none, l_no)}

    calls = [rec(3.0, 2.5, 0.5, True), rec(2.0, 1.75, 1.5, False), rec(1.0, None, 1.5, False),
             {"loss_none": None, "loss_no_result": None, "loss_plus": None, "loss_minus": None, "kept": False}]
    assert split_margins(calls) == ([2.0], [0.25], [-0.5])
    png = margin_histogram("Calculator", calls, 0.5, 8)
    assert png is not None and png.startswith(b"\x89PNG")
    assert margin_histogram("Calculator", calls[3:], 0.5, 8) is None
