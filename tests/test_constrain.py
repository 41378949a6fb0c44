"""Constrained decoding (toolformer/lm/constrain.py): the input grammars as automata, the token masks on a real
BPE vocabulary, and scripted models whose malformed calls come out well formed with constraints on."""

import json
import re
import shutil

import pytest
from helpers import ROOT
from hypothesis import given, settings
from hypothesis import strategies as st
from scripted_lm import ScriptedLM, follow

from toolformer.lm.constrain import CallGrammar, call_grammar
from toolformer.lm.generate import generate_with_tools
from toolformer.lm.inputpattern import InputPattern
from toolformer.tasks.metrics import model_answer
from toolformer.tasks.score import call_counts
from toolformer.tools import REGISTRY, build_tool
from toolformer.tools.base import TEXT_PATTERN, Tool, ToolError
from toolformer.tools.calculator import INPUT_PATTERN
from toolformer.tools.calls import get_style
from toolformer.tools.qa import QA
from toolformer.tools.sandbox import Sandbox

STYLE = get_style("plain")


@pytest.fixture(scope="module")
def tools(tmp_path_factory):
    knowledge = tmp_path_factory.mktemp("qa") / "knowledge.jsonl"
    shutil.copy(ROOT / "data" / "knowledge.jsonl", knowledge)  # QA writes its index beside the file
    return {"Calculator": build_tool("Calculator"), "Calendar": build_tool("Calendar"), "QA": QA(knowledge)}


def sandbox_of(tools: dict) -> Sandbox:
    return Sandbox(tools, timeout_s=5.0, forbidden_markers=("[", "]", "→", "->"))


# -- the patterns ----------------------------------------------------------------------------------------------------
CALC_CHARS = st.text(alphabet="0123456789 .,+-*/x()×a", max_size=14)


@settings(max_examples=300, deadline=None)
@given(CALC_CHARS)
def test_pattern_automaton_agrees_with_re(text):
    pattern = InputPattern(INPUT_PATTERN)
    assert pattern.fullmatch(text) == bool(re.fullmatch(INPUT_PATTERN, text))
    if pattern.fullmatch(text):  # every prefix of a valid input is alive
        state = pattern.start
        for ch in text:
            state = pattern.step(state, ch)
            assert state >= 0


@pytest.mark.parametrize("pattern, yes, no", [
    (TEXT_PATTERN, ["Who?", " a b ", "Lincoln's birthplace"], ["", "?", " ", "a\nb"]),
    (r"^[0-9]{2,3}$", ["12", "123"], ["1", "1234", "1a"]),
    (r"(ab|c)+d?", ["ab", "cabd", "ccd"], ["", "a", "abdd"]),
    (r"\d+(?:\.\d+)?\s\w", ["1.5 x", "2 _"], ["1. x", "1.5x"]),
    (r"[^a-c\s]x", ["dx", "9x"], ["ax", " x"]),
])
def test_pattern_constructs(pattern, yes, no):
    compiled = InputPattern(pattern)
    assert all(compiled.fullmatch(s) for s in yes) and not any(compiled.fullmatch(s) for s in no)


@pytest.mark.parametrize("pattern", [r"(?=a)a", r"(a)\1", r"(?i)a", r"a{1,30000}"])
def test_unsupported_patterns_are_refused(pattern):
    with pytest.raises(ValueError, match="input_pattern"):
        InputPattern(pattern)


def test_every_tool_declares_a_grammar_its_example_and_prompt_calls_satisfy():
    for name, cls in REGISTRY.items():
        tool = cls.__new__(cls)  # the class attributes only: MT and QA need files to be built
        if not tool.takes_input:
            continue
        pattern = InputPattern(tool.input_pattern)
        outputs = "\n".join(line for line in tool.prompt.splitlines() if line.startswith("Output:"))
        calls = re.findall(rf"\[{name}\(([^\]]*)\)\]", outputs)
        assert calls, name
        for text in [tool.example, *calls]:
            assert pattern.fullmatch(text) and re.fullmatch(tool.input_pattern, text), (name, text)


# -- the masks on a real BPE vocabulary --------------------------------------------------------------------------------
def _reference_allowed(call: str, token: str, patterns: dict[str, str]) -> bool:
    """Whether ``call + token`` is the prefix of a well-formed call, by plain string rules (no automaton): an
    input is cut at its first `)` outside brackets, must match the tool's pattern (as a prefix while open,
    checked with the `regex` module's partial matching) and hold no marker or quote; then ` →` or `->`."""
    regex = pytest.importorskip("regex")
    text = call + token
    name, _, rest = text[1:].partition("(")
    depth = 0
    for k, ch in enumerate(rest):
        depth += (ch == "(") - (ch == ")")
        if depth < 0:
            arg, tail = rest[:k], rest[k + 1 :]
            break
    else:
        arg, tail = rest, None
    quote = any(ch == "'" and (k == 0 or not arg[k - 1].isalnum()) for k, ch in enumerate(arg))
    if quote or any(m in arg for m in ("[", "]", "→", "->", '"', "\n", "\ufffd")):
        return False
    if tail is None:
        return bool(regex.fullmatch(patterns[name], arg, partial=True))
    body = tail[1:] if tail.startswith(" ") else tail
    return re.fullmatch(patterns[name], arg) is not None and any(a.startswith(body) for a in ("→", "->"))


@pytest.mark.parametrize("call", [
    "[Calculator(", "[Calculator(12", "[Calculator(12 +", "[Calculator(1,2", "[Calculator((3 * 4", "[Calculator(2 -",
    "[QA(", "[QA(Who is", "[QA(Lincoln", "[QA(a (b", "[QA(a -", "[QA(Who?)",
])
def test_masks_match_a_reference_prefix_check(tok, tools, call):
    grammar = CallGrammar(tok, STYLE, tools)
    state, _ = grammar.walk(call[1:])
    allowed, closing = ~grammar.options(state).blocked, grammar.options(state).closing
    texts = tok.batch_decode([[i] for i in range(len(tok))], clean_up_tokenization_spaces=False)
    patterns = {n: t.input_pattern for n, t in tools.items()}
    special = {tok.eos_token_id, tok.bos_token_id, tok.pad_token_id, tok.unk_token_id}
    expected = [i for i, t in enumerate(texts) if t and i not in special and _reference_allowed(call, t, patterns)]
    assert allowed.nonzero().squeeze(1).tolist() == expected
    assert all(")" in texts[i] or call.endswith(")") for i in closing.nonzero().squeeze(1).tolist())


def test_masks_after_the_call_start_and_for_a_tool_without_input(tok, tools):
    grammar = CallGrammar(tok, STYLE, tools)
    texts = tok.batch_decode([[i] for i in range(len(tok))], clean_up_tokenization_spaces=False)

    def allowed(call):
        state, _ = grammar.walk(call[1:])
        return {texts[i] for i, ok in enumerate(grammar.options(state).allowed) if ok}

    after_start = allowed("[")
    assert {"Calculator", "Calendar", "QA"} <= after_start
    assert all(any(n.startswith(t.removeprefix(" ")) for n in tools) for t in after_start)
    assert allowed("[Calendar(") == {")"} and allowed("[QA") == {"("}
    assert allowed("[Calendar()") <= {" ", "→", "-", " →", " -"} and "→" in allowed("[Calendar()")
    assert grammar.walk("Foo(")[0] is None
    deep, _ = grammar.walk("Calculator(" + "(" * 40)  # the masks of a deep bracket are kept once, not per depth
    assert grammar.options(deep) is grammar.options(grammar.walk("Calculator(" + "(" * 41)[0])
    assert grammar.closing_text("[Calendar") == "() →" and grammar.closing_text(" [QA(Who") == ") →"
    assert grammar.closing_text("[Calculator(12 +") is None and grammar.closing_text("[QA(") is None


def test_the_grammar_is_built_once_per_tokenizer_and_tools(tok, tools):
    assert call_grammar(tok, STYLE, tools) is call_grammar(tok, STYLE, dict(tools))
    assert call_grammar(tok, STYLE, tools) is not call_grammar(tok, STYLE, tools, max_input_chars=20)


# -- scripted models: malformed without constraints, well formed with them -------------------------------------------
def wants(tok, target: str, fallback: list):
    """A model that writes ``target`` while its text is a prefix of it; off it, the ``fallback`` tokens
    (best first; every other token far below)."""

    vocab = tok.get_vocab()

    def script(text):
        ranked = [follow(tok, target, text), *fallback] if target.startswith(text) and text != target else fallback
        ids = [t if isinstance(t, int) else vocab[t] for t in ranked]
        return list(dict.fromkeys(ids))  # a token listed twice keeps its best rank

    return script


def decode(tok, script, tools, constrained, **kw):
    kw = {"max_new_tokens": 24, "dates": ["2023-01-30"], **kw}
    (g,) = generate_with_tools(ScriptedLM(tok, script), tok, ["Q:"], sandbox_of(tools), STYLE,
                               tools=set(tools), constrained=constrained, **kw)
    return g, counts_of(g)


def counts_of(g) -> dict:
    return call_counts([{"calls": g.calls, "output": g.text, "malformed_call": model_answer(g.text, STYLE)[1]}])


@pytest.mark.parametrize("target, fallback, malformed, well_formed", [
    # an unknown tool: the name becomes an enabled one (Calendar, the best allowed), then `()` and `→`
    (" [Foo(1) →", ["Calendar", ")", "→"], "unknown_tool",
     {"tool": "Calendar", "input": "", "result": "Today is Monday, January 30, 2023.", "error": None}),
    # EOS right after `[QA(`: a word first (the input may not be empty), then `)` and ` →`
    (" [QA(", [" is", ")", " ", "→"], "unclosed", {"tool": "QA", "input": " is", "error": None}),
    # a letter in arithmetic: the best allowed token instead (` 3`), and the call closes when the model wants EOS
    (" [Calculator(12 + x) →", [" 3", ")", " ", "→"], "unparsable_input",
     {"tool": "Calculator", "input": "12 +  3", "result": "15", "error": None}),
    # EOS inside brackets: the brackets close first, then the call
    (" [Calculator((12 + 3", [")", " ", "→"], "unclosed",
     {"tool": "Calculator", "input": "(12 + 3)", "result": "15", "error": None}),
    # closed without the result marker: after `)` only the result marker may follow
    (" [Calculator(2 + 3)] then", [" ", "→"], "no_result_marker",
     {"tool": "Calculator", "input": "2 + 3", "result": "5", "error": None}),
])
def test_scripted_model_writes_malformed_calls_unless_constrained(tok, tools, target, fallback, malformed,
                                                                  well_formed):
    fallback = [tok.eos_token_id, *fallback]
    off, off_counts = decode(tok, wants(tok, target, fallback), tools, constrained=False)
    on, on_counts = decode(tok, wants(tok, target, fallback), tools, constrained=True)
    assert off_counts["malformed"][malformed] == 1, off.text
    assert on_counts["calls"] == 1 and sum(on_counts["malformed"].values()) == 0, on.text
    (call,) = on.calls
    if call["error"] is not None:  # a well-formed question the knowledge store cannot answer
        assert call["error"]["code"] == "not_found" and call["result"] is None
        call = {k: v for k, v in call.items() if k != "result"}
        call["error"] = None
    assert {k: call[k] for k in well_formed} == well_formed
    assert on.text.startswith(" [") and on.text.endswith("]") and "→" in on.text


def test_a_call_the_budget_cuts_is_closed_and_run_when_its_input_is_complete(tok, tools):
    script = wants(tok, " [Calculator(12 + 30 + 4 + 5 + 6", [tok.eos_token_id])
    off, off_counts = decode(tok, script, tools, constrained=False, max_new_tokens=8)
    on, on_counts = decode(tok, script, tools, constrained=True, max_new_tokens=8)
    assert off.text == " [Calculator(12 + 30" and off_counts["malformed"]["unclosed"] == 1
    assert on.text == " [Calculator(12 + 30) → 42]" and on_counts["malformed_per_100_calls"] == 0
    # cut after an operator the input is incomplete: the call stays open (counted as unclosed)
    cut, counts = decode(tok, script, tools, constrained=True, max_new_tokens=6)
    assert cut.text == " [Calculator(12 +" and counts["malformed"]["unclosed"] == 1


def test_inputs_longer_than_the_limit_are_not_written(tok, tools):
    script = wants(tok, " [QA( the the the the the the the the", [tok.eos_token_id, ")", " ", "→"])
    on, _ = decode(tok, script, tools, constrained=True, max_input_chars=12)
    assert on.calls[0]["input"] == " the the the" and len(on.calls[0]["input"]) <= 12


def test_a_new_tool_is_decoded_by_its_declared_grammar(tok):
    class Digits(Tool):
        name = "Digits"
        description = "doubles a whole number"
        input_description = "digits"
        example = "12"
        input_pattern = r"[0-9]+"

        def run(self, tool_input, date=None):
            if not tool_input.isdigit():
                raise ToolError("syntax", f"{tool_input!r} is not digits")
            return str(2 * int(tool_input))

    script = wants(tok, " [Digits(12a) →", [tok.eos_token_id, ")", "→"])
    off, off_counts = decode(tok, script, {"Digits": Digits()}, constrained=False)
    on, on_counts = decode(tok, script, {"Digits": Digits()}, constrained=True)
    assert off.calls[0]["error"]["code"] == "syntax" and off_counts["malformed"]["unparsable_input"] == 1
    assert on.text == " [Digits(12)→ 24]" and on.calls[0]["result"] == "24"


def test_a_random_model_calling_at_every_step_writes_only_well_formed_calls(tiny_model_dir, tok, tools):
    import torch

    from toolformer.lm.modeling import load_model

    model = load_model(tiny_model_dir, torch.device("cpu"), torch.float32, tok)
    tools = {n: tools[n] for n in ("Calculator", "Calendar")}
    prompts = ["x", "y z", "1 2 3", "The bridge", "7 + 8 ="]
    gens = generate_with_tools(model, tok, prompts, sandbox_of(tools), STYLE, top_k_trigger=len(tok),
                               max_new_tokens=16, batch_size=3, tools=set(tools), constrained=True,
                               dates=["2023-01-30"] * len(prompts))
    grammar = call_grammar(tok, STYLE, tools)
    for g in gens:
        counts = counts_of(g)
        assert counts["calls"] == 1
        m = counts["malformed"]
        assert m["unknown_tool"] == m["unparsable_input"] == m["no_result_marker"] == 0, g.text
        if m["unclosed"]:  # only when the budget ran out before the input was complete
            assert grammar.closing_text(g.text[g.text.index("["):]) is None, g.text


def test_cli_generate_constrained(tiny_model_dir, tmp_path, monkeypatch, capsys):
    from toolformer.cli.app import main

    # tools without data files: the folder records no tools, and the defaults' data is not loaded
    assert main(["generate", "--model", tiny_model_dir, "--json", "--max-new-tokens", "8", "--constrained",
                 "--top-k-trigger", "600", "one", "two", "--set", "tools.enabled=[Calculator, Calendar]"]) == 0
    lines = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    codes = {c["error"]["code"] for x in lines for c in x["calls"] if c["error"]}
    assert not codes & {"unknown_tool", "unparseable", "invalid_arguments", "no_result_marker", "syntax"}
