"""The base model's tokenizer settings (toolformer.lm.tokenizer): ``digits_apart`` gives a number the same tokens
in the text and in a call; ``prefix_space`` gives a prompt's first number the tokens it has after a space."""

import pytest


def test_digits_apart_gives_a_number_the_same_tokens_in_text_and_call():
    """With ``digits_apart`` the first operand of a call (after ``(``) is the same tokens as the number in the
    text (after a space); by default the text's first digit carries the space and the call's does not."""
    from toolformer.lm.tokenizer import train_tokenizer
    from toolformer.worlds.basemodel import WORLD_TOOLS, check_tokenizer

    texts = ["Rosa had 4723 cups. [Calculator(4723 + 8738) → 13461] 13461 cups in all, Rosa said.",
             *[f"[{name}(" for name in WORLD_TOOLS]] * 40
    text = " had 4723 cups [Calculator(4723 + 8738) → 13461] 13461"
    apart = train_tokenizer(texts, vocab_size=160, digits_apart=True)
    pieces = apart.tokenize(text)
    assert pieces[:7] == [" had", " ", "4", "7", "2", "3", " cups"], pieces
    call = pieces.index("(")
    assert pieces[call + 1 : call + 5] == ["4", "7", "2", "3"] and pieces[call + 5 : call + 7] == [" +", " "]
    assert " 4" not in apart.get_vocab()
    joined = train_tokenizer(texts, vocab_size=160).tokenize(text)
    assert joined[1] == " 4" and joined[joined.index("(") + 1] == "4"
    check_tokenizer(apart, digits_apart=True)
    with pytest.raises(ValueError, match="' 1' is 2 tokens"):
        check_tokenizer(apart)
    assert apart.tokenize(" 19") == [" ", "1", "9"]  # the space before a number is a token of its own
    assert apart.decode(apart(text, add_special_tokens=False)["input_ids"]) == text


def test_prefix_space_gives_a_prompts_first_number_the_tokens_it_has_after_a_space(tmp_path):
    """With ``prefix_space`` a text that opens with a number (or a word) is encoded as the same number later in a
    text: ``" "`` then its digits. The setting survives save and load, is applied once, keeps the required pieces
    whole, and the character offsets still place a call before the first number."""
    from transformers import AutoTokenizer

    from toolformer.lm.textpos import tokenize_text
    from toolformer.lm.tokenizer import has_prefix_space, set_prefix_space, train_tokenizer
    from toolformer.tools.calls import insert_calls
    from toolformer.worlds.basemodel import WORLD_TOOLS, check_tokenizer

    texts = ["51 families had 4723 cups. [Calculator(4723 / 51) → 92.6] 93 cups each, Rosa said.",
             *[f"[{name}(" for name in WORLD_TOOLS]] * 40
    plain = train_tokenizer(texts, vocab_size=160, digits_apart=True)
    spaced = train_tokenizer(texts, vocab_size=160, digits_apart=True, prefix_space=True)
    assert plain.tokenize("51 families") == ["5", "1", " families"]
    assert spaced.tokenize("51 families") == [" ", "5", "1", " families"] == plain.tokenize(" 51 families")
    assert spaced.tokenize("Rosa said") == plain.tokenize(" Rosa said")
    assert not has_prefix_space(plain) and has_prefix_space(spaced)
    set_prefix_space(spaced)  # a second time changes nothing
    assert spaced.tokenize("5") == [" ", "5"]
    check_tokenizer(spaced, digits_apart=True)

    spaced.save_pretrained(tmp_path)
    loaded = AutoTokenizer.from_pretrained(tmp_path)
    assert has_prefix_space(loaded) and loaded.tokenize("51 families") == [" ", "5", "1", " families"]

    text = "51 families had 4723 cups."
    tt = tokenize_text(loaded, text)
    assert len(tt.ids) == len(loaded(text, add_special_tokens=False)["input_ids"])
    four = tt.ids.index(loaded.convert_tokens_to_ids("4"))
    assert text[tt.char_starts[four]:].startswith("4723")
    assert insert_calls(text, [(tt.char_starts[four], "[Calculator(51 * 2) → 102]")]) == \
        "51 families had [Calculator(51 * 2) → 102] 4723 cups."
    assert tt.char_starts[0] == tt.char_starts[1] == 0  # the added space and the first digit both start the text
