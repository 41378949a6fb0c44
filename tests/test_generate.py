import json

import pytest
import torch
from scripted_lm import call_script, follow, generate_scripted

from toolformer.lm.generate import generate_with_tools
from toolformer.lm.textpos import marker_token_ids
from toolformer.tools import build_tool
from toolformer.tools.calls import get_style
from toolformer.tools.sandbox import Sandbox

STYLE = get_style("plain")
FILLERS = [" 1", " 2", " 3", " 4", " 6", " 8", " 9", " a", " b", " c"]


@pytest.fixture(scope="module")
def sandbox():
    tools = {n: build_tool(n) for n in ("Calculator", "Calendar")}
    return Sandbox(tools, timeout_s=5.0, forbidden_markers=("[", "]", "→"))


def test_call_start_tokens_include_space_variant(tok):
    ids = marker_token_ids(tok, "[")
    assert {tok.decode([i]) for i in ids} == {"[", " ["}
    # A marker no token is: an error, or nothing with required=False; "" is the tokens of spaces only.
    with pytest.raises(ValueError, match="not a single token"):
        marker_token_ids(tok, "<API>")
    assert marker_token_ids(tok, "<API>", required=False) == []
    blank = marker_token_ids(tok, "", required=False)
    assert blank and all(tok.decode([i], clean_up_tokenization_spaces=False).strip(" ") == "" for i in blank)
    assert tok.get_vocab()[" "] in blank


def test_result_is_inserted_and_decoding_continues(tok, sandbox):
    def outside(text):
        if text == "":
            return ["["]
        return [follow(tok, text[: text.index("]") + 1] + " done.", text)]

    (g,) = generate_scripted(tok, call_script(tok, outside), sandbox)
    assert g.text == "[Calculator(2+3) → 5] done."  # not the model's own " 7"
    assert g.calls == [{"tool": "Calculator", "input": "2+3", "result": "5", "error": None}]
    assert g.text_without_calls == "done."


def _ranked(tok, rank: int):
    """Outside-call script: at the first step ` [` has rank ``rank`` (1-based)."""
    others = [" 5"] + FILLERS
    first = others[: rank - 1] + [" ["] + others[rank - 1 :]

    def outside(text):
        if text == "":
            return first
        if "]" in text:
            return [follow(tok, text[: text.index("]") + 1] + " done", text)]
        return [follow(tok, " 5 done", text)]

    return outside


@pytest.mark.parametrize("rank, expect_call", [(1, True), (3, True), (10, True), (11, False)])
def test_top_k_trigger(tok, sandbox, rank, expect_call):
    (g,) = generate_scripted(tok, call_script(tok, _ranked(tok, rank)), sandbox, top_k_trigger=10)
    if expect_call:
        assert g.text == " [Calculator(2+3) → 5] done"
        assert [c["result"] for c in g.calls] == ["5"]
    else:
        assert g.text == " 5 done" and g.calls == []


def test_top_k_one_is_plain_greedy(tok, sandbox):
    (g,) = generate_scripted(tok, call_script(tok, _ranked(tok, 2)), sandbox, top_k_trigger=1)
    assert g.text == " 5 done" and g.calls == []


def test_disabled_never_calls(tok, sandbox):
    (g,) = generate_scripted(tok, call_script(tok, _ranked(tok, 1)), sandbox, disabled=True)
    assert g.text == " 5 done" and g.calls == []  # ` [` was the argmax, yet p = 0


def _greedy_caller(tok):
    def outside(text):
        if text == "" or text.endswith("]"):
            return [" [", " 9"]  # always wants (another) call
        return [tok.eos_token_id]

    return call_script(tok, outside)


@pytest.mark.parametrize("max_calls", [1, 2, 3])
def test_call_limit(tok, sandbox, max_calls):
    """At most ``max_calls`` calls, and none right after a call's result: a model that always wants a call
    writes ` 9` between two calls (calls never touch in the fine-tuning data)."""
    (g,) = generate_scripted(tok, call_script(tok, lambda text: [" [", " 9"] if text.count(" 9") < 3
                                              else [tok.eos_token_id]), sandbox, max_calls=max_calls)
    assert len(g.calls) == max_calls
    assert g.text == " [Calculator(2+3) → 5] 9" * max_calls + " 9" * (3 - max_calls)


def test_budget_counts_model_tokens_and_finishes_insertion(tok, sandbox):
    (g,) = generate_scripted(tok, _greedy_caller(tok), sandbox, max_new_tokens=9)
    # ` [`, Calculator, (, 2, +, 3, ), ` `, → are 9 chosen tokens; the result still lands.
    assert g.text == " [Calculator(2+3) → 5]" and len(g.calls) == 1


@pytest.mark.parametrize("call, code", [
    ("[Calculator(2/0) →", "division_by_zero"),
    ("[Nope(1) →", "unknown_tool"),
    ("[Calculator(2 →", "unparseable"),  # arrow before the input closed
])
def test_malformed_calls_are_recorded_not_fatal(tok, sandbox, call, code):
    def outside(text):
        if text == "":
            return ["["]
        return [follow(tok, text[: text.index("]") + 1] + " ok", text)]

    (g,) = generate_scripted(tok, call_script(tok, outside, call), sandbox, tools={"Calculator", "Calendar"})
    assert g.calls[0]["error"]["code"] == code and g.calls[0]["result"] is None
    assert g.text == call + "] ok"  # closed without a result: e(c, ε)


def test_call_closed_without_arrow_is_recorded_not_executed(tok, sandbox):
    def outside(text):
        return ["["] if text == "" else [follow(tok, "[Calculator(2+3)] ok", text)]

    (g,) = generate_scripted(tok, call_script(tok, outside, "[Calculator(2+3)]"), sandbox)
    assert g.text == "[Calculator(2+3)] ok"
    assert g.calls == [{"tool": "Calculator", "input": "2+3", "result": None,
                        "error": {"code": "no_result_marker", "message": "call closed without →"}}]


def test_bracket_that_is_no_call_is_text(tok, sandbox):
    def script(text):
        return [follow(tok, " [1] then [Calculator(2+3) →", text)] if "→" not in text else [" 7"]

    (g,) = generate_scripted(tok, script, sandbox, max_new_tokens=14)
    # `[1]` is not a call, so the single allowed call is still available.
    assert g.text.startswith(" [1] then [Calculator(2+3) → 5]")
    assert [c["input"] for c in g.calls] == ["2+3"]


def test_calendar_gets_the_prompt_date(tok, sandbox):
    def outside(text):
        return ["["] if text == "" else [tok.eos_token_id]

    prompts = ["a", "bb"]
    gens = generate_scripted(tok, call_script(tok, outside, "[Calendar() →"), sandbox, prompts=prompts,
                             dates=["2023-01-30", "2024-02-29"])
    assert gens[0].calls[0]["result"] == "Today is Monday, January 30, 2023."
    assert gens[1].text == "[Calendar() → Today is Thursday, February 29, 2024.]"


def _reference_greedy(model, tok, prompt, n, forbid):
    """Greedy decoding without cache, padding or batching."""
    ids = [tok.bos_token_id] + tok.encode(prompt, add_special_tokens=False)
    out = []
    for _ in range(n):
        with torch.no_grad():
            logits = model(torch.tensor([ids + out])).logits[0, -1]  # (V,)
        logits[forbid] = float("-inf")
        nxt = int(logits.argmax())
        if nxt == tok.eos_token_id:
            break
        out.append(nxt)
    return tok.decode(out, clean_up_tokenization_spaces=False)


def test_batched_left_padded_decoding_matches_reference(tiny_model_dir, tok):
    from toolformer.lm.modeling import load_model

    model = load_model(tiny_model_dir, torch.device("cpu"), torch.float32, tok)
    prompts = ["The bridge", "A much longer prompt about the town of Aldermoor and its river", "7 + 8 ="]
    gens = generate_with_tools(model, tok, prompts, None, STYLE, disabled=True, max_new_tokens=8, batch_size=3)
    forbid = marker_token_ids(tok, "[")
    for p, g in zip(prompts, gens):
        assert g.text == _reference_greedy(model, tok, p, 8, forbid), p
        assert "[" not in g.text


def test_real_model_with_every_token_triggering(tiny_model_dir, tok, sandbox):
    from toolformer.lm.modeling import load_model

    model = load_model(tiny_model_dir, torch.device("cpu"), torch.float32, tok)
    gens = generate_with_tools(model, tok, ["x", "y z", "1 2 3"], sandbox, STYLE, top_k_trigger=len(tok),
                               max_new_tokens=12, batch_size=2)
    for g in gens:
        assert g.text.lstrip(" ").startswith("[")  # a call-start token came first
        assert len(g.calls) <= 1


def test_cli_generate_json(tiny_model_dir, capsys):
    from toolformer.cli.app import main

    assert main(["generate", "--model", tiny_model_dir, "--json", "--max-new-tokens", "3", "--disabled",
                 "one", "two"]) == 0
    lines = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert [x["prompt"] for x in lines] == ["one", "two"]
    assert all(x["calls"] == [] and isinstance(x["text"], str) for x in lines)


def test_a_space_alone_after_a_result_is_not_text(tok, sandbox):
    """After a call's result the model may not start another call until it writes text: a token of spaces
    only (the one before every number with pretrain.digits_apart) does not count, so no second call starts
    right after it; a word does."""
    assert " " in tok.get_vocab()

    def outside(text):
        if text == "":
            return [" ["]
        if text.endswith("]"):
            return [" "]
        if text.endswith("] "):
            return ["[", "9"]  # wants a call at once: refused
        if text.endswith("9"):
            return [" [", " a"]  # after text a call may start
        return [tok.eos_token_id]

    (g,) = generate_scripted(tok, call_script(tok, outside), sandbox, max_calls=2)
    assert g.text.startswith(" [Calculator(2+3) → 5] 9 [Calculator(2+3) → 5]"), g.text
    assert len(g.calls) == 2


def test_a_tokenizer_with_a_prefix_space_generates_the_same_calls(tiny_model_dir, sandbox, tmp_path):
    """With pretrain.prefix_space's tokenizer (every text encoded as after a space) the prompt gets one added
    space token and nothing else changes: the call runs, its result is inserted and the text has no extra space."""
    from transformers import AutoTokenizer

    from toolformer.lm.modeling import load_tokenizer
    from toolformer.lm.tokenizer import set_prefix_space

    spaced = AutoTokenizer.from_pretrained(tiny_model_dir)
    set_prefix_space(spaced)
    spaced.save_pretrained(tmp_path)
    tok = load_tokenizer(str(tmp_path), STYLE)
    prompt = "2 + 3 = ?"
    plain = load_tokenizer(tiny_model_dir, STYLE)
    assert tok(prompt, add_special_tokens=False)["input_ids"] == plain(" " + prompt, add_special_tokens=False)[
        "input_ids"] != plain(prompt, add_special_tokens=False)["input_ids"]

    def outside(text):
        if text == "":
            return ["["]
        return [follow(tok, text[: text.index("]") + 1] + " done.", text)]

    (g,) = generate_scripted(tok, call_script(tok, outside), sandbox, prompts=(prompt,))
    assert g.text == "[Calculator(2+3) → 5] done."
    assert g.calls == [{"tool": "Calculator", "input": "2+3", "result": "5", "error": None}]
