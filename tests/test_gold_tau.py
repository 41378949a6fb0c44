"""python -m toolformer.smallworld.lab.gold_by_tau: the kept calls' precision and recall at other tau_f, from the
filter's records."""

import subprocess
import sys
from pathlib import Path

import pytest
from test_inspect import GOLD_DOCS, GOLD_RUN_CALLS, make_run

from toolformer.inspect.sweep import gold_by_tau

ROOT = Path(__file__).resolve().parent.parent


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
