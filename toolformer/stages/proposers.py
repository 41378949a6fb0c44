"""Rule-based candidate proposers and the paper's per-tool text pre-filters.

A model below roughly a billion parameters cannot follow the few-shot prompt
(the paper finds prompt-following emerges near 775M parameters), so these
proposers offer candidates by rule instead. They only propose: every candidate
goes through the same execution and filter as sampled ones, and the filter
decides.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction

from toolformer.lm.textpos import TokenizedText

# A number as written in prose: 1,234.5 or 17 or 0.25.
NUMBER = re.compile(r"(?<![\w.])(\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?![\w])")
_CUE = re.compile(r"(=|\bequals?\b|\btotal of\b|\baverage of\b)\s*\$?$", re.IGNORECASE)
_MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
           "November", "December", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
_DATE_WORDS = re.compile(r"\b(today|tomorrow|yesterday|tonight|now|ago|next|last|this|year|years|month|week|"
                         + "|".join(_MONTHS) + r")\b", re.IGNORECASE)
_CAPITALISED = re.compile(r"\b[A-Z][a-z]+(?:\s+[A-Z][a-z]+)*")
_WORD = re.compile(r"[A-Za-z]+")
_SENTENCE_END = re.compile(r"[.!?]\s")


@dataclass(frozen=True)
class Proposal:
    position: int  # token index i of x_i
    input: str


def number_value(text: str) -> Fraction:
    return Fraction(text.replace(",", ""))


def numbers_in(text: str) -> list[tuple[int, int, str]]:
    """(start, end, text) of every number in ``text``."""
    return [(m.start(), m.end(), m.group()) for m in NUMBER.finditer(text)]


# -- pre-filters (the paper's, applied to a whole document) -------------------------

def calculator_prefilter(text: str, tokens: TokenizedText | None = None, window_tokens: int = 100) -> bool:
    """≥ 3 numbers within 100 tokens where one follows from two others by +, −, ×, ÷,
    or "=", "equals", "total of", "average of" right before a number."""
    nums = numbers_in(text)
    for s, _e, _t in nums:
        if _CUE.search(text[max(0, s - 20) : s]):
            return True
    starts = tokens.char_starts if tokens is not None else None
    values = [(s, number_value(t)) for s, _e, t in nums]
    for k, (s_c, c) in enumerate(values):
        # Candidates a, b: numbers before c and within the token window.
        near = [v for s, v in values[:k] if _token_gap(starts, s, s_c, text) <= window_tokens]
        for i, a in enumerate(near):
            for b in near[i + 1 :]:
                if c in (a + b, a * b, abs(a - b)) or (b and c == a / b) or (a and c == b / a):
                    return True
    return False


def _token_gap(starts: list[int] | None, a: int, b: int, text: str) -> int:
    if starts is None:
        return len(text[a:b].split())  # words as a proxy for tokens
    import bisect

    return bisect.bisect_left(starts, b) - bisect.bisect_left(starts, a)


def calendar_prefilter(text: str, date: str | None) -> bool:
    """A dated document that mentions time (today, next, last, years, month names ...)."""
    return bool(date) and bool(_DATE_WORDS.search(text))


PREFILTERS: dict[str, Callable] = {
    "Calculator": lambda doc, tokens: calculator_prefilter(doc["text"], tokens),
    "Calendar": lambda doc, tokens: calendar_prefilter(doc["text"], doc.get("date")),
}


def passes_prefilter(tool: str, doc: dict, tokens: TokenizedText) -> bool:
    f = PREFILTERS.get(tool)
    return True if f is None else bool(f(doc, tokens))


# -- rule-based proposers ----------------------------------------------------------

def _token_at(tokens: TokenizedText, char: int) -> int | None:
    """Index of the token whose first non-space character is at ``char``."""
    import bisect

    i = bisect.bisect_left(tokens.char_starts, char)
    return i if i < len(tokens.char_starts) and tokens.char_starts[i] == char else None


def _fmt(text: str) -> str:
    return text.replace(",", "")


def propose_calculator(text: str, tokens: TokenizedText, limit: int = 24) -> list[Proposal]:
    """Before every number not stated earlier in the text: all pairs of the last
    three distinct earlier numbers with the four operations (ordered pairs for
    − and ÷). A number the text already stated can be copied, not computed."""
    out: list[Proposal] = []
    nums = numbers_in(text)
    for k, (s, _e, t) in enumerate(nums):
        pos = _token_at(tokens, s)
        if pos is None or any(_fmt(t) == _fmt(u) for _s, _e2, u in nums[:k]):
            continue
        earlier: list[str] = []
        for _s, _e2, t in reversed(nums[:k]):
            v = _fmt(t)
            if v not in earlier:
                earlier.append(v)
            if len(earlier) == 3:
                break
        earlier.reverse()
        exprs = []
        for i, a in enumerate(earlier):
            for b in earlier[i + 1 :]:
                exprs += [f"{a} + {b}", f"{a} * {b}", f"{b} - {a}", f"{a} - {b}", f"{b} / {a}", f"{a} / {b}"]
        out += [Proposal(pos, x) for x in exprs[:limit]]
    return out


def _entity_positions(text: str) -> list[int]:
    """Character offsets where an answer may start: numbers and capitalised
    words that do not begin a sentence."""
    starts = [s for s, _e, _t in numbers_in(text)]
    for m in _CAPITALISED.finditer(text):
        before = text[: m.start()].rstrip()
        if before and not before.endswith((".", "!", "?", "\n")):
            starts.append(m.start())
    return sorted(set(starts))


# Capitalised words that begin sentences or label text, not names.
_NOT_NAMES = set(["The", "This", "That", "These", "Those", "In", "On", "At", "A", "An", "Of", "For", "From", "To", "By",
                  "With", "It", "He", "She", "They", "Its", "His", "Her", "Their", "Later", "Each", "Every", "Nobody",
                  "Today", "Then", "There", "Here", "Question", "Answer", "After", "Before", "When", "What", "Who",
                  "Where", "Which", "How", "And", "But", "So", "Of"])


def _sentence_start(text: str, char: int) -> int:
    start = 0
    for m in _SENTENCE_END.finditer(text, 0, char):
        start = m.end()
    return start


def _query_parts(text: str, char: int) -> tuple[list[str], list[str]]:
    """Capitalised spans (leading non-name words removed) and the words before
    ``char`` in its sentence."""
    before = text[_sentence_start(text, char) : char]
    spans = []
    for m in _CAPITALISED.finditer(before):
        words = m.group().split()
        while words and words[0] in _NOT_NAMES:
            words.pop(0)
        if words:
            spans.append(" ".join(words))
    return spans, _WORD.findall(before)


_QUESTION = re.compile(r"(?:^|(?<=[.!?\n]))\s*(?:Question:\s*)?([^.!?\n]{3,200}\?)")


def _last_question(text: str, char: int) -> str | None:
    """The question sentence right before ``char`` (e.g. "Question: Who ...? Answer:")."""
    found = None
    for m in _QUESTION.finditer(text, 0, char):
        found = m
    if found is None or char - found.end() > 40:
        return None
    return found.group(1).strip()


def propose_lookup(text: str, tokens: TokenizedText, limit: int = 4, question: bool = False) -> list[Proposal]:
    """WikiSearch/QA queries for an entity or number: the question just asked,
    if any; else each of the last two capitalised spans of the sentence with
    the words that follow it (or, for a span right before the position, the
    words before it)."""
    out: list[Proposal] = []
    for char in _entity_positions(text):
        pos = _token_at(tokens, char)
        if pos is None:
            continue
        queries = []
        asked = _last_question(text, char)
        if asked:
            queries.append(asked if question else asked.rstrip("?"))
        spans, _words = _query_parts(text, char)
        sentence = text[:char]
        for span in [s for s in dict.fromkeys(reversed(spans)) if s][:2]:
            at = sentence.rfind(span)
            before = _WORD.findall(sentence[max(0, sentence.rfind("\n", 0, at), _sentence_start(sentence, at)) : at])
            after = _WORD.findall(sentence[at + len(span) :])
            q = " ".join([*before[-3:], span, *after[-5:]]).strip()
            queries.append(q + "?" if question else q)
        out += [Proposal(pos, q) for q in list(dict.fromkeys(queries))[:limit]]
    return out


def propose_calendar(text: str, tokens: TokenizedText, limit: int = 1) -> list[Proposal]:
    """Before date-like words: today, next, last, month and weekday names, years."""
    out = []
    for m in _DATE_WORDS.finditer(text):
        pos = _token_at(tokens, m.start())
        if pos is not None:
            out.append(Proposal(pos, ""))
    return out


def propose(tool: str, text: str, tokens: TokenizedText, limit: int) -> list[Proposal]:
    """Rule-based candidates of ``tool`` for one document (empty if none exist)."""
    if tool == "Calculator":
        return propose_calculator(text, tokens, limit)
    if tool == "WikiSearch":
        return propose_lookup(text, tokens, limit)
    if tool == "QA":
        return propose_lookup(text, tokens, limit, question=True)
    if tool == "Calendar":
        return propose_calendar(text, tokens, limit)
    return []


RULE_TOOLS = ("Calculator", "WikiSearch", "QA", "Calendar")
