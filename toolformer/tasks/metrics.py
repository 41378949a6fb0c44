"""The paper's metrics (section 4.2), comparing values, not strings.

**Math.** The model's answer is its output with every tool call removed and
cut before an unclosed call (``[QA(…`` that never closed: counted as a
malformed call), then cut at the first line break and at the end of the first
sentence that holds a number (the period of an abbreviation such as
``p.m.``, ``U.S.`` or ``Mr.`` ends no sentence). In that answer the
prediction is the first number after ``=`` when there is one (after the last
``=`` of a chained equation, ``x = 7 + 55 = 62``), else the first number; an
equals sign in words after a sum (``1800 + 192, which is 1992``; also
``makes``, ``gives``, ``equals``, ``is``) counts as ``=``. A
number may be written with thousands separators, a Unicode minus, as a
fraction (``5/2``, ``-(1/3)``) or a mixed number (``2 1/2``, ``-4 1/2``). A gold answer with several numbers
(a ratio ``5:45``, a time ``3:30 p.m.``, a list ``5; 15; 20``) needs each of
them, in order. Prediction and gold are compared after rounding both half up
to ``decimals`` places (2 by default), so 0.625 matches 0.63; the rounding is exact (integers), for a number
of any size. A number written with more than ``MAX_DIGITS`` digits is read as a number whose value is not
worked out (``None``): it matches no gold, and the answer reads no other number in its place. A gold answer
may hold numbers of at most ``MAX_GOLD_DIGITS`` digits (:func:`gold_problem`; the task loaders skip others).

**QA.** An answer counts when the normalised gold answer or one of its
aliases appears, as whole words, in the first ``max_words`` words of the
model's answer (20; 5 for LAMA). Normalising lowercases, folds accents
(Zakāt → zakat), drops thousands separators (24,900 → 24900), turns
punctuation into spaces except a hyphen inside a word (so
"semi-presidential" does not contain "presidential") and drops the articles;
capital initials match with or without their periods (``C.F.`` and ``CF``),
and a gold answer of symbols only (``£``) is looked for as written.
"""

from __future__ import annotations

import re
import unicodedata
from decimal import Decimal
from fractions import Fraction

from toolformer.tools.calls import CallStyle, get_style, strip_calls

# -- numbers -------------------------------------------------------------------
_MINUS = str.maketrans({"\u2212": "-", "\ufe63": "-", "\uff0d": "-"})
# One number: thousands with commas (1,234.5), plain digits, or a leading decimal point; a minus only at a
# word start (10-2 is two numbers).
_NUM = r"(?:\d{1,3}(?:,\d{3})+(?![\d,])|\d+)(?:\.\d+)?|\.\d+"
_VALUE = re.compile(
    rf"(?<![\w.,])(?P<msign>-)?(?P<mixed>\d+)\s+(?P<mn>\d+)\s*/\s*(?P<md>\d+)(?![\d/])"  # 2 1/2, -4 1/2
    rf"|(?<![\w.,])(?P<neg>-)?\s*\(\s*(?P<pn>{_NUM})\s*/\s*(?P<pd>{_NUM})\s*\)"  # -(1/3), (1/3)
    rf"|(?<![\w.,/])(?P<sign>-)?(?P<n>{_NUM})(?:\s*/\s*(?P<d>{_NUM})(?![\d/]))?"  # 5, -6, 5/2
)
_UNIT = re.compile(r"\s*\([^()]*[^\W\d_][^()]*\)")  # "(apples)": a bracket with a letter in it
_SENTENCE_END = re.compile(r"[.!?](?=\s|$)")
# A period that ends an abbreviation, not a sentence: initials (a.m., p.m., e.g., U.S.) and titles (Mr., St.).
_ABBREVIATION = re.compile(r"(?<![\w.])(?:[^\W\d_]\.){2,}$|(?<![\w.])(?:Mrs?|Ms|Dr|St|Jr|Sr|Prof|vs)\.$")
# A link of a chained equation (x = 7 + 55 = 62): an operator, and no list separator (; or ", ").
_CHAIN_OPERATOR = re.compile(r"[-+*/\u00d7\u00f7\u00b7^]|\sx\s")
_CHAIN_BREAK = re.compile(r";|,\s")
# An equals sign in words after an operation of two numbers: "1800 + 192, which is 1992" reads as "... = 1992".
_WORDED_EQUALS = re.compile(
    r"(?P<op>\d\s*(?:[-+*/\u00d7\u00f7\u00b7^]|\sx\s)\s*[-\u2212]?[$\u00a3\u20ac]?\d[\d,.]*?)"
    r"\s*,?\s+(?:which (?:is|makes|gives|equals)|that is|equals|makes|gives|is)\s+(?=[-\u2212]?[$\u00a3\u20ac]?\.?\d)")
_CALL_START = r"\s*[A-Za-z_][A-Za-z0-9_]*\s*\("


MAX_DIGITS = 1000
"""A number written with more digits is not worked out (its value would cost time that grows with the square of
its length): it is read as ``None``, which matches no gold answer."""
MAX_GOLD_DIGITS = 50
"""The most digits a number of a gold answer may have (the published sets' longest has 18)."""
_DIGIT = re.compile(r"\d")


def _fraction(text: str) -> Fraction:
    """A number as written (``1,234.5``), exactly: through :class:`Decimal`, which has no limit on the digits a
    string may have (``int("9" * 5000)`` is an error)."""
    return Fraction(Decimal(text.replace(",", "")))


def digits(text: str) -> int:
    """The most digits any one number of ``text`` is written with (0 when it holds none)."""
    return max((len(_DIGIT.findall(m[0])) for m in _VALUE.finditer(text.translate(_MINUS))), default=0)


def numbers(text: str) -> list[Fraction | None]:
    """Every number in ``text``, in order, as exact fractions; ``None`` for one of more than ``MAX_DIGITS``
    digits."""
    out: list[Fraction | None] = []
    for m in _VALUE.finditer(text.translate(_MINUS)):
        if len(_DIGIT.findall(m[0])) > MAX_DIGITS:
            out.append(None)
        elif m["mixed"] is not None:
            whole, den = _fraction(m["mixed"]), _fraction(m["md"])
            value = whole + _fraction(m["mn"]) / den if den else whole
            out.append(-value if m["msign"] else value)
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


def gold_numbers(answer: str) -> list[Fraction | None]:
    """The numbers a math gold answer states, without the units in brackets
    (``9 (apples)`` → [9]; ``-(1/3)`` → [-1/3]; ``5:45`` → [5, 45]); [] for
    an answer that is not a number (``Yes``, a name)."""
    return numbers(strip_units(answer))


def gold_problem(answer: str) -> tuple[str, str] | None:
    """(reason, detail) when ``answer`` cannot be a math gold answer: it states no number, or one of more than
    ``MAX_GOLD_DIGITS`` digits; else None."""
    text = strip_units(answer)
    longest = digits(text)
    if longest > MAX_GOLD_DIGITS:
        return "answer number too long", f"a number of {longest:,} digits (at most {MAX_GOLD_DIGITS})"
    return None if numbers(text) else ("answer is not a number", repr(answer)[:200])


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
        if _ABBREVIATION.search(line[: m.end()]):
            continue
        if numbers(line[start : m.start()]):
            return line[: m.start()]
        start = m.end()
    return line


def chain_end(span: str) -> int:
    """The position of the ``=`` a chained equation starting at the first ``=``
    ends with (``x = 7 + 55 = 62``: the second), or -1 when there is none. A
    link between two ``=`` must hold a number and an operator and no ``;`` or
    ``, `` (so ``x = 5, y = 3`` ends at its first ``=``)."""
    signs = [i for i, c in enumerate(span) if c == "="]
    if not signs:
        return -1
    end = signs[0]
    for nxt in signs[1:]:
        link = span[end + 1 : nxt]
        if not numbers(link) or not _CHAIN_OPERATOR.search(link) or _CHAIN_BREAK.search(link):
            break
        end = nxt
    return end


def read_prediction(text: str, parts: int = 1) -> list[Fraction | None] | None:
    """The first ``parts`` numbers of the answer span after the ``=`` its
    first (chained) equation ends with, else after its first ``=``, else
    anywhere in it; None when it has fewer."""
    span = _WORDED_EQUALS.sub(lambda m: m["op"] + " = ", answer_span(text))
    found: list[Fraction | None] = []
    for eq in dict.fromkeys((chain_end(span), span.find("="))):
        if eq != -1 and len(found) < parts:
            found = numbers(span[eq + 1 :])
    if len(found) < parts:
        found = numbers(span)
    return found[:parts] if len(found) >= parts else None


def _rounded(value: Fraction, decimals: int) -> int:
    """``value`` rounded half up (away from zero) to ``decimals`` places, in units of the last place: exact
    integer arithmetic, so a number of any size rounds (a decimal context of fixed precision cannot)."""
    scaled = abs(value) * 10**decimals
    units = (2 * scaled.numerator + scaled.denominator) // (2 * scaled.denominator)
    return -units if value < 0 else units


def _plain(value: Fraction | None) -> float | str:
    """A number as a float; one too large for a float as its whole part written out; one not worked out as
    what it is."""
    if value is None:
        return f"(a number of more than {MAX_DIGITS} digits)"
    try:
        return float(value)
    except OverflowError:
        return str(round(value))


def _show(values: list[Fraction | None]) -> float | str:
    """One number as a float; several as ``a; b``."""
    if len(values) == 1:
        return _plain(values[0])
    return "; ".join(str(v.numerator) if v is not None and v.denominator == 1 else str(_plain(v)) for v in values)


def math_score(output: str, gold: str, decimals: int = 2) -> tuple[float | str | None, bool]:
    """(prediction as read, correct) of a model answer (tool calls already
    removed) against a gold answer; every number of the gold must match."""
    target = gold_numbers(gold)
    if not target:
        raise ValueError(f"gold answer {gold!r} has no number")
    pred = read_prediction(output, len(target))
    if pred is None:
        return None, False
    correct = all(p is not None and t is not None and _rounded(p, decimals) == _rounded(t, decimals)
                  for p, t in zip(pred, target))
    return _show(pred), correct


def extract_number(text: str) -> float | None:
    """The number a math answer is read as (see :func:`read_prediction`), as a float."""
    found = read_prediction(text)
    if not found or found[0] is None:
        return None
    value = _plain(found[0])
    return value if isinstance(value, float) else float("inf") if found[0] > 0 else float("-inf")


# -- QA ----------------------------------------------------------------------
_ARTICLES = {"a", "an", "the"}
_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")
_INITIALS = re.compile(r"(?<![\w.])[^\W\d_](?:\.[^\W\d_])+\.?(?!\w)")  # C.F., U.S.A., e.g.
_WORD = re.compile(r"[^\W_]+(?:[-‐‑][^\W_]+)*")  # letters/digits, hyphen-joined parts kept together


def normalize_answer(text: str, join_initials: bool = True) -> str:
    """Lowercase, accents folded, capital initials joined (``C.F.`` → ``cf``,
    ``U.S.A.`` → ``usa``; not with ``join_initials=False``), thousands
    separators dropped, punctuation (but a hyphen inside a word) as spaces,
    articles dropped. A text of symbols only (``£``, ``%``) is kept as written,
    without spaces, so that it can still be matched."""
    text = "".join(c for c in unicodedata.normalize("NFKD", str(text)) if not unicodedata.combining(c))
    if join_initials:
        text = _INITIALS.sub(lambda m: m[0].replace(".", "") if m[0].isupper() else m[0], text)
    text = _THOUSANDS.sub("", text.lower())
    words = (w.replace("‐", "-").replace("‑", "-") for w in _WORD.findall(text))
    out = " ".join(w for w in words if w not in _ARTICLES)
    if not out and not any(c.isalnum() for c in text):
        return "".join(text.split())
    return out


def _answer_forms(text: str) -> set[str]:
    """The normalised forms a QA text is compared in: initials joined and not
    (so that ``J.R.R.`` still matches ``J. R. R.``)."""
    return {normalize_answer(text), normalize_answer(text, join_initials=False)} - {""}


def qa_score(output: str, answers: list[str], max_words: int = 20) -> tuple[str, bool]:
    """(prediction, correct): the first ``max_words`` words of ``output``, and
    whether a normalised answer appears in them as whole words (an answer of
    symbols only, such as ``£``, anywhere in them)."""
    head = " ".join(output.split()[:max_words])
    hays = [f" {h} " for h in _answer_forms(head)]
    raw = "".join(unicodedata.normalize("NFKD", head).split())
    correct = any(
        any(f" {a} " in hay for hay in hays) if any(c.isalnum() for c in a) else a in raw
        for x in answers for a in _answer_forms(x)
    )
    return head, correct


def gold_fits(answers: list[str], max_words: int) -> bool:
    """Whether some gold answer is short enough to appear in a ``max_words`` window."""
    return any(0 < len(normalize_answer(a).split()) <= max_words for a in answers)


def default_max_words(fmt: str) -> int:
    """The paper's word window: 5 for LAMA, 20 for the other QA sets."""
    return 5 if fmt.startswith("lama") else 20
