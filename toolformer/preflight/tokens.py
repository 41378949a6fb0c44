"""Preflight, the tokenizer: how the call markers of the configured style tokenize in context.

A call is rendered in three contexts (:data:`CONTEXTS`): at a word start (``e(c, r)`` after a space), right
after a number (``e(c)`` as the few-shot prompts write it, after a digit) and before a newline (``e(c, ε)`` and a
newline: the filter's prefix). For every marker -- call start, call end, the result marker, each enabled tool's
name and the parentheses -- the tokens that cover it in the whole text are compared with the marker's tokens
alone. A marker is named when

* a token spans it and a neighbouring character other than a space before it (``merges``: `` [`` is the
  start marker after a space and fine, ``[Cal`` or ``)]`` are not);
* its tokens in context differ from its tokens alone (``differs``: the model sees another token there than
  the one the pipeline scores or stops on);
* it is an unknown token (``unknown``); or no token of the vocabulary is the call-start marker (the sampler
  scores p(call start) on such a token), or holds the call-end marker (a sampled call stops at one) or, when
  the sampler runs without a prompt, the result marker (it stops there too).

``merges`` lists every text a marker merges into (the plain style on a cl100k-like BPE: ``()``, ``?)``, ``.]``
after a Calendar result, ``)]``). In a special style the name and the parentheses sit between two added tokens
kept whole, so their merges are not reported and the fix never names the special style.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from toolformer.lm.textpos import marker_token_ids, tokenize_text, vocab_ids
from toolformer.lm.tokenizer import encode_piece
from toolformer.tools.calls import CallStyle

# name -> (text before the call, result of the call (None: e(c), "": e(c, ε)), text after it)
CONTEXTS: dict[str, tuple[str, str | None, str]] = {
    "word start": ("The figure is ", "0.29", " 0.29 in all."),
    "after a number": ("It came to 1400", None, " in all."),
    "before a newline": ("", "", "\nIt came to 1400."),
    "after a sentence": ("The fair opens ", "Today is Monday, May 1, 2024.", " on a Friday."),  # Calendar's results
}
INNER = ("name", "open", "close")  # the markers inside a call: between added tokens in a special style
FIX_STYLE = "calls.style: special (<API>, </API> and → as added tokens)"


@dataclass(frozen=True)
class Occurrence:
    """One marker in one rendered context: its role, its text and its character span."""

    role: str  # start, end, arrow, name, open, close
    marker: str
    start: int
    end: int


def render_context(style: CallStyle, tool: str, tool_input: str, context: str) -> tuple[str, list[Occurrence]]:
    """The text of ``context`` with a call of ``tool``, and where each marker of the call is in it."""
    before, result, after = CONTEXTS[context]
    call = style.render(tool, tool_input, result)
    base = len(before)
    name_at = base + len(style.start)
    open_at = name_at + len(tool)
    close_at = open_at + 1 + len(tool_input)
    found = [Occurrence("start", style.start, base, name_at), Occurrence("name", tool, name_at, open_at),
             Occurrence("open", "(", open_at, open_at + 1), Occurrence("close", ")", close_at, close_at + 1)]
    if result is not None:
        arrow_at = call.index(style.arrow, close_at - base) + base
        found.append(Occurrence("arrow", style.arrow, arrow_at, arrow_at + len(style.arrow)))
    end_at = base + len(call) - len(style.end)
    found.append(Occurrence("end", style.end, end_at, end_at + len(style.end)))
    return before + call + after, found


def _covering(spans: list[tuple[int, int]], a: int, b: int) -> list[int]:
    """Indices of the tokens whose character span overlaps [a, b)."""
    return [k for k, (s, e) in enumerate(spans) if s < b and e > a and e > s]


def _decoded(tok, ids: list[int]) -> list[str]:
    return tok.batch_decode([[i] for i in ids], clean_up_tokenization_spaces=False)


def _alone_forms(tok, text: str, occ: Occurrence) -> list[list[int]]:
    """The marker's tokens alone, also with the spaces that come right before it in ``text`` (a BPE that
    attaches a space to the piece after it writes `` [`` there), or with one space at the text's start (a
    tokenizer that encodes every text as if a space came first)."""
    j = occ.start
    while j > 0 and text[j - 1] == " ":
        j -= 1
    forms = [encode_piece(tok, text[k : occ.start] + occ.marker) for k in range(j, occ.start + 1)]
    forms += [encode_piece(tok, " " + occ.marker)] if occ.start == 0 else []
    return forms + [alone(tok, occ.marker)]


def alone(tok, marker: str) -> list[int]:
    """The tokens of ``marker`` alone, as it continues a text: without a leading token of spaces only (a
    sentencepiece tokenizer writes ``▁`` before a text's first piece)."""
    ids = encode_piece(tok, marker)
    while len(ids) > 1 and not tok.decode(ids[:1]).strip():
        ids = ids[1:]
    return ids


def check_occurrence(tok, text: str, occ: Occurrence, tokens) -> tuple[list[str], list[str]]:
    """(problems, the tokens that cover the marker in ``text``) of one marker occurrence."""
    spans = tokens.spans
    cover = _covering(spans, occ.start, occ.end)
    ids = [tokens.ids[k] for k in cover]
    problems = []
    if not cover:
        return ["no token covers it"], []
    first, last = spans[cover[0]], spans[cover[-1]]
    lead = text[first[0] : occ.start]
    if lead.strip() or last[1] > occ.end:
        problems.append(f"merges with its neighbours (its tokens cover {text[first[0] : last[1]].lstrip(' ')!r})")
    elif ids not in _alone_forms(tok, text, occ):
        problems.append(f"differs from its tokens alone ({_decoded(tok, ids)} in context, "
                        f"{_decoded(tok, alone(tok, occ.marker))} alone)")
    if tok.unk_token_id is not None and tok.unk_token_id in ids:
        problems.append("is an unknown token")
    return problems, _decoded(tok, ids)


def single_token_problem(tok, role: str, marker: str) -> str | None:
    """Why the sampler cannot use ``marker`` (a call start, end or result marker) as a token, or None."""
    if role == "start":
        if not marker_token_ids(tok, marker, required=False):
            return "no single token is the call-start marker (the sampler scores p(call start) on one)"
        return None
    texts = tok.batch_decode([[i] for i in vocab_ids(tok)], clean_up_tokenization_spaces=False)
    if not any(marker in t for t in texts):
        return f"no token holds the {role} marker (a sampled call stops at one)"
    return None


CALL_MARKERS = ("start", "end", "arrow")  # the markers the sampler scores and stops on, and the style sets


def marker_fix(style: CallStyle, role: str) -> str:
    """What to change for a problem with a marker of ``role``."""
    if role in CALL_MARKERS:
        return FIX_STYLE if not style.special_tokens else "another marker: an added token kept whole (calls.style)"
    if style.special_tokens:
        return "usually harmless (the model learns the call's tokens as they are)"
    return ("usually harmless (the model learns the call's tokens as they are); " + FIX_STYLE
            + " keeps the markers around it whole")


def merged_text(problem: str) -> str | None:
    """The text a ``merges with its neighbours`` problem names, or None for another problem."""
    head = "merges with its neighbours (its tokens cover "
    return ast.literal_eval(problem[len(head) : -1]) if problem.startswith(head) else None


def merges_found(markers: list[dict]) -> list[str]:
    """Every text a marker merges into, once each (``()``, ``?)``, ``.]``), in the order found."""
    found: list[str] = []
    for entry in markers:
        for covered in entry.get("merges", []):
            if covered not in found:
                found.append(covered)
    return found


def check_tokenizer(tok, style: CallStyle, tools: dict[str, str], free: bool = False) -> dict:
    """The tokenizer's report for ``style`` and ``tools`` (name -> an example input): per marker, its tokens
    alone and in each context, what is wrong and the fix; ``problems`` (a line each), ``start_ok`` (the sampler
    can score the call start as the text writes it) and ``ok`` (no problem at all). ``free``: the sampler runs
    without a prompt (``sample.prompt: none``), so it also stops a sampled call at the result marker."""
    markers: dict[str, dict] = {}
    for tool, example in tools.items():
        for context in CONTEXTS:
            text, found = render_context(style, tool, example, context)
            tokens = tokenize_text(tok, text)
            for occ in found:
                entry = markers.setdefault(occ.marker, {
                    "marker": occ.marker, "role": occ.role, "alone": _decoded(tok, alone(tok, occ.marker)),
                    "contexts": {}, "problems": [], "merges": [], "fix": ""})
                problems, covering = check_occurrence(tok, text, occ, tokens)
                entry["contexts"].setdefault(context, covering)
                if style.special_tokens and occ.role in INNER:  # between two added tokens kept whole: harmless
                    problems = [p for p in problems if not p.startswith(("merges", "differs"))]
                for p in problems:
                    merged = merged_text(p)
                    if merged is not None and merged not in entry["merges"]:
                        entry["merges"].append(merged)
                    line = f"{p} {context}" if p.startswith(("merges", "differs")) else p
                    if line not in entry["problems"]:
                        entry["problems"].append(line)
    for entry in markers.values():
        stops = ("start", "end", "arrow") if free else ("start", "end")
        why = single_token_problem(tok, entry["role"], entry["marker"]) if entry["role"] in stops else None
        if why:
            entry["problems"].insert(0, why)
        if entry["problems"]:
            entry["fix"] = marker_fix(style, entry["role"])
    start = markers[style.start]
    return {"style": style.name, "markers": list(markers.values()), "merges": merges_found(list(markers.values())),
            "problems": [f"{e['role']} {e['marker']!r}: {p}" for e in markers.values() for p in e["problems"]],
            "start_ok": not start["problems"], "ok": not any(e["problems"] for e in markers.values())}
