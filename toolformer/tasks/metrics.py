"""The paper's metrics (section 4.2), comparing values, not strings.

**Math.** The model's answer is its output with every tool call removed and
cut before an unclosed call (``[QA(…`` that never closed: counted as a
malformed call), then cut at the first line break and at the end of the first
sentence that holds a number. In that answer the prediction is the first
number after ``=`` when there is one, else the first number. A number may be
written with thousands separators, a Unicode minus, as a fraction (``5/2``,
``-(1/3)``) or a mixed number (``2 1/2``). A gold answer with several numbers
(a ratio ``5:45``, a time ``3:30 p.m.``, a list ``5; 15; 20``) needs each of
them, in order. Prediction and gold are compared after rounding both half up
to ``decimals`` places (2 by default), so 0.625 matches 0.63.

**QA.** An answer counts when the normalised gold answer or one of its
aliases appears, as whole words, in the first ``max_words`` words of the
model's answer (20; 5 for LAMA). Normalising lowercases, folds accents
(Zakāt → zakat), drops thousands separators (24,900 → 24900), turns
punctuation into spaces except a hyphen inside a word (so
"semi-presidential" does not contain "presidential") and drops the articles.
"""

from __future__ import annotations

import re
import unicodedata
from decimal import ROUND_HALF_UP, Decimal, localcontext
from fractions import Fraction

from toolformer.tools.calls import CallStyle, get_style, strip_calls

# -- numbers -------------------------------------------------------------------
_MINUS = str.maketrans({"\u2212": "-", "\ufe63": "-", "\uff0d": "-"})
# One number: thousands with commas (1,234.5), plain digits, or a leading decimal point; a minus only at a
# word start (10-2 is two numbers).
_NUM = r"(?:\d{1,3}(?:,\d{3})+(?![\d,])|\d+)(?:\.\d+)?|\.\d+"
_VALUE = re.compile(
    rf"(?<![\w.,])(?P<mixed>\d+)\s+(?P<mn>\d+)\s*/\s*(?P<md>\d+)(?![\d/])"  # 2 1/2
    rf"|(?<![\w.,])(?P<neg>-)?\s*\(\s*(?P<pn>{_NUM})\s*/\s*(?P<pd>{_NUM})\s*\)"  # -(1/3), (1/3)
    rf"|(?<![\w.,/])(?P<sign>-)?(?P<n>{_NUM})(?:\s*/\s*(?P<d>{_NUM})(?![\d/]))?"  # 5, -6, 5/2
)
_UNIT = re.compile(r"\s*\([^()]*[^\W\d_][^()]*\)")  # "(apples)": a bracket with a letter in it
_SENTENCE_END = re.compile(r"[.!?](?=\s|$)")
_CALL_START = r"\s*[A-Za-z_][A-Za-z0-9_]*\s*\("


def _fraction(text: str) -> Fraction:
    return Fraction(text.replace(",", ""))


def numbers(text: str) -> list[Fraction]:
    """Every number in ``text``, in order, as exact fractions."""
    out = []
    for m in _VALUE.finditer(text.translate(_MINUS)):
        if m["mixed"] is not None:
            whole, part = Fraction(m["mixed"]), Fraction(int(m["mn"]), int(m["md"]) or 1)
            out.append(whole + part if int(m["md"]) else whole)
        elif m["pn"] is not None:
            den = _fraction(m["pd"])
            value = _fraction(m["pn"]) / den if den else _fraction(m["pn"])
            out.append(-value if m["neg"] else value)
        else:
            value = _fraction(m["n"])
            if m["d"] is not None and _fraction(m["d"]):
                value /= _fraction(m["d"])
            out.append(-value if m["sign"] else value)
    return out


def strip_units(answer: str) -> str:
    """A gold answer without its units in brackets: ``9 (apples)`` → ``9``; ``-(1/3)`` stays."""
    return _UNIT.sub("", str(answer)).strip()


def gold_numbers(answer: str) -> list[Fraction]:
    """The numbers a math gold answer states, without the units in brackets
    (``9 (apples)`` → [9]; ``-(1/3)`` → [-1/3]; ``5:45`` → [5, 45]); [] for
    an answer that is not a number (``Yes``, a name)."""
    return numbers(strip_units(answer))


def cut_unclosed_call(text: str, style: CallStyle) -> tuple[str, bool]:
    """``text`` up to a call that was opened and never closed, and whether there was one."""
    m = re.search(re.escape(style.start) + _CALL_START, text)
    return (text[: m.start()], True) if m else (text, False)


def model_answer(output: str, style: CallStyle | None = None) -> tuple[str, bool]:
    """(the output without tool calls and cut before an unclosed call, whether one was cut)."""
    style = style or get_style("plain")
    return cut_unclosed_call(strip_calls(output, style), style)


def answer_span(text: str) -> str:
    """The part of an answer a math metric reads: up to the first line break,
    and up to the end of the first sentence that holds a number."""
    line = text.lstrip().split("\n", 1)[0]
    start = 0
    for m in _SENTENCE_END.finditer(line):
        if numbers(line[start : m.start()]):
            return line[: m.start()]
        start = m.end()
    return line


def read_prediction(text: str, parts: int = 1) -> list[Fraction] | None:
    """The first ``parts`` numbers of the answer span (after its first ``=`` when
    a number follows it); None when it has fewer."""
    span = answer_span(text)
    eq = span.find("=")
    found = numbers(span[eq + 1 :]) if eq != -1 else []
    if len(found) < parts:
        found = numbers(span)
    return found[:parts] if len(found) >= parts else None


def _rounded(value: Fraction, decimals: int) -> Decimal:
    with localcontext() as ctx:
        ctx.prec = 60
        exact = Decimal(value.numerator) / Decimal(value.denominator)
        return exact.quantize(Decimal(1).scaleb(-decimals), rounding=ROUND_HALF_UP)


def _show(values: list[Fraction]) -> float | str:
    """One number as a float; several as ``a; b``."""
    if len(values) == 1:
        return float(values[0])
    return "; ".join(str(float(v)) if v.denominator != 1 else str(v.numerator) for v in values)


def math_score(output: str, gold: str, decimals: int = 2) -> tuple[float | str | None, bool]:
    """(prediction as read, correct) of a model answer (tool calls already
    removed) against a gold answer; every number of the gold must match."""
    target = gold_numbers(gold)
    if not target:
        raise ValueError(f"gold answer {gold!r} has no number")
    pred = read_prediction(output, len(target))
    if pred is None:
        return None, False
    correct = all(_rounded(p, decimals) == _rounded(t, decimals) for p, t in zip(pred, target))
    return _show(pred), correct


def extract_number(text: str) -> float | None:
    """The number a math answer is read as (see :func:`read_prediction`), as a float."""
    found = read_prediction(text)
    return float(found[0]) if found else None


# -- QA ----------------------------------------------------------------------
_ARTICLES = {"a", "an", "the"}
_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")
_WORD = re.compile(r"[^\W_]+(?:[-‐‑][^\W_]+)*")  # letters/digits, hyphen-joined parts kept together


def normalize_answer(text: str) -> str:
    """Lowercase, accents folded, thousands separators dropped, punctuation
    (but a hyphen inside a word) as spaces, articles dropped."""
    text = "".join(c for c in unicodedata.normalize("NFKD", str(text)) if not unicodedata.combining(c))
    text = _THOUSANDS.sub("", text.lower())
    words = (w.replace("‐", "-").replace("‑", "-") for w in _WORD.findall(text))
    return " ".join(w for w in words if w not in _ARTICLES)


def qa_score(output: str, answers: list[str], max_words: int = 20) -> tuple[str, bool]:
    """(prediction, correct): the first ``max_words`` words of ``output``, and
    whether a normalised answer appears in them as whole words."""
    head = " ".join(output.split()[:max_words])
    hay = f" {normalize_answer(head)} "
    correct = any(a and f" {a} " in hay for a in (normalize_answer(x) for x in answers))
    return head, correct


def gold_fits(answers: list[str], max_words: int) -> bool:
    """Whether some gold answer is short enough to appear in a ``max_words`` window."""
    return any(0 < len(normalize_answer(a).split()) <= max_words for a in answers)


def default_max_words(fmt: str) -> int:
    """The paper's word window: 5 for LAMA, 20 for the other QA sets."""
    return 5 if fmt.startswith("lama") else 20
