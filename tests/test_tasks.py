from pathlib import Path

import pytest

from toolformer.tasks import (
    TaskFormatError,
    extract_number,
    load_task,
    math_score,
    normalize_answer,
    parse_target_value,
    qa_score,
)

FIX = Path(__file__).parent / "fixtures" / "eval"


# -- metrics -------------------------------------------------------------------
@pytest.mark.parametrize("text, number", [
    ("The answer is 42 apples.", 42.0),
    ("He had 3 bags; 3 + 4 = 7 in all", 7.0),  # the first number after `=`
    ("there are 1,234 sheep", 1234.0),
    ("it costs 2.50 dollars, or 3", 2.5),
    ("10-2 makes it", 10.0),  # a minus between numbers is no sign
    ("the temperature was -5 degrees", -5.0),
    ("x = the answer is 12", 12.0),
    ("no = sign numbers 5 then", 5.0),
    ("nothing here", None),
    ("5 = nothing after", 5.0),  # `=` without a number after it: the first number
])
def test_extract_number(text, number):
    assert extract_number(text) == number


def test_math_score_two_decimals_and_units():
    assert math_score(" 9 apples", "9 (apples)") == (9.0, True)
    assert math_score(" 0.33 of the pie", "0.3333333")[1]
    assert not math_score(" 0.34", "0.3333333")[1]
    assert math_score(" 1,000 sheep", "1000")[1]
    assert math_score(" she had 7 + 5 = 12", "12")[1]
    assert not math_score(" she had 7 + 5 = 13", "12")[1]
    assert math_score(" none", "12") == (None, False)
    with pytest.raises(ValueError, match="has no number"):
        math_score("1", "Ann")


def test_normalize_answer():
    assert normalize_answer("The  Vessa-River!") == "vessa river"
    assert normalize_answer("An Apple a day") == "apple day"


def test_qa_alias_match_and_word_limit():
    assert qa_score(" It is the river Vessa, of course.", ["Vessa River", "River Vessa"])[1]  # alias
    assert qa_score(" The Vessa.", ["The Vessa"])[1]  # articles and punctuation ignored
    assert not qa_score(" Vessalin town", ["Vessa"])[1]  # whole words only
    far = " ".join(["word"] * 20) + " Vessa"
    head, ok = qa_score(far, ["Vessa"])
    assert not ok and head.split() == ["word"] * 20  # the 21st word is beyond the limit
    assert qa_score(far, ["Vessa"], max_words=21)[1]
    assert not qa_score(" a b c d e Brackenford", ["Brackenford"], max_words=5)[1]  # LAMA: 5 words


# -- loaders -------------------------------------------------------------------
def test_asdiv_units_removed_and_non_numeric_skipped():
    fmt, data = load_task(FIX / "ASDiv.xml")
    assert fmt == "asdiv"
    assert [i.answers for i in data.items] == [["9"], ["1000"], ["2.5"]]
    assert data.items[0].question == ("Seven red apples and two green apples are in the basket. "
                                      "How many apples are in the basket?")
    assert data.items[1].question.startswith("A farmer had 1,250 sheep and sold 250 of them. How")
    assert len(data.skipped) == 1 and "nluds-0004" in data.skipped[0]


def test_svamp_and_mawps():
    fmt, data = load_task(FIX / "SVAMP.json")
    assert fmt == "svamp" and [i.id for i in data.items] == ["chal-1", "chal-2", "chal-3"]
    assert data.items[1].question == "A baker made 144 cakes and put them in 12 boxes. How many cakes are in each box?"
    assert data.items[2].answers == ["5.25"]
    fmt, data = load_task(FIX / "mawps.json", max_items=2)
    assert fmt == "mawps" and [i.answers for i in data.items] == [["7.0"], ["24"]]
    assert data.items[0].id == "101"


def test_webquestions_both_shapes():
    fmt, data = load_task(FIX / "webquestions.json")
    assert fmt == "webqs"
    assert data.items[0].answers == ["Aldermoor Bridge", "Aldermoor"]
    assert data.items[1].question == "what river runs through brackenford?"
    _, data = load_task(FIX / "webquestions.jsonl", "webquestions")
    assert data.items[0].answers == ["Edda Marlow", "Edda Marlowe"]
    assert parse_target_value('(list (description "Say \\"hi\\"") (description X))') == ['Say "hi"', "X"]


def test_triviaqa_and_official_shape(tmp_path):
    fmt, data = load_task(FIX / "triviaqa.jsonl")
    assert fmt == "triviaqa" and data.items[0].answers == ["The Vessa", "Vessa River", "River Vessa"]
    p = tmp_path / "tqa.jsonl"
    p.write_text('{"question": "Q?", "answer": {"value": "Paris", "aliases": ["City of Light"]}}\n')
    assert load_task(p)[1].items[0].answers == ["Paris", "City of Light"]


def test_lama_keeps_mask_last_only():
    fmt, data = load_task(FIX / "lama.jsonl")
    assert fmt == "lama"
    assert [(i.id, i.question, i.answers) for i in data.items] == [
        ("t-1", "Edda Marlow was born in", ["Brackenford"]),
        ("t-2", "The capital of the Vessa valley is", ["Aldermoor"]),
    ]
    assert len(data.skipped) == 1 and "line 3" in data.skipped[0]


@pytest.mark.parametrize("name, text, fmt, message", [
    ("bad.jsonl", '{"question": "a", "answer": "b"}\n{"question": "c", "answer": \n', "triviaqa",
     r"bad\.jsonl: line 2: invalid JSON"),
    ("bad.jsonl", '{"question": "a", "answer": "b"}\n{"question": "c"}\n', "triviaqa",
     r"bad\.jsonl: line 2: missing key 'answer'"),
    ("bad.json", '[{"Body": "x", "Question": "y", "Answer": "many"}]', "svamp",
     r"bad\.json: item 0: Answer: 'many' is not a number"),
    ("bad.json", '[{"Body": "x", "Question": "y", "Answer": 1},\n {"Body": "x"]', "svamp",
     r"bad\.json: line 2: invalid JSON"),
    ("bad.xml", "<ProblemSet><Problem ID='p7'><Body>b</Body><Answer>1</Answer></Problem></ProblemSet>", "asdiv",
     r"bad\.xml: Problem p7: missing <Question>"),
    ("bad.xml", "<ProblemSet>\n<Problem>\n</ProblemSet>", "asdiv", r"bad\.xml: line 3, column \d+: invalid XML"),
    ("bad.jsonl", '{"qText": "q", "answers": "Paris"}\n', "webqs", r"line 1: answers: expected a list"),
    ("bad.jsonl", '{"foo": 1}\n', "auto", r"line 1: cannot tell the format"),
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
