"""Scorer fixes: chained equations, abbreviations, signed mixed numbers, initials, symbol answers, LAMA tails."""

import json
from fractions import Fraction

import pytest

from toolformer.tasks import gold_fits, load_task, math_score, normalize_answer, qa_score
from toolformer.tasks.formats import lama_prompt
from toolformer.tasks.metrics import answer_span, numbers


# -- math ----------------------------------------------------------------------
@pytest.mark.parametrize("output, gold", [
    ("x = 7 + 55 = 62 peanuts", "62"),  # a chained equation is read at its last `=`
    ("The answer is 200 + 237 = 437.", "437"),
    ("3 x 4 = 12 = 12 eggs", "12"),
    ("x = 5, y = 3", "5"),  # two equations, not a chain: the first `=` as before
    ("a = 2; b = 9", "2"),
    ("He had 3 bags; 3 + 4 = 7 in all", "7"),
])
def test_chained_equation_read_at_its_end(output, gold):
    assert math_score(output, gold)[1]


@pytest.mark.parametrize("output, gold", [
    ("The answer is 1800 + 192, which is 1992.", "1992"),  # an equals sign in words after an operation
    ("12 + 30 makes 42 apples", "42"),
    ("2 + 3 + 4, which is 9", "9"),
    ("1,200 * 3 equals 3,600", "3600"),
    ("10.5 / 2 is 5.25", "5.25"),
    ("The answer is 12, which is 3 more than 9.", "12"),  # no operation before it: the first number
    ("She had 5 apples, which is 2 more than Tom.", "5"),
    ("The season 2020 - 2021, which is over", "2020"),  # no number after it
])
def test_worded_equals_after_an_operation(output, gold):
    assert math_score(output, gold)[1]


def test_chained_equation_wrong_end_is_wrong():
    assert math_score("x = 7 + 55 = 62 peanuts", "7") == (62.0, False)


@pytest.mark.parametrize("text", [
    "11:55 p.m. on 24 December 2014.",
    "at 9 a.m. e.g. on 3 May.",
    "Dr. Smith paid 5 dollars.",
    "the U.S. had 48 states.",
])
def test_abbreviation_is_no_sentence_end(text):
    assert answer_span(text) == text[:-1]


def test_time_after_abbreviation_keeps_its_numbers():
    assert math_score("11:55 p.m. on 24 December 2014.", "11:55 p.m.")[1]
    assert answer_span("It was 4. Then 5.") == "It was 4"  # an ordinary sentence end still cuts


@pytest.mark.parametrize("text, value", [
    ("-4 1/2", Fraction(-9, 2)),
    ("\u22124 1/2", Fraction(-9, 2)),
    ("4 1/2", Fraction(9, 2)),
])
def test_mixed_number_keeps_its_sign(text, value):
    assert numbers(text) == [value]


def test_minus_inside_a_word_is_still_no_sign():
    assert numbers("10-4 1/2") == [10, Fraction(9, 2)]


# -- QA ------------------------------------------------------------------------
@pytest.mark.parametrize("text, norm", [
    ("Real Madrid C.F.", "real madrid cf"),
    ("U.S.A.", "usa"),
    ("U.S", "us"),
    ("e.g. this", "e g this"),  # lowercase initials are left as before
    ("The Vessa River!", "vessa river"),
])
def test_initials_are_joined(text, norm):
    assert normalize_answer(text) == norm


@pytest.mark.parametrize("output, gold", [
    ("Real Madrid CF won the cup", "Real Madrid C.F."),
    ("Real Madrid C.F. won the cup", "Real Madrid CF"),
    ("the U.S.A.", "USA"),
    ("J. R. R. Tolkien wrote it", "J.R.R. Tolkien"),  # the old, unjoined match still counts
])
def test_initials_match_with_or_without_periods(output, gold):
    assert qa_score(output, [gold])[1]


def test_initials_do_not_match_other_words():
    assert not qa_score("Real Madrid C.F.", ["Real Madrid CFA"])[1]
    assert not qa_score("Madrid", ["Real Madrid C.F."])[1]


@pytest.mark.parametrize("symbol", ["£", "%", "$"])
def test_symbol_answer_is_kept(symbol):
    assert normalize_answer(symbol) == symbol
    assert normalize_answer(f" {symbol} ") == symbol
    assert qa_score(f"It is measured in {symbol}5", [symbol])[1]
    assert qa_score(symbol, [symbol])[1]
    assert not qa_score("It is measured in pounds", [symbol])[1]
    assert gold_fits([symbol], 5)


def test_empty_and_article_answers_still_normalise_to_nothing():
    assert normalize_answer("") == "" and normalize_answer("the") == ""
    assert not qa_score("anything", [""])[1]


# -- LAMA ----------------------------------------------------------------------
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
