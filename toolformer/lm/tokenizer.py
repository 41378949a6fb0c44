"""A small BPE tokenizer trained in code, for the tiny test model and the small world.

Pieces follow the conventions the small world needs (docs/design.md, "The small world"): one token
per digit; a space belongs to the piece after it, so ``" 5"`` and ``" ["``
compete at one decoding step; brackets, parentheses and ``→`` are pieces of
their own. With ``digits_apart`` a digit never takes the space before it (``" 5"`` is ``" "`` then ``"5"``):
a number then has the same tokens after a space as after ``(`` in a call, so copying it into the call is
copying tokens as they are. With ``prefix_space`` every encoded text starts as if after a space (the dummy prefix
of sentencepiece tokenizers): a prompt's first word or number has the tokens it has anywhere else in a text.
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


def set_prefix_space(tokenizer) -> None:
    """Make ``tokenizer`` (a transformers fast tokenizer) encode every text as if a space came before it.

    Without it the first number of a prompt is ``5 1`` and the same number later is `` `` ``5 1`` (or ``" 5"``
    ``1``): a small model that learned to copy numbers from after a space did not copy a prompt's first number
    into a call (docs/lab-notes.md, "A space before the first word"). The normalizer is saved in
    ``tokenizer.json``, so any code loading the folder encodes the same way; decoding keeps the space (a
    generated continuation needs it).
    """
    from tokenizers import normalizers

    backend = tokenizer.backend_tokenizer
    if not has_prefix_space(tokenizer):
        backend.normalizer = normalizers.Prepend(" ")


def has_prefix_space(tokenizer) -> bool:
    """Whether ``tokenizer`` encodes a text as if a space came before it (:func:`set_prefix_space`)."""
    from tokenizers import normalizers

    backend = getattr(tokenizer, "backend_tokenizer", None)
    norm = backend.normalizer if backend is not None else None
    return isinstance(norm, normalizers.Prepend) and norm.prepend == " "


def encode_piece(tokenizer, text: str) -> list[int]:
    """The tokens of ``text`` as it continues a text: without the space a prefix-space tokenizer adds to a text's
    start (the same as ``tokenizer.encode`` for any other tokenizer)."""
    if not has_prefix_space(tokenizer):
        return tokenizer.encode(text, add_special_tokens=False)
    backend = getattr(tokenizer, "_piece_backend", None)
    if backend is None:  # a copy without the normalizer, made once per tokenizer
        from tokenizers import Tokenizer

        backend = Tokenizer.from_str(tokenizer.backend_tokenizer.to_str())
        backend.normalizer = None
        tokenizer._piece_backend = backend
    return backend.encode(text, add_special_tokens=False).ids


def train_tokenizer(texts: Iterable[str], vocab_size: int = 1000, extra_tokens: Iterable[str] = (),
                    digits_apart: bool = False, prefix_space: bool = False):
    """Train a BPE tokenizer on ``texts``; return a transformers fast tokenizer.

    ``extra_tokens`` are added as special (never split) tokens, e.g. the
    markers of the special-token call style. The vocabulary is learned
    without the prefix space (:func:`set_prefix_space`), which only moves
    a text's first piece to the form it has after a space.
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
    if prefix_space:
        set_prefix_space(fast)
    extra = list(extra_tokens)
    if extra:
        fast.add_tokens(extra, special_tokens=True)
    return fast
