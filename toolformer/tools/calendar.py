"""Calendar: no input; returns the date the document was written."""

from __future__ import annotations

import datetime as dt
import re

from toolformer.tools.base import Tool, ToolError


def parse_date(text: str) -> dt.date:
    """Parse ``YYYY-MM-DD`` (a longer ISO timestamp is cut to its date). A date in
    the right form that does not exist (2023-02-30) is an invalid date, not a
    format error."""
    head = str(text).strip()[:10]
    try:
        return dt.date.fromisoformat(head)
    except ValueError as e:
        if re.fullmatch(r"\d{4}-\d{2}-\d{2}", head):
            raise ToolError("bad_date", f"document date {text!r} is an invalid date ({e})") from None
        raise ToolError("bad_date", f"document date {text!r} is not YYYY-MM-DD") from None


def date_sentence(date: dt.date) -> str:
    return f"Today is {date:%A}, {date:%B} {date.day}, {date.year}."


class Calendar(Tool):
    name = "Calendar"
    description = (
        "Returns the date on which the current document was written, taken from the "
        "document's metadata, as a sentence naming the weekday, month, day and year."
    )
    input_description = "nothing (the input is ignored)"
    takes_input = False
    prompt = (
        "Your task is to add calls to a Calendar API to a piece of text. A call tells "
        "you today's date, which helps with words like \"today\", \"last year\" or "
        "\"in three weeks\". Write a call as \"[Calendar()]\". Examples:\n"
        "Input: The council meets again next Thursday.\n"
        "Output: The council meets again [Calendar()] next Thursday.\n"
        "Input: The shop has been open for six years now.\n"
        "Output: The shop has been open for [Calendar()] six years now.\n"
        "Input: This is the coldest March the town has seen.\n"
        "Output: This is the coldest [Calendar()] March the town has seen.\n"
        "Input: {text}\n"
        "Output:"
    )
    needs_date = True

    def run(self, tool_input: str, date: str | None = None) -> str:
        if not date:
            raise ToolError("no_date", "the document has no date")
        return date_sentence(parse_date(date))
