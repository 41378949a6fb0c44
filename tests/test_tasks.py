import json
from fractions import Fraction
from pathlib import Path

import pytest

from toolformer.tasks import (
    KINDS,
    TaskFormatError,
    extract_number,
    gold_numbers,
    load_task,
    math_score,
    model_answer,
    normalize_answer,
    parse_target_value,
    qa_score,
)
from toolformer.tasks.score import call_counts, score_file

FIX = Path(__file__).parent / "fixtures" / "eval"
FIXTURES = sorted(p for p in FIX.iterdir() if p.suffix in (".json", ".jsonl", ".xml"))


# -- metrics -------------------------------------------------------------------
@pytest.mark.parametrize("text, number", [
    ("The answer is 42 apples.", 42.0),
    ("He had 3 bags; 3 + 4 = 7 in all", 7.0),  # the first number after `=`
    ("there are 1,234 sheep", 1234.0),
    ("it costs 2.50 dollars, or 3", 2.5),
    ("10-2 makes it", 10.0),  # a minus between numbers is no sign
    ("the temperature was -5 degrees", -5.0),
    ("the temperature was −6 degrees", -6.0),  # Unicode minus
    ("x = the answer is 12", 12.0),
    ("nothing here", None),
    ("5 = nothing after", 5.0),  # `=` without a number after it: the first number
    (" 51.\nQuestion: what is 2 + 2? 2 + 2 = 4", 51.0),  # only the answer's first line and sentence
    (" It is 51. So 2 + 2 = 4.", 51.0),
    (" half: 5/2 of them", 2.5),
    (" 2 1/2 hours", 2.5),
])
def test_extract_number(text, number):
    assert extract_number(text) == number


@pytest.mark.parametrize("gold, values", [
    ("9 (apples)", [9]), ("-(1/3)", [Fraction(-1, 3)]), ("5:45", [5, 45]), ("3:30 p.m.", [3, 30]),
    ("5; 15; 20", [5, 15, 20]), ("5/2 (cakes)", [Fraction(5, 2)]), ("Yes", []), ("Ann", []), ("1,250", [1250]),
])
def test_gold_numbers(gold, values):
    assert gold_numbers(gold) == values


def test_math_score_compares_values():
    assert math_score(" 9 apples", "9 (apples)") == (9.0, True)
    assert math_score(" 0.33 of the pie", "0.3333333")[1]
    assert not math_score(" 0.34", "0.3333333")[1]
    assert math_score(" 0.63.", "0.625")[1]  # half up: 0.625 -> 0.63
    assert math_score(" 2.5 cakes", "5/2")[1] and math_score(" 5/2", "2.5")[1]
    assert math_score(" -0.33", "-(1/3)")[1]
    assert math_score(" 1,000 sheep", "1000")[1]
    assert math_score(" she had 7 + 5 = 12", "12")[1]
    assert not math_score(" she had 7 + 5 = 13", "12")[1]
    assert math_score(" 5:45", "5:45")[1] and not math_score(" 5:40", "5:45")[1]  # every part of a ratio
    assert math_score(" at 3:30 pm", "3:30 p.m.")[1] and not math_score(" 3:45", "3:30 p.m.")[1]
    assert not math_score(" 5, 15 and 21", "5; 15; 20")[1] and math_score(" 5, 15 and 20", "5; 15; 20")[1]
    assert not math_score(" 6", "-6")[1] and math_score(" −6", "-6")[1]
    assert not math_score(" 51.\nQuestion: what is 2 + 2? 2 + 2 = 4", "4")[1]
    assert math_score(" none", "12") == (None, False)
    with pytest.raises(ValueError, match="has no number"):
        math_score("1", "Ann")


def test_normalize_answer():
    assert normalize_answer("The  Vessa River!") == "vessa river"
    assert normalize_answer("An Apple a day") == "apple day"
    assert normalize_answer("Zakāt") == "zakat"
    assert normalize_answer("24,900 miles") == "24900 miles"
    assert normalize_answer("Semi-presidential system") == "semi-presidential system"


def test_qa_alias_match_and_word_limit():
    assert qa_score(" It is the river Vessa, of course.", ["Vessa River", "River Vessa"])[1]  # alias
    assert qa_score(" The Vessa.", ["The Vessa"])[1]  # articles and punctuation ignored
    assert not qa_score(" Vessalin town", ["Vessa"])[1]  # whole words only
    assert qa_score(" Zakat is paid yearly", ["Zakāt"])[1]  # accents folded
    assert qa_score(" about 24900 miles", ["24,900 miles"])[1]  # thousands separators
    assert not qa_score(" Semi-presidential system", ["Presidential system"])[1]  # no partial hyphen match
    far = " ".join(["word"] * 20) + " Vessa"
    head, ok = qa_score(far, ["Vessa"])
    assert not ok and head.split() == ["word"] * 20  # the 21st word is beyond the limit
    assert qa_score(far, ["Vessa"], max_words=21)[1]
    assert not qa_score(" a b c d e Brackenford", ["Brackenford"], max_words=5)[1]  # LAMA: 5 words


def test_unclosed_call_is_cut_and_counted():
    assert model_answer(" The answer is [QA(What is 5 + 3") == (" The answer is ", True)
    assert model_answer(" [Calculator(3 + 4) → 7] 7 apples") == (" 7 apples", False)
    assert not math_score(model_answer(" [QA(how many is 12")[0], "12")[1]  # no number read from inside


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
