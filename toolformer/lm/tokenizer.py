"""A small BPE tokenizer trained in code, for the tiny test model and the small world.

Pieces follow the conventions the small world needs (docs/design.md, "The small world"): one token
per digit; a space belongs to the piece after it, so ``" 5"`` and ``" ["``
compete at one decoding step; brackets, parentheses and ``→`` are pieces of
their own. With ``digits_apart`` a digit never takes the space before it (``" 5"`` is ``" "`` then ``"5"``):
a number then has the same tokens after a space as after ``(`` in a call, so copying it into the call is
copying tokens as they are.
"""

from __future__ import annotations

from collections.abc import Iterable

BOS = "<|endoftext|>"
PAD = "<pad>"
UNK = "<unk>"

# A space (optional) + a word, or + one digit, or + one other symbol; runs of spaces.
PIECES = r" ?[A-Za-z_]+| ?[0-9]| ?[^\sA-Za-z0-9]|\s+"
# The same, but a digit is a piece alone: the space before it is one of its own (``\s+``).
PIECES_DIGITS_APART = r" ?[A-Za-z_]+|[0-9]| ?[^\sA-Za-z0-9]|\s+"


def train_tokenizer(texts: Iterable[str], vocab_size: int = 1000, extra_tokens: Iterable[str] = (),
                    digits_apart: bool = False):
    """Train a BPE tokenizer on ``texts``; return a transformers fast tokenizer.

    ``extra_tokens`` are added as special (never split) tokens, e.g. the
    markers of the special-token call style.
    """
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token=UNK))
    pieces = PIECES_DIGITS_APART if digits_apart else PIECES
    tok.pre_tokenizer = pre_tokenizers.Split(Regex(pieces), behavior="isolated")
    tok.decoder = decoders.Fuse()
    alphabet = [chr(c) for c in range(32, 127)] + ["→", "×", "÷", "−", "\n"]
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[BOS, PAD, UNK],
        initial_alphabet=alphabet,
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token=BOS, eos_token=BOS, pad_token=PAD, unk_token=UNK
    )
    extra = list(extra_tokens)
    if extra:
        fast.add_tokens(extra, special_tokens=True)
    return fast
