"""python -m toolformer.smallworld.lab.math_errors: each wrong arithmetic answer by what its call got wrong."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # every test here starts a Python process

PROMPT = "Tom had 6,305 stamps and bought 3471 more. How many stamps does Tom have now? The answer is"


def item(correct: bool, call: str | None, result: str = "", gold: str = "9776") -> dict:
    calls = [] if call is None else [{"tool": "Calculator", "input": call, "result": result, "error": None}]
    return {"prompt": PROMPT, "calls": calls, "correct": correct, "gold": gold}


def run(tmp_path: Path, rows: list, *args: str) -> subprocess.CompletedProcess:
    path = tmp_path / "eval" / "predictions" / "toolformer" / "math_unseen.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(r if isinstance(r, str) else json.dumps(r) + "\n" for r in rows))
    return subprocess.run([sys.executable, "-m", "toolformer.smallworld.lab.math_errors", str(tmp_path), *args],
                          capture_output=True, text=True)


def test_each_item_counts_once_by_its_first_call(tmp_path):
    rows = [item(True, "6305 + 3471", "9776"),
            item(False, None),
            item(False, "3471 - 6305", "-2834"),  # both numbers (the separator dropped), wrong operation
            item(False, "6305 + 6305", "12610"),  # one number twice
            item(False, "1791 / 9", "199"),  # none of them
            item(False, "6305 + 3471", "9776"),  # a right call, then a wrong answer
            dict(item(False, "6305 + 3471", "9776"),  # a call opened where an operand goes
                 output=" 6305 + [Calculator(6305 + 3471) → 9776] 9776.")]
    done = run(tmp_path, rows)
    assert done.returncode == 0, done.stderr
    assert done.stdout == (
        "toolformer math_unseen: 7 items; right 1, no call 1, call after an operator 1, right call, wrong answer 1, "
        "operation or order wrong 1, one operand wrong 1, no operand from the problem 1\n")


def test_a_broken_line_or_a_missing_file_is_named(tmp_path):
    done = run(tmp_path, [item(True, "6305 + 3471", "9776"), "{not json\n"])
    assert done.returncode == 2 and "math_unseen.jsonl:2: not a prediction record" in done.stderr
    missing = subprocess.run([sys.executable, "-m", "toolformer.smallworld.lab.math_errors", str(tmp_path / "none")],
                             capture_output=True, text=True)
    assert missing.returncode == 2 and "not found (toolformer evaluate writes it)" in missing.stderr


def test_by_form_counts_each_form_of_the_world_eval_set(tmp_path):
    rows = [dict(item(True, "6305 + 3471", "9776"), id="0"), dict(item(False, "6305 + 6305", "12610"), id="1"),
            dict(item(False, None), id="2")]
    world = tmp_path / "world"
    world.mkdir()
    forms = [{"Body": "b", "Question": "q", "Answer": 1, "Form": f} for f in ("add-sum", "add-sum", "sub-sold")]
    (world / "eval_math_unseen.json").write_text(json.dumps(forms))
    done = run(tmp_path, rows, "--by-form")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[1:] == ["  sub-sold: 0/1 right; no call 1",
                                            "  add-sum: 1/2 right; one operand wrong 1"]
    (world / "eval_math_unseen.json").write_text(json.dumps([{"Body": "b"}]))
    broken = run(tmp_path, rows, "--by-form")
    assert broken.returncode == 2 and "eval_math_unseen.json: not a small-world evaluation file" in broken.stderr
