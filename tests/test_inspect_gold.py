"""Kept calls against gold calls: precision and recall per tool in ``toolformer inspect`` (terminal, funnel.json,
report.html, escaped and following the tool filter), and at other tau_f from the filter's records
(toolformer.inspect.sweep.gold_by_tau and ``python -m toolformer.smallworld.lab.gold_by_tau``)."""

import json
import re
import subprocess
import sys

import pytest
from inspect_runs import GOLD_DOCS, GOLD_RUN_CALLS, GOLD_TEXTS, SCRIPT, cfg_for, make_run, parse_page

from toolformer.inspect.gold import GOLD_TOLERANCE, gold_summary, same_result
from toolformer.inspect.sweep import gold_by_tau
from toolformer.stages.inspect import run_stage


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


@pytest.mark.slow
def test_precision_and_recall_at_each_threshold(tmp_path):
    # Calculator margins: 2.1 right at g0, 1.0 wrong at g1's gold, 1.8 wrong 4 characters early, 0.6 in a document
    # without gold calls, 1.5 in one not annotated (not judged).
    run = make_run(tmp_path, docs=GOLD_DOCS, calls=GOLD_RUN_CALLS)
    rows = gold_by_tau(run, "Calculator", [0.5, 1.5, 3.0])
    assert rows == [
        {"tau": 0.5, "kept": 4, "kept_right": 1, "precision": 0.25, "recall": 1.0},  # what the filter kept
        {"tau": 1.5, "kept": 2, "kept_right": 1, "precision": 0.5, "recall": 0.5},
        {"tau": 3.0, "kept": 0, "kept_right": 0, "precision": None, "recall": 0.0}]
    assert gold_by_tau(run, "QA", [1.0])[0]["kept"] == 2
    out = subprocess.run([sys.executable, "-m", "toolformer.smallworld.lab.gold_by_tau", str(run), "--tau", "1.5"],
                         capture_output=True, text=True, check=True).stdout
    assert out == "Calculator tau_f 1.5: kept 2 (1 right), precision 50.0 %, recall 50.0 %\n"


def test_no_sweep_below_the_runs_tau_where_the_filter_left_losses_out(tmp_path):
    # L(ε) − L⁺ = 0.1 < tau_f 0.5 rejected the last call before L(e(c, ε)) was computed:
    # at tau_f 0.05 it might have been kept, and the sweep cannot say.
    calls = GOLD_RUN_CALLS + [("g4", "Calculator", "12 + 1", "12", "13", 2.0, None, 1.9)]
    run = make_run(tmp_path, docs=GOLD_DOCS, calls=calls)
    assert gold_by_tau(run, "Calculator", [0.5])[0]["kept"] == 4
    with pytest.raises(ValueError, match=r"1 Calculator calls .* tau_f 0\.05 .* rerun the filter at tau_f 0\.05"):
        gold_by_tau(run, "Calculator", [0.05, 0.5])
    assert gold_by_tau(run, "QA", [0.25])[0]["kept"] == 3  # QA lost no loss


@pytest.mark.slow
def test_a_run_without_gold_or_filter_says_so(tmp_path):
    docs = [{k: v for k, v in d.items() if k != "gold_calls"} for d in GOLD_DOCS]
    run = make_run(tmp_path / "a", docs=docs, calls=GOLD_RUN_CALLS)
    with pytest.raises(ValueError, match="no gold call of Calculator"):
        gold_by_tau(run, "Calculator", [1.0])
    bare = make_run(tmp_path / "b", stages=("sample",), docs=GOLD_DOCS, calls=GOLD_RUN_CALLS)
    with pytest.raises(FileNotFoundError, match="no filter stage"):
        gold_by_tau(bare, "Calculator", [1.0])
    done = subprocess.run([sys.executable, "-m", "toolformer.smallworld.lab.gold_by_tau", str(bare)],
                          capture_output=True, text=True)
    assert done.returncode == 2 and "no filter stage" in done.stderr
