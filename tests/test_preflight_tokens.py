"""``toolformer preflight``'s tokenizer advice for the call style in use: in the plain style every merge of a
marker with its neighbours is named (``()``, ``?)``, ``.]`` after a Calendar result); in the special style the
name and the parentheses sit between added tokens, so their merges are not reported and the fix never names the
special style. On the small world's tokenizer (data/world-base) and on the real families of tests/families.py."""

from __future__ import annotations

import copy

import pytest
from helpers import ROOT

from toolformer.lm.modeling import load_tokenizer
from toolformer.preflight.tokens import FIX_STYLE, check_tokenizer
from toolformer.tools.calls import add_call_tokens, get_style

# the shipped tools' kinds of input: a formula, a question, none (Calendar), a query
TOOLS = {"Calculator": "400 / 1400", "QA": "Where does the Danube end?", "Calendar": "", "WikiSearch": "Danube"}


def report(tok, style_name: str) -> dict:
    """The tokenizer report on a copy of ``tok`` with the style's markers added as the stages add them."""
    tok = copy.deepcopy(tok)
    style = get_style(style_name)
    add_call_tokens(tok, None, style)
    return check_tokenizer(tok, style, TOOLS)


def assert_special_advice(r: dict) -> None:
    assert r["start_ok"] and r["merges"] == []
    assert not [m for m in r["markers"] if m["role"] in ("open", "close") and m["problems"]]
    assert not any("calls.style: special" in m["fix"] for m in r["markers"])


def test_world_base_tokenizer_in_both_styles():
    tok = load_tokenizer(str(ROOT / "data" / "world-base"))
    plain = report(tok, "plain")
    assert plain["ok"] and plain["merges"] == []  # its pre-tokenizer splits at every bracket and parenthesis
    special = report(tok, "special")
    assert_special_advice(special)
    assert special["ok"]  # the names follow `<API> ` with their space: between added tokens, not reported


@pytest.mark.slow  # 5 to 9 s a family: the report decodes the whole vocabulary, one token at a time
def test_real_family_names_every_merge_in_the_plain_style(family):
    fam, tok, _ = family
    plain = report(tok, "plain")
    assert {"()", "?)", ".]"} <= set(plain["merges"]), (fam.name, plain["merges"])
    lines = "\n".join(plain["problems"])
    for merged in ("()", "?)", ".]"):
        assert f"cover {merged!r}" in lines
    end = next(m for m in plain["markers"] if m["role"] == "end")
    assert ".]" in end["merges"] and end["fix"] == FIX_STYLE
    assert_special_advice(report(tok, "special"))
