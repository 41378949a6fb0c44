"""The chat formats of ``toolformer export`` (:mod:`toolformer.inspect.export`): a row's segments (text, and
calls with their JSON arguments and result) as one record of each format, and a record back to the row's
inline text.

Formats (one JSON object per line):

* ``openai``: ``{"messages", "tools"}`` as in OpenAI's chat fine-tuning with
  tools: a user turn :data:`USER_TURN`, then per call an assistant message
  with the text before it as ``content`` (null when empty) and
  ``tool_calls: [{"id", "type": "function", "function": {"name",
  "arguments": "<JSON>"}}]``, a ``{"role": "tool", "tool_call_id",
  "content": result}`` message, and last an assistant message with the rest
  of the text (left out when empty).
* ``anthropic``: ``{"tools", "messages"}`` as in a Messages API request: the
  same user turn first (the API wants a user message first), then assistant
  messages with content blocks ``text`` and ``tool_use`` (``id``, ``name``,
  ``input``) alternating with user messages holding one ``tool_result``
  block (``tool_use_id``, ``content``). The API refuses a text block of
  whitespace alone and a last assistant turn that ends in whitespace: such a
  block is left out and the last turn's text stripped at its end (the only
  text the format loses).

Both give every record the same ``tools``: every usable tool the run offers
(``tools.enabled``, then any other tool its rows call), rows without a call
included, so the list never tells which rows call.
* ``jsonl``: this project's neutral form, ``{"id", "segments"}`` with
  ``{"type": "text", "text"}`` and ``{"type": "call", "tool", "arguments",
  "result"}`` segments.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator

from toolformer.tools import Tool, ToolError, build_tool, catalogue
from toolformer.tools.calls import CallStyle
from toolformer.tools.sandbox import schema_validator

FORMATS = ("openai", "anthropic", "jsonl")
USER_TURN = "Continue the text."
"""The one user turn before the document in the ``openai`` and ``anthropic`` formats."""
WIRE_NAME = re.compile(r"[a-zA-Z0-9_-]{1,64}")
DOT = "__"  # what a dot in a tool name becomes on the wire


# -- tool names and arguments ----------------------------------------------------
def wire_name(tool: str) -> str | None:
    """The tool's name as the chat APIs accept it: dots become ``__``. None
    when that cannot be undone by :func:`tool_name` (the name already holds
    ``__``) or is still not a valid name (other characters, over 64)."""
    name = tool.replace(".", DOT)
    if DOT in tool or not WIRE_NAME.fullmatch(name):
        return None
    return name


def tool_name(wire: str) -> str:
    """The tool's own name from its wire name (the inverse of :func:`wire_name`)."""
    return wire.replace(DOT, ".")


def call_input(tool: Tool, arguments: dict) -> str:
    """What goes between the parentheses of ``[Name(...)]`` for an argument
    object (``Tool.input_text``, the inverse of ``Tool.arguments``). Refuses
    arguments it cannot write back."""
    text = tool.input_text(arguments)
    try:
        back = tool.arguments(text)
    except ToolError:
        back = None
    if back != arguments:
        raise ValueError(f"{tool.name}: arguments {json.dumps(arguments)} cannot be written as an inline call")
    return text


class ToolInfo:
    """One tool of the export: the tool, its wire name and schema validator,
    and its catalogue entry per format."""

    def __init__(self, tool: Tool, wire: str):
        self.tool = tool
        self.wire = wire
        self.validator = schema_validator(tool)
        openai = catalogue({tool.name: tool}, "openai")[0]
        anthropic = catalogue({tool.name: tool}, "anthropic")[0]
        self.entry = {"openai": {**openai, "function": {**openai["function"], "name": wire}},
                      "anthropic": {**anthropic, "name": wire}}


def add_text(out: list[dict], text: str) -> None:
    """Append a text segment (merged into a text segment before it; nothing when empty)."""
    if not text:
        return
    if out and out[-1]["type"] == "text":
        out[-1]["text"] += text
    else:
        out.append({"type": "text", "text": text})


def turns(segs: list[dict]) -> Iterator[tuple[str, dict | None]]:
    """(text before the call, the call) per call, then (the rest, None) when
    text follows the last call."""
    pending = ""
    for s in segs:
        if s["type"] == "text":
            pending += s["text"]
        else:
            yield pending, s
            pending = ""
    if pending:
        yield pending, None


def offered(tools: dict[str, ToolInfo], fmt: str) -> list[dict]:
    """The catalogue every record of ``fmt`` carries: each tool's entry, in the order of ``tools``."""
    return [info.entry[fmt] for info in tools.values()]


# -- the formats -------------------------------------------------------------------
def openai_record(segs: list[dict], tools: dict[str, ToolInfo]) -> dict:
    messages: list[dict] = [{"role": "user", "content": USER_TURN}]
    for k, (text, call) in enumerate(turns(segs)):
        if call is None:
            messages.append({"role": "assistant", "content": text})
            continue
        call_id = f"call_{k}"
        messages.append({"role": "assistant", "content": text or None, "tool_calls": [
            {"id": call_id, "type": "function",
             "function": {"name": tools[call["tool"]].wire,
                          "arguments": json.dumps(call["arguments"], ensure_ascii=False)}}]})
        messages.append({"role": "tool", "tool_call_id": call_id, "content": call["result"]})
    catalogue = offered(tools, "openai")
    return {"messages": messages, "tools": catalogue} if catalogue else {"messages": messages}


def anthropic_record(segs: list[dict], tools: dict[str, ToolInfo]) -> dict:
    messages: list[dict] = [{"role": "user", "content": USER_TURN}]
    for k, (text, call) in enumerate(turns(segs)):
        if call is None:  # the last turn: the API refuses one that ends in whitespace
            text = text.rstrip()
        blocks: list[dict] = [{"type": "text", "text": text}] if text.strip() else []
        if not blocks and call is None:
            continue
        if call is not None:
            use_id = f"toolu_{k}"
            blocks.append({"type": "tool_use", "id": use_id, "name": tools[call["tool"]].wire,
                           "input": call["arguments"]})
        messages.append({"role": "assistant", "content": blocks})
        if call is not None:
            messages.append({"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": use_id, "content": call["result"]}]})
    catalogue = offered(tools, "anthropic")
    return {"tools": catalogue, "messages": messages} if catalogue else {"messages": messages}


def neutral_record(doc_id: str, segs: list[dict]) -> dict:
    return {"id": doc_id, "segments": segs}


def to_record(fmt: str, doc_id: str, segs: list[dict], tools: dict[str, ToolInfo]) -> dict:
    if fmt == "openai":
        return openai_record(segs, tools)
    if fmt == "anthropic":
        return anthropic_record(segs, tools)
    return neutral_record(doc_id, segs)


# -- back to inline text -------------------------------------------------------------
def _call(wire: str, arguments: dict, result: str) -> dict:
    return {"type": "call", "tool": tool_name(wire), "arguments": arguments, "result": result}


def _openai_segments(record: dict) -> list[dict]:
    messages = record["messages"]
    results = {m["tool_call_id"]: m["content"] for m in messages if m["role"] == "tool"}
    out: list[dict] = []
    for m in messages:
        if m["role"] != "assistant":
            continue
        add_text(out, m.get("content") or "")
        for tc in m.get("tool_calls") or []:
            if tc["id"] not in results:
                raise ValueError(f"tool call {tc['id']!r} has no tool message")
            out.append(_call(tc["function"]["name"], json.loads(tc["function"]["arguments"]), results[tc["id"]]))
    return out


def _block_text(content) -> str:
    """A tool_result's content: a string, or text blocks."""
    return content if isinstance(content, str) else "".join(b["text"] for b in content if b["type"] == "text")


def _anthropic_segments(record: dict) -> list[dict]:
    messages = record["messages"]
    results = {b["tool_use_id"]: b for m in messages if m["role"] == "user" and isinstance(m["content"], list)
               for b in m["content"] if b["type"] == "tool_result"}
    out: list[dict] = []
    for m in messages:
        if m["role"] != "assistant":
            continue
        content = m["content"]
        blocks: list[dict] = [{"type": "text", "text": content}] if isinstance(content, str) else content
        for b in blocks:
            if b["type"] == "text":
                add_text(out, b["text"])
            elif b["type"] == "tool_use":
                found = results.get(b["id"])
                if found is None or found.get("is_error"):
                    raise ValueError(f"tool_use {b['id']!r} has no tool_result with a result")
                out.append(_call(b["name"], b["input"], _block_text(found["content"])))
    return out


def segments_from(record: dict, fmt: str) -> list[dict]:
    """The segments of an exported record (tool names as the run has them)."""
    if fmt == "openai":
        return _openai_segments(record)
    if fmt == "anthropic":
        return _anthropic_segments(record)
    if fmt == "jsonl":
        return record["segments"]
    raise ValueError(f"format: {fmt!r} is not one of {', '.join(FORMATS)}")


def inline_text(segs: list[dict], style: CallStyle, separator: str = " ",
                tools: dict[str, Tool] | None = None) -> str:
    """The text with its calls inline, as ``build`` writes it: each call as
    e(c, r) in ``style`` followed by ``separator``. ``tools`` (default: the
    registry's tools) turn arguments back into a call's input."""
    tools = dict(tools or {})
    out = []
    for s in segs:
        if s["type"] == "text":
            out.append(s["text"])
            continue
        if s["tool"] not in tools:
            tools[s["tool"]] = build_tool(s["tool"])
        out.append(style.render(s["tool"], call_input(tools[s["tool"]], s["arguments"]), s["result"]) + separator)
    return "".join(out)


def round_trip(record: dict, fmt: str, style: CallStyle, separator: str = " ") -> str:
    """An exported record (any format) back to the inline text of its row."""
    return inline_text(segments_from(record, fmt), style, separator)
