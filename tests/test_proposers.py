import pytest

from toolformer.lm.textpos import tokenize_text
from toolformer.stages.proposers import calculator_prefilter, calendar_prefilter, propose


@pytest.mark.parametrize("text, expected", [
    ("Sold 340 eggs and 275 more, 615 in all.", True),      # 340 + 275 = 615
    ("We had 96 pupils in 8 groups of 12.", True),          # 96 / 8 = 12
    ("The total is = 41 apples.", True),                    # "=" before a number
    ("The average of 3 scores.", True),                     # "average of" before a number
    ("In 1871 she was born; 42 minutes; 7 arches.", False),  # no relation between the numbers
    ("No numbers here.", False),
])
def test_calculator_prefilter(text, expected):
    assert calculator_prefilter(text) is expected


def test_calendar_prefilter():
    assert calendar_prefilter("Today the council met.", "2022-07-02")
    assert not calendar_prefilter("Today the council met.", None)
    assert not calendar_prefilter("The council met.", "2022-07-02")


def test_calculator_proposer_pairs_before_each_number(tok):
    text = "Sold 340 eggs and 275 more, 615 in all."
    tt = tokenize_text(tok, text)
    props = propose("Calculator", text, tt, 24)
    at_615 = {p.input for p in props if tt.char_starts[p.position] == text.index("615")}
    assert "340 + 275" in at_615 and "275 - 340" in at_615 and len(at_615) == 6
    assert all(tt.char_starts[p.position] in (text.index("275"), text.index("615")) for p in props)
    big = "Of 1,200 seats, 950 were sold and 250 stayed empty, then 700 more."
    inputs = {p.input for p in propose("Calculator", big, tokenize_text(tok, big), 24)}
    assert "1200 - 950" in inputs  # thousands separators removed


def test_lookup_and_calendar_proposers(tok):
    text = "The mill at Kessford was rebuilt in 1888. Kessford has a population of 1,320."
    tt = tokenize_text(tok, text)
    qa = propose("QA", text, tt, 4)
    at = {p.input for p in qa if tt.char_starts[p.position] == text.index("1,320")}
    assert "Kessford has a population of?" in at
    ws = propose("WikiSearch", text, tt, 4)
    assert any(p.input.startswith("Kessford") for p in ws)
    cal = propose("Calendar", "Next week the ferry runs.", tokenize_text(tok, "Next week the ferry runs."), 1)
    assert [p.input for p in cal] == ["", ""]  # before "Next" and "week"
