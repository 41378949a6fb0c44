"""Evaluation task files (toolformer.tasks): the loaders of each published layout (ASDiv, SVAMP, MAWPS,
WebQuestions, TriviaQA, LAMA), gold answers of every fixture scoring 100 % and perturbed ones 0 %, bad records and
files named, and ``toolformer tasks check`` and ``toolformer tasks score``. (Scoring one answer:
test_task_metrics.py.)"""

import json
from fractions import Fraction

import pytest
from helpers import ROOT

from toolformer.tasks import (
    KINDS,
    TaskFormatError,
    gold_numbers,
    load_task,
    parse_target_value,
)
from toolformer.tasks.formats import lama_prompt
from toolformer.tasks.score import call_counts, score_file

FIX = ROOT / "tests" / "fixtures" / "eval"
FIXTURES = sorted(p for p in FIX.iterdir() if p.suffix in (".json", ".jsonl", ".xml"))


# -- loaders -------------------------------------------------------------------
def test_asdiv_answer_kinds_and_non_numeric_skipped():
    fmt, data = load_task(FIX / "ASDiv.xml")
    assert fmt == "asdiv" and data.total == 10
    assert [i.answers[0] for i in data.items] == ["9", "1000", "2.5", "-(1/3)", "5:45", "3:30 p.m.", "5; 15; 20",
                                                  "5/2"]
    assert data.items[0].question == ("Seven red apples and two green apples are in the basket. "
                                      "How many apples are in the basket?")
    assert data.items[1].question.startswith("A farmer had 1,250 sheep and sold 250 of them. How")
    assert [(s["id"], s["reason"]) for s in data.skipped] == [("nluds-0004", "answer is not a number"),
                                                              ("nluds-0010", "answer is not a number")]


def test_svamp_and_mawps_layouts():
    fmt, data = load_task(FIX / "SVAMP.json")
    assert fmt == "svamp" and [i.id for i in data.items] == ["chal-1", "chal-2", "chal-3"]
    assert data.items[1].question == "A baker made 144 cakes and put them in 12 boxes. How many cakes are in each box?"
    assert data.items[2].answers == ["5.25"]
    fmt, data = load_task(FIX / "mawps.json", max_items=2)
    assert fmt == "mawps" and [i.answers for i in data.items] == [["7.0"], ["24"]] and data.items[0].id == "101"
    fmt, data = load_task(FIX / "mawps_single.json")  # auto: iIndex / sQuestion / lSolutions
    assert fmt == "mawps" and [(i.id, i.answers) for i in data.items] == [
        ("3238", ["504.0"]), ("285", ["98"]), ("3217", ["0.625"])]
    assert data.items[0].question == "Bela has 56 cups on each of her 9 shelves. How many cups does she have?"
    fmt, data = load_task(FIX / "mawps_fold0_test.orig.jsonl")  # the item under "original"
    assert fmt == "mawps" and [(i.id, i.answers) for i in data.items] == [
        ("mawps_fold0_test-02490", ["30.0"]), ("mawps_fold0_test-00244", ["6.5"])]


def test_webquestions_layouts():
    fmt, data = load_task(FIX / "webquestions.json")
    assert fmt == "webqs"
    assert data.items[0].answers == ["Aldermoor Bridge", "Aldermoor"]
    assert data.items[1].question == "what river runs through brackenford?"
    _, data = load_task(FIX / "webquestions.jsonl", "webquestions")
    assert data.items[0].answers == ["Edda Marlow", "Edda Marlowe"]
    _, data = load_task(FIX / "webquestions_qid.json")
    assert [i.id for i in data.items] == ["wqr000001", "wqr000002", "wqr000003", "wqr000004"]
    assert parse_target_value('(list (description "Say \\"hi\\"") (description X))') == ['Say "hi"', "X"]


def test_triviaqa_layouts(tmp_path):
    fmt, data = load_task(FIX / "triviaqa.jsonl")
    assert fmt == "triviaqa" and data.items[0].answers == ["The Vessa", "Vessa River", "River Vessa"]
    fmt, data = load_task(FIX / "triviaqa-unfiltered-dev.json")  # the official {"Data": [...]}
    assert fmt == "triviaqa" and [(i.id, i.answers[0]) for i in data.items] == [("tc_1", "The Vessa"),
                                                                               ("tc_2", "Ilse Harrow")]
    assert data.items[0].answers[1:] == ["Vessa River", "River Vessa"]
    fmt, data = load_task(FIX / "triviaqa_small.jsonl")  # llm-foundry: context / answer / aliases
    assert fmt == "triviaqa" and data.total == 2 and not data.skipped
    assert data.items[0].question == "Who was the first mayor of Aldermoor?"
    assert data.items[1].question == "Which bridge\u0085 crosses the Vessa\u2028 at Aldermoor?"  # split at \n only
    p = tmp_path / "tqa.jsonl"
    p.write_text('{"question": "Q?", "answer": {"value": "Paris", "aliases": ["City of Light"]}}\n')
    assert load_task(p)[1].items[0].answers == ["Paris", "City of Light"]


def test_lama_keeps_mask_last_only():
    fmt, data = load_task(FIX / "lama.jsonl")  # Google-RE layout
    assert fmt == "lama"
    assert [(i.id, i.question, i.answers) for i in data.items] == [
        ("t-1", "Edda Marlow was born in", ["Brackenford"]),
        ("t-2", "The capital of the Vessa valley is", ["Aldermoor"]),
    ]
    assert [(s["where"].split(": ")[-1], s["reason"]) for s in data.skipped] == [
        ("line 3", "[MASK] is not the last word")]
    fmt, data = load_task(FIX / "trex_P19.jsonl")  # T-REx: evidences[].masked_sentence
    assert fmt == "lama" and [(i.id, i.question) for i in data.items] == [("a1", "Edda Marlow was born in")]
    assert data.reasons() == {"[MASK] is not the last word": 1}
    _, data = load_task(FIX / "squad_test.jsonl")
    assert data.items[0].question == "The bridge over the Vessa is made of" and data.items[0].answers == ["stone"]


@pytest.mark.parametrize("sentence, prompt", [
    ("Edda Marlow (born in [MASK]).", "Edda Marlow (born in"),
    ("Edda Marlow (born in [MASK]) .", "Edda Marlow (born in"),
    ("Edda Marlow was born in [MASK]:", "Edda Marlow was born in"),
    ("Edda Marlow was born in [MASK] .", "Edda Marlow was born in"),
    ("Edda Marlow was born in [MASK]", "Edda Marlow was born in"),
    ("Edda Marlow was born in [MASK] in 1901.", None),  # a mask in the middle: refused as before
    ("Edda Marlow was born in [MASK] (", None),
    ("[MASK].", None),
])
def test_lama_accepts_closing_punctuation_after_the_mask(sentence, prompt):
    assert lama_prompt(sentence) == prompt


def test_trex_sentence_with_bracket_after_mask_is_loaded(tmp_path):
    rows = [
        {"uuid": "b1", "obj_label": "Brackenford", "sub_label": "Edda Marlow", "predicate_id": "P19",
         "evidences": [{"masked_sentence": "[MASK] is where Edda Marlow was born."},
                       {"masked_sentence": "Edda Marlow (born 1901 in [MASK])."}]},
        {"uuid": "b2", "obj_label": "Aldermoor", "sub_label": "Ilse Harrow", "predicate_id": "P19",
         "evidences": [{"masked_sentence": "In [MASK], Ilse Harrow was born."}]},
    ]
    path = tmp_path / "P19.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    fmt, data = load_task(path)
    assert fmt == "lama"
    assert [(i.id, i.question) for i in data.items] == [("b1", "Edda Marlow (born 1901 in")]
    assert data.reasons() == {"[MASK] is not the last word": 1}


# -- every fixture: gold answers as a model writes them score 100 %, perturbed ones 0 % ----------------------
def _decimal(v: Fraction) -> str:
    return f"{float(v):.6f}".rstrip("0").rstrip(".")


def _as_model_writes(answer: str, kind: str) -> str:
    if kind == "math":
        return " The answer is " + ":".join(_decimal(v) for v in gold_numbers(answer)) + ". Next question."
    return f" It is {answer}, I think."


def _perturbed(answer: str, kind: str) -> str:
    if kind == "math":
        values = gold_numbers(answer)
        values[-1] += 1
        return " The answer is " + ":".join(_decimal(v) for v in values) + "."
    return " It is " + " ".join("Q" + w for w in answer.split()) + "."


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: p.name)
def test_gold_scores_all_and_perturbed_none(path):
    fmt, data = load_task(path)
    kind = KINDS[fmt]
    gold = {i.id: _as_model_writes(i.answers[0], kind) for i in data.items}
    wrong = {i.id: _perturbed(i.answers[0], kind) for i in data.items}
    long = [i.id for i in data.items if kind == "qa" and len(i.answers[0].split()) > 15]
    _, right = score_file(data, gold, kind, fmt)
    assert right["accuracy"] == (len(data.items) - len(long)) / len(data.items), right
    assert right["golds_longer_than_window" if kind == "qa" else "scored"] == (len(long) if kind == "qa" else
                                                                               len(data.items))
    records, bad = score_file(data, wrong, kind, fmt)
    assert bad["correct"] == 0, [r for r in records if r["correct"]]


# -- bad input -------------------------------------------------------------------
def test_bad_records_are_skipped_with_their_reason(tmp_path):
    p = tmp_path / "mixed.jsonl"
    p.write_text('{"question": "a", "answer": "b"}\n{"question": "c", "answer": \n{"question": "c"}\n[1, 2]\n'
                 '{"id": "q9", "question": "d", "answer": "e", "aliases": "f"}\n')
    _, data = load_task(p, "triviaqa")
    assert [i.question for i in data.items] == ["a"] and data.total == 5
    assert [(s["where"].split(": ")[-1], s["reason"]) for s in data.skipped] == [
        ("line 2", "invalid JSON"), ("line 3", "missing field"), ("line 4", "not a JSON object"),
        ("line 5", "bad field")]
    assert data.skipped[-1]["id"] == "q9"
    p = tmp_path / "svamp.json"
    p.write_text('[{"Body": "x", "Question": "y", "Answer": "many"}, {"Body": "x", "Question": "y", "Answer": 2}]')
    _, data = load_task(p, "svamp")
    assert len(data.items) == 1 and data.skipped[0]["reason"] == "answer is not a number"


@pytest.mark.parametrize("name, text, fmt, message", [
    ("bad.json", '[{"Body": "x", "Question": "y", "Answer": 1},\n {"Body": "x"]', "svamp",
     r"bad\.json: line 2: invalid JSON"),
    ("bad.xml", "<ProblemSet>\n<Problem>\n</ProblemSet>", "asdiv", r"bad\.xml: line 3, column \d+: invalid XML"),
    ("bad.jsonl", '{"foo": 1}\n', "auto", r"line 1: cannot tell the format"),
    ("bad.jsonl", '{"question": "c"}\n', "triviaqa", r"bad\.jsonl: no usable items as triviaqa \(1 skipped: "
                                                     r".*line 1: missing field\)"),
])
def test_bad_files_name_file_and_line(tmp_path, name, text, fmt, message):
    p = tmp_path / name
    p.write_text(text)
    with pytest.raises(TaskFormatError, match=message):
        load_task(p, fmt)


def test_missing_file_and_unknown_format(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.jsonl: task file not found"):
        load_task(tmp_path / "nope.jsonl")
    with pytest.raises(ValueError, match="unknown task format 'csv'"):
        load_task(FIX / "triviaqa.jsonl", "csv")


# -- the two commands -------------------------------------------------------------
def test_tasks_check_and_score_commands(tmp_path, capsys):
    from toolformer.cli.app import main

    assert main(["tasks", "check", str(FIX / "ASDiv.xml")]) == 0
    out = capsys.readouterr().out
    assert "10 records in the file, 8 items loaded, 2 skipped" in out and "answer is not a number" in out
    assert "nluds-0010" in out
    preds = tmp_path / "preds.jsonl"
    preds.write_text("\n".join(json.dumps(r) for r in [
        {"id": "nluds-0001", "output": " 9 apples."}, {"id": "nluds-0002", "output": " [Calculator(1250 - 250"},
        {"id": "nluds-0006", "output": " 5:45"}, {"id": "unknown", "output": " 1"}, "not an object"]) + "\n")
    assert main(["score", str(FIX / "ASDiv.xml"), "--predictions", str(preds), "--json"]) == 0
    counts = json.loads(capsys.readouterr().out)
    assert (counts["correct"], counts["scored"], counts["skipped"], counts["in_file"]) == (2, 8, 2, 10)
    assert (counts["without_output"], counts["outputs_not_in_file"], counts["malformed_calls"]) == (5, 1, 1)
    assert counts["unusable_lines"] == 1
    rows = [json.loads(line) for line in (tmp_path / "preds.scores.jsonl").read_text().splitlines()]
    assert [r["correct"] for r in rows[:3]] == [True, False, False] and rows[1]["malformed_call"]
    assert main(["score", str(FIX / "ASDiv.xml"), "--predictions", str(preds), "--out", str(preds)]) == 2


def test_call_counts_by_kind():
    records = [
        {"calls": [{"error": None}], "output": " [Calculator(1+1) → 2] 2"},
        {"calls": [{"error": {"code": "unknown_tool"}}], "output": " [Foo(1) →] x"},
        {"calls": [{"error": {"code": "syntax"}}], "output": " [Calculator(1 +) →]"},
        {"calls": [{"error": {"code": "not_found"}}], "output": " [QA(Who?) →] x"},  # well formed, no answer
        {"calls": [{"error": {"code": "no_result_marker"}}], "output": " [QA(Who?)] x"},
        {"calls": [], "output": " x [QA(Who is", "malformed_call": True},  # the input never closed
        {"calls": [], "output": " x [QA(Who?)"},  # closed input, cut before the result marker
        {"calls": [], "output": " x"},
    ]
    counts = call_counts(records)
    assert counts["calls"] == 7
    assert counts["malformed"] == {"unknown_tool": 1, "unparsable_input": 1, "no_result_marker": 1, "unclosed": 2}
    assert counts["malformed_per_100_calls"] == round(500 / 7, 2)
    assert call_counts([{"calls": [], "output": "x"}])["malformed_per_100_calls"] is None


# -- numbers of any length, text that is no text, XML entities ------------------------------------------------------
def test_an_item_with_a_number_too_long_is_skipped_naming_its_line_the_rest_loaded(tmp_path, capsys):
    from toolformer.cli.app import main

    gsm = tmp_path / "gsm.jsonl"
    gsm.write_text("\n".join(json.dumps(r) for r in [
        {"question": "Ann has 3. How many?", "answer": "#### 3"}, {"question": "Big?", "answer": "#### " + "7" * 5000},
        {"question": "Bo has 4. How many?", "answer": "#### 4"}, {"question": "Odd?", "answer": "#### 1\ud800"},
    ]) + "\n")
    _, data = load_task(gsm)
    assert [i.answers for i in data.items] == [["3"], ["4"]]
    assert [(s["where"], s["reason"]) for s in data.skipped] == [
        (f"{gsm}: line 2", "answer number too long"), (f"{gsm}: line 4", "not text")]
    assert "5,000 digits (at most 50)" in data.skipped[0]["detail"]
    assert main(["tasks", "check", str(gsm)]) == 0
    assert f"{gsm}: line 2" in capsys.readouterr().out
    mawps = tmp_path / "mawps.json"  # a JSON list: an integer int() cannot read skips its item, not the file
    mawps.write_text('[{"id": "a", "original_text": "Dee had 7 apples .", "ans": 7}, {"id": "b", "original_text": '
                     f'"Big .", "ans": {"9" * 5000}}}, {{"id": "c", "original_text": "Far .", "ans": 1e300}}]')
    _, data = load_task(mawps, "mawps")
    assert [i.id for i in data.items] == ["a"]
    assert [(s["where"], s["reason"]) for s in data.skipped] == [
        (f"{mawps}: item 1", "answer number too long"), (f"{mawps}: item 2", "answer number too long")]


def test_asdiv_that_declares_an_entity_is_refused_naming_the_file(tmp_path, capsys):
    from toolformer.cli.app import main

    problem = ('<Machine-Reading-Corpus-File><ProblemSet><Problem ID="x1"><Body>{} Ann has 3 apples.</Body>'
               "<Question>How many apples?</Question><Answer>3</Answer></Problem></ProblemSet>"
               "</Machine-Reading-Corpus-File>")
    bomb = tmp_path / "asdiv.xml"
    entities = ['<!ENTITY l0 "lol">'] + [f'<!ENTITY l{i} "{f"&l{i - 1};" * 10}">' for i in range(1, 7)]
    bomb.write_text('<?xml version="1.0"?>\n<!DOCTYPE a [\n' + "\n".join(entities) + "\n]>\n"
                    + problem.format("&l6;"))
    with pytest.raises(TaskFormatError, match=r"asdiv\.xml: declares an XML entity .*never expanded"):
        load_task(bomb, "asdiv")
    assert main(["tasks", "check", str(bomb)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(bomb) in err[0] and "Traceback" not in err[0]
    plain = tmp_path / "plain.xml"  # a DOCTYPE without entities, and the predefined ones, read as before
    plain.write_text("<!DOCTYPE a>\n" + problem.format("Tom &amp; Ann:"))
    assert load_task(plain, "asdiv")[1].items[0].question.startswith("Tom & Ann: Ann has 3 apples.")
