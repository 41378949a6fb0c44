import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from toolformer.tools.calls import (
    STYLES,
    ApiCall,
    add_call_tokens,
    get_style,
    insert_calls,
    parse_calls,
    strip_calls,
)

PLAIN = STYLES["plain"]
SPECIAL = STYLES["special"]


def test_render_with_and_without_result():
    assert PLAIN.render("Calculator", "18 + 12 * 3") == "[Calculator(18 + 12 * 3)]"
    assert PLAIN.render("Calculator", "18 + 12 * 3", "54") == "[Calculator(18 + 12 * 3) → 54]"
    assert PLAIN.render("Calculator", "1+1", "") == "[Calculator(1+1) →]"
    assert SPECIAL.render("QA", "Who?", "Ada") == "<API>QA(Who?) → Ada</API>"


def test_parse_both_arrows_nested_parens_and_quotes():
    text = 'See [Calculator((2 + 3) * (4 - 1)) -> 15] and [QA("Who said (hi)?") → Bo] end'
    calls = parse_calls(text, PLAIN)
    assert [c.call for c in calls] == [
        ApiCall("Calculator", "(2 + 3) * (4 - 1)", "15"),
        ApiCall("QA", '"Who said (hi)?"', "Bo"),
    ]
    assert text[calls[0].start : calls[0].end] == "[Calculator((2 + 3) * (4 - 1)) -> 15]"
    assert all(c.closed for c in calls)


def test_parse_ignores_plain_brackets_and_unknown_tools():
    text = "a list [1, 2] and [Foo(x)] and [Calculator(1+2)]"
    assert [c.call.tool for c in parse_calls(text, PLAIN, {"Calculator"})] == ["Calculator"]
    assert [c.call.tool for c in parse_calls(text, PLAIN)] == ["Foo", "Calculator"]


def test_parse_unclosed_call_and_no_result():
    calls = parse_calls("x [Calculator(2+3) → 5", PLAIN)
    assert calls[0].call == ApiCall("Calculator", "2+3", "5") and not calls[0].closed
    calls = parse_calls("x [Calendar()] y", PLAIN)
    assert calls[0].call == ApiCall("Calendar", "", None) and calls[0].closed


def test_apostrophe_is_not_a_quote():
    calls = parse_calls("[QA(Where is Lincoln's grave (USA)?) → Springfield]", PLAIN)
    assert calls[0].call == ApiCall("QA", "Where is Lincoln's grave (USA)?", "Springfield")


def test_insert_and_strip_are_inverse():
    text = "Sold 340 and 275, 615 in all."
    call = PLAIN.render("Calculator", "340 + 275", "615")
    out = insert_calls(text, [(text.index("615"), call)])
    assert out == "Sold 340 and 275, [Calculator(340 + 275) → 615] 615 in all."
    assert strip_calls(out, PLAIN) == text
    two = insert_calls(text, [(text.index("615"), call), (0, "[Calendar() → Today]")])
    assert two.startswith("[Calendar() → Today] Sold") and strip_calls(two, PLAIN) == text
    with pytest.raises(ValueError):
        insert_calls(text, [(999, call)])


# Inputs: text without markers, plus balanced parentheses.
_atom = st.text(st.characters(blacklist_characters="()[]<>\"'→-\n", blacklist_categories=("Cs",)), max_size=12)
_balanced = st.recursive(_atom, lambda inner: st.builds(lambda a, b, c: f"{a}({b}){c}", _atom, inner, _atom),
                         max_leaves=4)
_result = st.one_of(st.none(), st.text(st.characters(blacklist_characters="[]<>", blacklist_categories=("Cs",)),
                                       min_size=1, max_size=20))


@settings(max_examples=300, deadline=None)
@given(tool=st.sampled_from(["Calculator", "QA", "WikiSearch", "MT"]), tool_input=_balanced, result=_result,
       style=st.sampled_from(["plain", "plain_ascii", "special"]))
def test_round_trip(tool, tool_input, result, style):
    s = get_style(style)
    text = "before " + s.render(tool, tool_input, result) + " after"
    (parsed,) = parse_calls(text, s, {tool})
    assert parsed.call == ApiCall(tool, tool_input, result)
    assert strip_calls(text, s, {tool}) == "before after"


def test_special_tokens_registered_and_embeddings_resized(tiny_model_dir):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    before = len(tok)
    new = [m for m in ("<API>", "</API>", "→") if m not in tok.get_vocab()]
    assert add_call_tokens(tok, model, SPECIAL) == len(new) >= 2  # "→" may be in the vocabulary already
    assert model.get_input_embeddings().weight.shape[0] == len(tok) == before + len(new)
    ids = tok("<API>QA(x) → y</API>", add_special_tokens=False)["input_ids"]
    assert tok.convert_tokens_to_ids("<API>") in ids and tok.convert_tokens_to_ids("</API>") in ids


def test_tokenizer_lacking_markers_is_refused():
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    from toolformer.lm.modeling import check_markers
    from toolformer.tools.calls import STYLES

    backend = Tokenizer(models.WordLevel({"<unk>": 0, "plain": 1, "words": 2}, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    tok = PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="<unk>")
    with pytest.raises(ValueError, match="cannot represent the call marker '\\['.*calls.style=special"):
        check_markers(tok, STYLES["plain"], "t")
    from toolformer.tools.calls import add_call_tokens

    add_call_tokens(tok, None, STYLES["special"])
    check_markers(tok, STYLES["special"], "t")  # the special style adds its markers: accepted
