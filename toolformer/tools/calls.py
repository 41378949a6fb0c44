"""The API-call format: render, parse, insert and strip calls in text.

The paper writes a call c = (tool, input) as e(c) = ``<API> tool(input) </API>``
and a call with its result r as e(c, r) = ``<API> tool(input) → r </API>``.
Two concrete styles are supported:

* ``plain``: the paper's plain-text markers ``[``, ``]`` and ``→`` (or ``->``),
  so the tokenizer needs no new tokens;
* ``special``: ``<API>``, ``</API>`` and ``→`` registered as added tokens on the
  tokenizer (see :func:`add_call_tokens`).

Everything here is pure string work except :func:`add_call_tokens`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from toolformer.config.tools import CALL_NAME

__all__ = [
    "CALL_NAME",
    "ApiCall",
    "CallStyle",
    "ParsedCall",
    "STYLES",
    "add_call_tokens",
    "init_call_rows",
    "get_style",
    "insert_calls",
    "parse_calls",
    "strip_calls",
]


@dataclass(frozen=True)
class CallStyle:
    """Markers of one linearisation style."""

    name: str
    start: str  # call-start marker, `<API>` in the paper's notation
    end: str  # call-end marker, `</API>`
    arrow: str  # result marker, `→`
    arrow_alternatives: tuple[str, ...] = ()  # also accepted when parsing
    special_tokens: bool = False  # markers are added tokens on the tokenizer

    def render(self, tool: str, tool_input: str, result: str | None = None) -> str:
        """e(c) when ``result`` is None, else e(c, r).

        An empty-string result renders as e(c, ε): ``[tool(input) →]``, the
        paper's call "without its result".
        """
        head = f"{self.start}{tool}({tool_input})"
        if result is None:
            return f"{head}{self.end}"
        if result == "":
            return f"{head} {self.arrow}{self.end}"
        return f"{head} {self.arrow} {result}{self.end}"

    @property
    def arrows(self) -> tuple[str, ...]:
        return (self.arrow, *self.arrow_alternatives)


STYLES: dict[str, CallStyle] = {
    "plain": CallStyle("plain", "[", "]", "→", ("->",)),
    "plain_ascii": CallStyle("plain_ascii", "[", "]", "->", ("→",)),
    "special": CallStyle("special", "<API>", "</API>", "→", ("->",), special_tokens=True),
}


def get_style(name: str) -> CallStyle:
    try:
        return STYLES[name]
    except KeyError:
        raise ValueError(f"unknown call style {name!r}; choose one of {sorted(STYLES)}") from None


@dataclass(frozen=True)
class ApiCall:
    """A call c = (tool, input), optionally with its result r."""

    tool: str
    input: str
    result: str | None = None


@dataclass(frozen=True)
class ParsedCall:
    """A call found in text, with the character span [start, end) it occupies."""

    call: ApiCall
    start: int
    end: int
    closed: bool  # the call-end marker was found


_NAME = re.compile(CALL_NAME)


def _scan_input(text: str, pos: int) -> int | None:
    """Given ``text[pos - 1] == '('``, return the index of the matching ``)``.

    Nested parentheses are balanced; parentheses inside single or double quotes
    are ignored; a backslash escapes the next character inside quotes.
    """
    depth = 1
    quote: str | None = None
    i = pos
    while i < len(text):
        ch = text[i]
        if quote:
            if ch == "\\":
                i += 2
                continue
            if ch == quote:
                quote = None
        elif ch in "'\"":
            # An apostrophe inside a word ("Lincoln's") is not a quote.
            if ch == "'" and i > pos and text[i - 1].isalnum():
                pass
            elif text.find(ch, i + 1) != -1:
                quote = ch
        elif ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
            if depth == 0:
                return i
        i += 1
    return None


def parse_calls(text: str, style: CallStyle, tools: set[str] | None = None) -> list[ParsedCall]:
    """Find every call in ``text``.

    A call is ``start name(input) end`` or ``start name(input) arrow result end``.
    Only names in ``tools`` count when given (in the plain style a bare ``[`` is
    ordinary text). A call without its end marker is returned with
    ``closed=False`` and spans to the end of the text.
    """
    found: list[ParsedCall] = []
    i = 0
    while True:
        s = text.find(style.start, i)
        if s == -1:
            return found
        j = s + len(style.start)
        while j < len(text) and text[j] == " ":
            j += 1
        m = _NAME.match(text, j)
        if not m or (tools is not None and m.group() not in tools):
            i = s + len(style.start)
            continue
        k = m.end()
        if k >= len(text) or text[k] != "(":
            i = s + len(style.start)
            continue
        close = _scan_input(text, k + 1)
        if close is None:
            i = s + len(style.start)
            continue
        tool, tool_input = m.group(), text[k + 1 : close]
        rest = close + 1
        # Optional result: spaces, arrow, result text, end marker.
        r = rest
        while r < len(text) and text[r] == " ":
            r += 1
        result: str | None = None
        arrow = next((a for a in style.arrows if text.startswith(a, r)), None)
        if arrow is not None:
            body_start = r + len(arrow)
            e = text.find(style.end, body_start)
            closed = e != -1
            body_end = e if closed else len(text)
            body = text[body_start:body_end]
            result = body[1:] if body.startswith(" ") else body
            end = body_end + len(style.end) if closed else len(text)
        else:
            closed = text.startswith(style.end, r)
            end = r + len(style.end) if closed else rest
        found.append(ParsedCall(ApiCall(tool, tool_input, result), s, end, closed))
        i = end


def insert_calls(text: str, inserts: list[tuple[int, str]], separator: str = " ") -> str:
    """x* = x_1..x_{i-1}, e(c, r), x_i..x_n for every (char_offset, call_text).

    ``separator`` goes between the call and the text that follows it. Offsets
    refer to the original text; several calls may be inserted.
    """
    out: list[str] = []
    last = 0
    for offset, call_text in sorted(inserts, key=lambda p: p[0]):
        if not 0 <= offset <= len(text):
            raise ValueError(f"insert offset {offset} outside text of length {len(text)}")
        out.append(text[last:offset])
        out.append(call_text + separator)
        last = offset
    out.append(text[last:])
    return "".join(out)


def strip_calls(text: str, style: CallStyle, tools: set[str] | None = None, separator: str = " ") -> str:
    """Remove every call (and the separator that follows it) from ``text``."""
    out: list[str] = []
    last = 0
    for pc in parse_calls(text, style, tools):
        out.append(text[last : pc.start])
        last = pc.end
        if separator and text.startswith(separator, last):
            last += len(separator)
    out.append(text[last:])
    return "".join(out)


def add_call_tokens(tokenizer, model=None, style: CallStyle | None = None) -> int:
    """Register the markers of a special-token style on ``tokenizer`` and give ``model`` rows for them
    (:func:`init_call_rows`). Returns the number of tokens added.

    The markers are added tokens (never split) but not special ones: ``decode(..., skip_special_tokens=True)``,
    which chat stacks and evaluation harnesses use, keeps them, so a decoded text never loses its calls."""
    from tokenizers import AddedToken

    style = style or STYLES["special"]
    if not style.special_tokens:
        return 0
    before = max(tokenizer.get_vocab().values(), default=-1) + 1  # not len(): cl100k has ids past its length
    markers = [style.start, style.end, style.arrow]
    tokenizer.add_tokens([AddedToken(m, special=False, normalized=False) for m in markers])
    new = [(m, tokenizer.convert_tokens_to_ids(m)) for m in markers]
    new = [(m, i) for m, i in new if i >= before]  # a marker already in the vocabulary adds no row
    if new:
        tokenizer.call_rows = (before, new)  # what init_call_rows gives rows to, once
    if model is not None:
        init_call_rows(model, tokenizer)
    return len(new)


def init_call_rows(model, tokenizer) -> str:
    """Rows for the call tokens :func:`add_call_tokens` added: the embedding matrix is resized when it has fewer
    rows than the tokenizer, and the new tokens' input (and untied output) rows are set to the mean of the rows of
    the tokenizer's earlier tokens, whatever the checkpoint held there (a checkpoint padded beyond its tokenizer,
    as every Qwen, has untrained rows at those ids). Returns one line saying what was done ("" when nothing was
    added)."""
    import torch

    pending = getattr(tokenizer, "call_rows", None)
    if not pending:
        return ""
    before, new = pending
    rows = model.get_input_embeddings().weight.shape[0]
    needed = max(len(tokenizer), 1 + max(i for _m, i in new))  # a vocabulary with holes has ids past its length
    if rows < needed:
        model.resize_token_embeddings(needed)
    matrices = {id(m.weight): m.weight for m in (model.get_input_embeddings(), model.get_output_embeddings())
                if m is not None}
    ids = torch.tensor([i for _m, i in new])
    with torch.no_grad():
        for w in matrices.values():
            w[ids] = w[:before].mean(0).to(w.dtype)
    tokenizer.call_rows = None
    how = (f"embedding resized {rows:,} -> {needed:,} rows" if rows < needed
           else f"the checkpoint's padding rows reused ({rows:,} rows, tokenizer {len(tokenizer):,})")
    line = (f"call tokens {' '.join(f'{m}={i}' for m, i in new)} initialised to the mean of the {before:,} "
            f"tokenizer rows ({'tied' if len(matrices) == 1 else 'input and output'} embeddings; {how})")
    tokenizer.call_rows_note = line
    return line
