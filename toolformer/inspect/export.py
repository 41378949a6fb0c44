"""``toolformer export RUN_DIR``: the built data set as conversations for chat
fine-tuning.

Reads ``RUN_DIR/build/dataset`` (the rows of :class:`~toolformer.corpus.records.DatasetRow`)
and cuts each row's text at its calls into *segments*: the text before a
call, the call (tool, JSON arguments, result), the text up to the next call,
and so on. The call's arguments are ``Tool.arguments(input)``, checked against
the tool's ``input_schema`` with ``jsonschema``. The text segments, joined,
are the document without its calls; the calls, written back in the run's call
style with the separator after each, give the row's text again
(:func:`inline_text`).

Formats: :mod:`toolformer.inspect.chatformats`; the TRL data sets (``trl-sft``,
``trl-dpo``): :mod:`toolformer.inspect.trl`.

No system message is written: the data is plain text continuation, so the
whole document is the assistant's text. ``tools`` is the same on every record
(:func:`offered_tools`: the run's enabled tools, then any other tool its rows
call), rows without calls included. Tool names go on
the wire as :func:`wire_name` writes them (``^[a-zA-Z0-9_-]{1,64}$`` for both
APIs; a dot, as in an MCP ``server.tool``, becomes ``__``) and come back with
:func:`tool_name`.

A row is skipped, and counted by reason, when a tool is unknown or has no
wire name, a call's arguments fail the schema, or its call is not where its
provenance puts it in the text. Writes ``RUN_DIR/export/<format>.jsonl``
(or ``--out``) to a temporary name and renames it; reads nothing else and
changes nothing else in the run folder. A file already there is replaced only
when it holds an export (empty, or its first line a record of one of the
formats) or with ``--force``; a link or a device never.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

from tqdm import tqdm

from toolformer.config.schema import PipelineConfig
from toolformer.config.text import parse_json
from toolformer.corpus.records import DatasetRow, fields
from toolformer.inspect.chatformats import (
    FORMATS,
    ToolInfo,
    add_text,
    call_input,
    to_record,
    wire_name,
)
from toolformer.inspect.view import run_config
from toolformer.rundir.files import atomic_path, dumps
from toolformer.rundir.folder import MANIFEST, StageFolder
from toolformer.tools import build_tools, close_tools, known_tools
from toolformer.tools.calls import CallStyle, get_style

SHOWN_SKIPS = 5  # skipped rows printed with their reason


class Skip(Exception):
    """A row that cannot be exported; ``kind`` is what the summary counts."""

    def __init__(self, kind: str, detail: str, invalid_calls: int = 0):
        super().__init__(detail)
        self.kind = kind
        self.invalid_calls = invalid_calls


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


def offered_tools(ds, run_cfg: PipelineConfig) -> tuple[dict[str, ToolInfo], dict[str, tuple[str, str]]]:
    """The tools every exported row offers, in order: the run's ``tools.enabled``, then any other tool its rows
    call (sorted), each that can be exported; and why each name that cannot be is left out (:func:`load_tools`)."""
    called = {c["tool"] for calls in ds["calls"] for c in json.loads(calls or "[]")}
    order = list(dict.fromkeys([*run_cfg.tools.enabled, *sorted(called)]))
    tools, problems = load_tools(set(order), run_cfg)
    return {name: tools[name] for name in order if name in tools}, problems


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


# -- the command ---------------------------------------------------------------------
def open_dataset(run_dir: Path):
    """The built data set of a run folder, or an error naming what to run."""
    from datasets import load_from_disk

    if not run_dir.is_dir():
        raise FileNotFoundError(f"{run_dir}: no such run folder")
    build = StageFolder(run_dir, "build")
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


def output_path(run_dir: Path, fmt: str, out: str | Path | None, force: bool = False) -> Path:
    path = Path(out) if out else run_dir / "export" / f"{fmt}.jsonl"
    if path.is_dir():
        raise ValueError(f"--out {path} is a folder; name a file")
    build = (run_dir / "build").resolve()
    if path.resolve() == build or build in path.resolve().parents:
        raise ValueError(f"--out {path} lies inside {build}, which export reads; choose another file")
    if path.is_symlink() or (path.exists() and not path.is_file()):
        raise ValueError(f"--out {path} is not a regular file (a link, a device); name a new file")
    if path.exists() and not force and not holds_export(path):
        raise ValueError(f"--out {path} exists and holds no export (its first line is no {', '.join(FORMATS)} "
                         f"record); name a new file, or add --force to replace it")
    return path


EXPORT_KEYS = ({"messages"}, {"messages", "tools"}, {"id", "segments"})  # the keys of a record of each format
FIRST_LINE_BYTES = 64 * 2**20  # a first line longer than this is read as no export record


def holds_export(path: Path) -> bool:
    """Whether ``path`` is a file an export wrote: empty (an export of no rows), or its first line a record of
    one of :data:`FORMATS`. Only such a file is replaced without ``--force``."""
    try:
        with path.open("rb") as f:
            first = f.readline(FIRST_LINE_BYTES)
    except OSError as e:
        raise ValueError(f"--out {path} exists and cannot be read to see whether it holds an export ({e.strerror}); "
                         "name a new file, or add --force to replace it") from None
    if not first:
        return True
    try:
        record = parse_json(first.decode("utf-8"))
    except ValueError:
        return False
    return isinstance(record, dict) and set(record) in EXPORT_KEYS


def export_run(cfg: PipelineConfig, fmt: str, out: str | Path | None = None, kept_only: bool = False,
               force: bool = False) -> dict:
    """Write the built data set of ``cfg.run_dir`` as ``fmt`` records; return the counts. An existing output file
    is replaced only when it holds an export (:func:`holds_export`) or ``force`` is set.

    The call style, separator and tool settings are those the run saved
    (``RUN_DIR/config.yaml``), else those of ``cfg``."""
    if fmt not in FORMATS:
        raise ValueError(f"format: {fmt!r} is not one of {', '.join(FORMATS)}")
    run_dir = Path(cfg.run_dir)
    ds = open_dataset(run_dir)
    path = output_path(run_dir, fmt, out, force)
    run_cfg, note = run_config(cfg)
    if note:
        print(f"export: {note}")
    style, separator = get_style(run_cfg.calls.style), run_cfg.calls.separator
    tools, problems = offered_tools(ds, run_cfg)
    try:
        return write_export(ds, path, fmt, style, separator, tools, problems, kept_only)
    finally:
        close_tools({name: info.tool for name, info in tools.items()})


def write_export(ds, path: Path, fmt: str, style: CallStyle, separator: str, tools: dict[str, ToolInfo],
                 problems: dict[str, tuple[str, str]], kept_only: bool) -> dict:
    """Write every row of ``ds`` as one ``fmt`` record to ``path`` (atomically); return the counts."""
    counts = new_counts(len(ds))
    with atomic_path(path) as tmp, tmp.open("w", encoding="utf-8") as f:
        for row, segs in exported_segments(ds, fmt, style, separator, tools, problems, kept_only, counts):
            f.write(dumps(to_record(fmt, str(row["doc_id"]), segs, tools)) + "\n")
    counts = finished_counts(counts, fmt, path)
    print(summary_line(counts, kept_only))
    return counts


def new_counts(rows: int) -> dict:
    return {"rows": rows, "conversations": 0, "with_calls": 0, "calls": 0, "per_tool": Counter(),
            "left_out_without_calls": 0, "skipped": Counter(), "invalid_calls": 0, "inputs_rewritten": 0}


def exported_segments(ds, fmt: str, style: CallStyle, separator: str, tools: dict[str, ToolInfo],
                      problems: dict[str, tuple[str, str]], kept_only: bool, counts: dict
                      ) -> Iterator[tuple[dict, list[dict]]]:
    """(row, its segments) for every row of ``ds`` that can be exported, counted into ``counts``
    (:func:`new_counts`); a row that cannot is counted by reason, the first few printed."""
    shown = 0
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
        yield row, segs
        calls = [s["tool"] for s in segs if s["type"] == "call"]
        counts["conversations"] += 1
        counts["with_calls"] += bool(calls)
        counts["calls"] += len(calls)
        counts["per_tool"].update(calls)
        counts["inputs_rewritten"] += rewritten


def finished_counts(counts: dict, fmt: str, path: Path) -> dict:
    """The counts as plain dicts, with the format and the output."""
    return {**counts, "per_tool": dict(counts["per_tool"].most_common()), "skipped": dict(counts["skipped"]),
            "format": fmt, "output": str(path)}


def count_clause(what: str, by_reason: dict[str, int]) -> str:
    """``; N WHAT (reason n, ...)`` for a summary line (no reasons when N is 0)."""
    total = sum(by_reason.values())
    reasons = " (" + ", ".join(f"{why} {n:,}" for why, n in by_reason.items()) + ")" if total else ""
    return f"; {total:,} {what}{reasons}"


def summary_line(counts: dict, kept_only: bool) -> str:
    tools = ", ".join(f"{t} {n:,}" for t, n in counts["per_tool"].items())
    line = (f"export: {counts['rows']:,} rows; {counts['conversations']:,} conversations "
            f"({counts['with_calls']:,} with calls, {counts['conversations'] - counts['with_calls']:,} without) "
            f"with {counts['calls']:,} calls{f' ({tools})' if tools else ''}")
    line += count_clause("rows skipped", counts["skipped"])
    if counts["invalid_calls"]:
        line += f", {counts['invalid_calls']:,} calls with invalid arguments"
    if kept_only:
        line += f"; {counts['left_out_without_calls']:,} rows without calls left out (--kept-only)"
    if counts["inputs_rewritten"]:
        line += f"; {counts['inputs_rewritten']:,} call inputs not kept by their arguments"
    return f"{line} -> {counts['output']}"
