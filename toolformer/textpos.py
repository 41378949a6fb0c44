"""Token positions in a text: token ids and where a call goes before each token."""

from __future__ import annotations

from dataclasses import dataclass


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


def marker_token_ids(tokenizer, marker: str) -> list[int]:
    """Every vocabulary token that is ``marker`` possibly preceded by spaces
    (with a BPE that attaches spaces, both ``[`` and `` [`` start a call)."""
    ids = []
    for tok_id in range(len(tokenizer)):
        text = tokenizer.decode([tok_id])
        if text and text.lstrip(" ") == marker:
            ids.append(tok_id)
    return ids
