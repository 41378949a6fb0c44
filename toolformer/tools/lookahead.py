"""Calls that read the future: a candidate whose input holds a number or a name that the document states only
after the call's position, and not before it (``filter.lookahead``).

Such a call could not have been written at that point of the text, yet its result can make the next tokens cheap
(the text goes on to state what the call used), so the paper's criterion may keep it. A number is a run of digits
with optional thousands separators and decimals (``1,250`` and ``1250`` are the same number); a name is a
capitalised word of the input, matched with its case (a question word such as ``Who`` counts too: when the text
states it only later, the question itself comes later), except that the input's first word may be capitalised
only because it starts a sentence: it counts as stated before when the text before has it in any case (``The
birthplace of ...`` after ``born in the town``). Matching is by whole number and whole word. The text
before the position includes the calls a chain round put inline before it, so a chained call that copies an
earlier call's result does not read ahead.
"""

from __future__ import annotations

import re

_NUMBER = re.compile(r"(?<![\w.])\d(?:[\d,]*\d)?(?:\.\d+)?")  # ends with a digit: `3,361,` is 3361
WORD = re.compile(r"[^\W\d_][\w'’-]*")
WORD_EDGE = r"[\w'’-]"  # what may not touch a whole word on either side


def numbers(text: str) -> set[str]:
    """The whole numbers of ``text``, thousands separators dropped (`1,800` is 1800; `1800.5` is not 1800)."""
    return {m.group(0).replace(",", "") for m in _NUMBER.finditer(text)}


def _names(call_input: str) -> list[tuple[str, bool]]:
    """Capitalised words of ``call_input``, each with whether it is the input's first word."""
    return [(m.group(0), k == 0) for k, m in enumerate(WORD.finditer(call_input)) if m.group(0)[0].isupper()]


def _says(text: str, word: str, any_case: bool = False) -> bool:
    return re.search(rf"(?<!{WORD_EDGE}){re.escape(word)}(?!{WORD_EDGE})", text,
                     re.IGNORECASE if any_case else 0) is not None


def reads_ahead(text: str, position: int, call_input: str) -> list[str]:
    """The numbers and names of ``call_input`` that ``text`` states after character ``position`` and nowhere before
    it, in the order the input has them (empty: the call reads nothing ahead)."""
    before, after = text[:position], text[position:]
    ahead: list[str] = []
    said_before, said_after = numbers(before), numbers(after)
    for m in _NUMBER.finditer(call_input):
        n = m.group(0).replace(",", "")
        if n not in said_before and n in said_after and n not in ahead:
            ahead.append(n)
    for name, first in _names(call_input):
        if name not in ahead and not _says(before, name, any_case=first) and _says(after, name):
            ahead.append(name)
    return ahead
