"""``toolformer export RUN_DIR``: the built data set as conversations for chat
fine-tuning.

Reads ``RUN_DIR/build/dataset`` (the rows of :class:`~toolformer.records.DatasetRow`)
and cuts each row's text at its calls into *segments*: the text before a
call, the call (tool, JSON arguments, result), the text up to the next call,
and so on. The call's arguments are ``Tool.arguments(input)``, checked against
the tool's ``input_schema`` with ``jsonschema``. The text segments, joined,
are the document without its calls; the calls, written back in the run's call
style with the separator after each, give the row's text again
(:func:`inline_text`).

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
  block (``tool_use_id``, ``content``).
* ``jsonl``: this project's neutral form, ``{"id", "segments"}`` with
  ``{"type": "text", "text"}`` and ``{"type": "call", "tool", "arguments",
  "result"}`` segments.

No system message is written: the data is plain text continuation, so the
whole document is the assistant's text. ``tools`` lists only the tools a
record calls (and is left out of a record without calls). Tool names go on
the wire as :func:`wire_name` writes them (``^[a-zA-Z0-9_-]{1,64}$`` for both
APIs; a dot, as in an MCP ``server.tool``, becomes ``__``) and come back with
:func:`tool_name`.

A row is skipped, and counted by reason, when a tool is unknown or has no
wire name, a call's arguments fail the schema, or its call is not where its
provenance puts it in the text. Writes ``RUN_DIR/export/<format>.jsonl``
(or ``--out``) to a temporary name and renames it; reads nothing else and
changes nothing else in the run folder.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

from tqdm import tqdm

from toolformer.config.schema import PipelineConfig
from toolformer.inspect.view import run_config
from toolformer.records import DatasetRow, fields
from toolformer.run.folder import MANIFEST, Stage, atomic_path, dumps
from toolformer.tools import Tool, ToolError, build_tool, build_tools, catalogue, close_tools, known_tools
from toolformer.tools.calls import CallStyle, get_style
from toolformer.tools.sandbox import schema_validator

FORMATS = ("openai", "anthropic", "jsonl")
USER_TURN = "Continue the text."
"""The one user turn before the document in the ``openai`` and ``anthropic`` formats."""
WIRE_NAME = re.compile(r"[a-zA-Z0-9_-]{1,64}")
DOT = "__"  # what a dot in a tool name becomes on the wire
SHOWN_SKIPS = 5  # skipped rows printed with their reason


class Skip(Exception):
    """A row that cannot be exported; ``kind`` is what the summary counts."""

    def __init__(self, kind: str, detail: str, invalid_calls: int = 0):
        super().__init__(detail)
        self.kind = kind
        self.invalid_calls = invalid_calls


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


def load_tools(names: set[str], cfg: PipelineConfig) -> tuple[dict[str, ToolInfo], dict[str, tuple[str, str]]]:
    """(tools usable in an export, the Skip's kind and detail for each name that is not)."""
    usable: dict[str, ToolInfo] = {}
    problems: dict[str, tuple[str, str]] = {}
    known = known_tools(cfg.tools)
    for name in sorted(names):
        if name not in known:
            problems[name] = ("unknown tool", f"tool {name!r} is not one of {', '.join(known)}")
        elif wire_name(name) is None:
            problems[name] = ("tool name", f"tool {name!r} has no name the chat APIs accept")
    # An MCP tool's schema comes from its server: build_tools starts them (export_run stops them).
    built = build_tools(cfg.tools, [n for n in sorted(names) if n not in problems])
    for name, tool in built.items():
        usable[name] = ToolInfo(tool, wire_name(name) or name)
    return usable, problems


# -- a row as segments ---------------------------------------------------------------
def row_calls(row: dict) -> list[dict]:
    calls = json.loads(row["calls"] or "[]")
    if not isinstance(calls, list):
        raise Skip("bad calls", "`calls` is not a JSON list")
    return sorted(calls, key=lambda c: int(c["char_start"]))


def segments(row: dict, style: CallStyle, separator: str, tools: dict[str, ToolInfo],
             problems: dict[str, tuple[str, str]]) -> tuple[list[dict], int]:
    """The row as text and call segments, and how many calls had an input their
    arguments do not keep (a Calendar call with text in its parentheses).

    Call k sits in the row's text at its ``char_start`` plus the length of
    the calls before it, each as rendered plus the separator."""
    text = row["text"]
    out: list[dict] = []
    last = shift = invalid = rewritten = 0
    first_error = ""
    for k, call in enumerate(row_calls(row)):
        if call["tool"] in problems:
            raise Skip(*problems[call["tool"]])
        info = tools[call["tool"]]
        rendered = style.render(call["tool"], call["input"], call["result"]) + separator
        at = int(call["char_start"]) + shift
        if at < last or not text.startswith(rendered, at):
            raise Skip("call not in text", f"call {k} ({rendered.strip()!r}) is not at offset {at} of the text "
                                           f"(calls.style={style.name!r}, separator={separator!r})")
        before, last, shift = text[last:at], at + len(rendered), shift + len(rendered)
        arguments = info.tool.arguments(call["input"])
        errors = list(info.validator.iter_errors(arguments))
        if errors:
            invalid += 1
            first_error = first_error or f"call {k} {call['tool']}({call['input']}): {errors[0].message}"
            continue
        try:
            rewritten += call_input(info.tool, arguments) != call["input"]
        except ValueError as e:
            raise Skip("arguments not reversible", str(e)) from None
        add_text(out, before)
        out.append({"type": "call", "tool": call["tool"], "arguments": arguments, "result": call["result"]})
    if invalid:
        raise Skip("invalid arguments", first_error, invalid)
    add_text(out, text[last:])
    if not out:
        raise Skip("empty text", "the row's text is empty")
    return out, rewritten


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


def used_tools(segs: list[dict], tools: dict[str, ToolInfo], fmt: str) -> list[dict]:
    names = dict.fromkeys(s["tool"] for s in segs if s["type"] == "call")
    return [tools[n].entry[fmt] for n in names]


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
    used = used_tools(segs, tools, "openai")
    return {"messages": messages, "tools": used} if used else {"messages": messages}


def anthropic_record(segs: list[dict], tools: dict[str, ToolInfo]) -> dict:
    messages: list[dict] = [{"role": "user", "content": USER_TURN}]
    for k, (text, call) in enumerate(turns(segs)):
        blocks: list[dict] = [{"type": "text", "text": text}] if text else []
        if call is not None:
            use_id = f"toolu_{k}"
            blocks.append({"type": "tool_use", "id": use_id, "name": tools[call["tool"]].wire,
                           "input": call["arguments"]})
        messages.append({"role": "assistant", "content": blocks})
        if call is not None:
            messages.append({"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": use_id, "content": call["result"]}]})
    used = used_tools(segs, tools, "anthropic")
    return {"tools": used, "messages": messages} if used else {"messages": messages}


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


# -- the command ---------------------------------------------------------------------
def open_dataset(run_dir: Path):
    """The built data set of a run folder, or an error naming what to run."""
    from datasets import load_from_disk

    if not run_dir.is_dir():
        raise FileNotFoundError(f"{run_dir}: no such run folder")
    build = Stage(run_dir, "build")
    path = build.dir / "dataset"
    if not build.is_complete() or not path.is_dir():
        saved = run_dir / "config.yaml"
        how = f"--config {saved}" if saved.exists() else f"--config FILE run_dir={run_dir}"
        raise FileNotFoundError(f"{build.dir}: no finished build (no {MANIFEST} or dataset/); build the data set "
                                f"first: toolformer build {how}")
    ds = load_from_disk(str(path))
    missing = [c for c in fields(DatasetRow) if c not in ds.column_names]
    if missing:
        raise ValueError(f"{path}: the data set has no column(s) {', '.join(missing)} (columns: "
                         f"{', '.join(ds.column_names)}); rebuild it with `toolformer build --force`")
    return ds


def output_path(run_dir: Path, fmt: str, out: str | Path | None) -> Path:
    path = Path(out) if out else run_dir / "export" / f"{fmt}.jsonl"
    if path.is_dir():
        raise ValueError(f"--out {path} is a folder; name a file")
    build = (run_dir / "build").resolve()
    if path.resolve() == build or build in path.resolve().parents:
        raise ValueError(f"--out {path} lies inside {build}, which export reads; choose another file")
    return path


def export_run(cfg: PipelineConfig, fmt: str, out: str | Path | None = None, kept_only: bool = False) -> dict:
    """Write the built data set of ``cfg.run_dir`` as ``fmt`` records; return the counts.

    The call style, separator and tool settings are those the run saved
    (``RUN_DIR/config.yaml``), else those of ``cfg``."""
    if fmt not in FORMATS:
        raise ValueError(f"format: {fmt!r} is not one of {', '.join(FORMATS)}")
    run_dir = Path(cfg.run_dir)
    ds = open_dataset(run_dir)
    path = output_path(run_dir, fmt, out)
    run_cfg, note = run_config(cfg)
    if note:
        print(f"export: {note}")
    style, separator = get_style(run_cfg.calls.style), run_cfg.calls.separator
    names = {c["tool"] for calls in ds["calls"] for c in json.loads(calls or "[]")}
    tools, problems = load_tools(names, run_cfg)
    try:
        return write_export(ds, path, fmt, style, separator, tools, problems, kept_only)
    finally:
        close_tools({name: info.tool for name, info in tools.items()})


def write_export(ds, path: Path, fmt: str, style: CallStyle, separator: str, tools: dict[str, ToolInfo],
                 problems: dict[str, tuple[str, str]], kept_only: bool) -> dict:
    """Write every row of ``ds`` as one ``fmt`` record to ``path`` (atomically); return the counts."""
    counts: dict = {"rows": len(ds), "conversations": 0, "with_calls": 0, "calls": 0, "per_tool": Counter(),
                    "left_out_without_calls": 0, "skipped": Counter(), "invalid_calls": 0, "inputs_rewritten": 0}
    shown = 0
    with atomic_path(path) as tmp, tmp.open("w", encoding="utf-8") as f:
        for row in tqdm(ds, total=len(ds), desc=f"export {fmt}", unit="row", disable=len(ds) < 1000):
            try:
                if kept_only and not row_calls(row):
                    counts["left_out_without_calls"] += 1
                    continue
                segs, rewritten = segments(row, style, separator, tools, problems)
            except Skip as e:
                counts["skipped"][e.kind] += 1
                counts["invalid_calls"] += e.invalid_calls
                if shown < SHOWN_SKIPS:
                    print(f"export: skipped {row['doc_id']}: {e}")
                    shown += 1
                continue
            f.write(dumps(to_record(fmt, str(row["doc_id"]), segs, tools)) + "\n")
            calls = [s["tool"] for s in segs if s["type"] == "call"]
            counts["conversations"] += 1
            counts["with_calls"] += bool(calls)
            counts["calls"] += len(calls)
            counts["per_tool"].update(calls)
            counts["inputs_rewritten"] += rewritten
    counts = {**counts, "per_tool": dict(counts["per_tool"].most_common()), "skipped": dict(counts["skipped"]),
              "format": fmt, "output": str(path)}
    print(summary_line(counts, kept_only))
    return counts


def summary_line(counts: dict, kept_only: bool) -> str:
    tools = ", ".join(f"{t} {n:,}" for t, n in counts["per_tool"].items())
    line = (f"export: {counts['rows']:,} rows; {counts['conversations']:,} conversations "
            f"({counts['with_calls']:,} with calls, {counts['conversations'] - counts['with_calls']:,} without) "
            f"with {counts['calls']:,} calls{f' ({tools})' if tools else ''}")
    skipped = sum(counts["skipped"].values())
    line += f"; {skipped:,} rows skipped"
    if skipped:
        line += " (" + ", ".join(f"{kind} {n:,}" for kind, n in counts["skipped"].items()) + ")"
    if counts["invalid_calls"]:
        line += f", {counts['invalid_calls']:,} calls with invalid arguments"
    if kept_only:
        line += f"; {counts['left_out_without_calls']:,} rows without calls left out (--kept-only)"
    if counts["inputs_rewritten"]:
        line += f"; {counts['inputs_rewritten']:,} call inputs not kept by their arguments"
    return f"{line} -> {counts['output']}"
