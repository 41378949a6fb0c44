"""Token positions in a text (token ids and where a call goes before each token),
and which vocabulary tokens are a call marker."""

from __future__ import annotations

import weakref
from dataclasses import dataclass

_MARKER_CACHE: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


@dataclass(frozen=True)
class TokenizedText:
    ids: list[int]
    char_starts: list[int]
    """char_starts[i]: offset of the first non-space character of token x_i; a
    call inserted before x_i goes there (after the space the token carries)."""
    spans: list[tuple[int, int]]


def tokenize_text(tokenizer, text: str) -> TokenizedText:
    enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    starts = []
    for a, b in enc["offset_mapping"]:
        k = a
        while k < b and text[k].isspace():
            k += 1
        starts.append(k if k < b else a)
    return TokenizedText(list(enc["input_ids"]), starts, [tuple(o) for o in enc["offset_mapping"]])


def vocab_ids(tokenizer) -> list[int]:
    """Every id the tokenizer has, added tokens included. Not ``range(len(tokenizer))``: a vocabulary with holes
    (cl100k: 100,261 tokens, ids up to 100,276) puts its special tokens and the call tokens added after them
    above ``len(tokenizer)``."""
    return sorted(set(tokenizer.get_vocab().values()))


def marker_token_ids(tokenizer, marker: str, required: bool = True) -> list[int]:
    """Every vocabulary token that is ``marker`` possibly preceded by spaces
    (with a BPE that attaches spaces, both ``[`` and `` [`` start a call).

    Each token is decoded on its own as it is, without the tokenizer's clean-up
    of spaces (``clean_up_tokenization_spaces=False``): the raw text of the token
    is what is compared. Cached per tokenizer and vocabulary size. Raises
    ValueError when no token is the marker, unless ``required`` is false (then
    the list is empty). The marker ``""`` gives the tokens of spaces only.
    """
    try:
        cache = _MARKER_CACHE.setdefault(tokenizer, {})
    except TypeError:  # a tokenizer that cannot be weakly referenced
        cache = {}
    key = (marker, len(tokenizer))
    if key not in cache:
        ids = vocab_ids(tokenizer)
        texts = tokenizer.batch_decode([[i] for i in ids], clean_up_tokenization_spaces=False)
        cache[key] = [i for i, t in zip(ids, texts) if t.lstrip(" ") == marker]
    if not cache[key] and required:
        raise ValueError(
            f"call-start marker {marker!r} is not a single token of this tokenizer; "
            "use calls.style=special to add it as one"
        )
    return cache[key]
