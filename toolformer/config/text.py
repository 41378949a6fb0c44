"""Text from bytes: UTF-8, or an error that says where it is not; JSON from text (:func:`parse_json`).

In the config layer, the highest one, so that every reader of files may use it (the config loader, the run
folder's records, the tools' data, the corpus, the task files, the prompt files). Each caller keeps its own
wording of the error (``message``); the decoding and where the first bad byte lies are worked out here.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

UTF8_ERROR = "{where}:{line}: not UTF-8 ({reason}: byte 0x{byte:02x} at byte {column} of the line)"
"""The default message: the file, the line, the codec's reason, the byte and its place in the line."""


def decode_utf8(data: bytes, where: str | Path, message: str = UTF8_ERROR, line: int | None = None,
                error: Callable[[str], Exception] = ValueError, **extra: object) -> str:
    """``data`` decoded as UTF-8; else ``error`` (a ValueError unless given) with ``message`` filled in.

    The fields of ``message`` (:meth:`str.format`): ``where`` (the file), ``line`` (``line`` when ``data`` is
    that one line of the file, else the line of the first bad byte in ``data``), ``offset`` (that byte's
    offset in ``data``), ``column`` (its offset in its line), ``byte`` (its value), ``reason`` (the codec's,
    e.g. ``invalid start byte``) and those of ``extra``.
    """
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        start = e.start
        fields = {"where": where, "line": line if line is not None else data.count(b"\n", 0, start) + 1,
                  "offset": start, "column": start - (data.rfind(b"\n", 0, start) + 1), "byte": data[start],
                  "reason": e.reason, **extra}
        raise error(message.format(**fields)) from None


TOO_DEEP = "nested too deeply to read"


def _int_or_digits(digits: str) -> int | str:
    return int(digits) if len(digits) <= 4000 else digits


def parse_json(text: str, long_ints_as_text: bool = False) -> object:
    """``json.loads(text)``; a document nested deeper than Python's recursion limit (``[[[…]]]``: valid JSON, but
    the parser's RecursionError) is a :class:`json.JSONDecodeError` like any other bad JSON, so every reader
    rejects it as it rejects a line that is not JSON. With ``long_ints_as_text``, an integer of more than 4,000
    digits (``int()`` refuses those over 4,300) is kept as its digits, a string: the reader of a file of records
    then skips the record that holds it, not the file."""
    try:
        return json.loads(text, parse_int=_int_or_digits if long_ints_as_text else None)
    except RecursionError:
        raise json.JSONDecodeError(TOO_DEEP, text, 0) from None


def lone_surrogate(value: object) -> bool:
    """Whether a parsed JSON value holds a string with a lone surrogate (``"\\ud800"``: valid JSON escapes, but
    no text: it cannot be written as UTF-8)."""
    try:
        json.dumps(value, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False
