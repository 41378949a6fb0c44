"""The records the annotation stages write, declared once.

Each stage's JSON Lines record is a :class:`~typing.TypedDict` whose fields
carry their meaning (``Annotated[type, "meaning"]``). A stage's record holds
every field of the stage before it plus its own, so ``FilterRecord`` is the
whole story of one candidate call. The stages build their records through
these types, ``inspect`` checks the keys it needs against them, ``build``
derives its data set's columns from :class:`DatasetRow`, and the field table
in the README and in docs/design.md is :func:`markdown_table` (a test keeps
them equal; ``python -m toolformer.corpus.records`` prints it).
"""

from __future__ import annotations

import functools
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, TypedDict

from toolformer.rundir.files import IntegrityError, iter_jsonl


class SampleRecord(TypedDict):
    """``RUN_DIR/sample``: one candidate call at one position."""

    doc_id: Annotated[str, "document the call is proposed for"]
    tool: Annotated[str, "tool name"]
    input: Annotated[str, "the call's input, as sampled or proposed"]
    position: Annotated[int, "token index i the call goes before"]
    char_start: Annotated[int, "character offset of token i in the text"]
    p_i: Annotated[float | None, "p_M(call start given P(x), x_1..x_{i-1}) (P(x) = x with sample.prompt none); "
                                 "null for rule proposals"]
    source: Annotated[str, "`sampler` (the paper's sampler) or `rules` (a rule proposer)"]


class ExecuteRecord(SampleRecord):
    """``RUN_DIR/execute``: + what the tool returned."""

    result: Annotated[str | None, "the tool's result r (null on error)"]
    error: Annotated[dict | None, "`{code, message, hint}` when the call returned no result"]


class FilterRecord(ExecuteRecord):
    """``RUN_DIR/filter``: + the weighted losses of the paper's criterion."""

    call_text: Annotated[str | None, "e(c, r): the call with its result, as inserted"]
    call_text_no_result: Annotated[str | None, "e(c, ε): the call with an empty result"]
    loss_none: Annotated[float | None, "L_i(ε): no call before the text"]
    loss_no_result: Annotated[float | None, "L_i(e(c, ε)); null where L_i(ε) − L⁺ < tau_f already rejects the call"]
    loss_with_result: Annotated[float | None, "L_i(e(c, r))"]
    loss_minus: Annotated[float | None, "L⁻ = min(L_i(ε), L_i(e(c, ε))); L_i(ε), an upper bound, where "
                          "loss_no_result is null"]
    loss_plus: Annotated[float | None, "L⁺ = L_i(e(c, r))"]
    tau_filter: Annotated[float, "the threshold τ_f this tool was filtered with"]
    read_ahead: Annotated[list[str], "numbers and names of the input the text states only after the position"]
    kept: Annotated[bool, "L⁻ − L⁺ ≥ τ_f, and reads nothing ahead with filter.lookahead drop"]


class CallProvenance(TypedDict):
    """One inserted call, in a data set row's ``calls``."""

    tool: Annotated[str, "tool name"]
    input: Annotated[str, "the call's input"]
    result: Annotated[str, "the tool's result"]
    char_start: Annotated[int, "offset in the original text where the call was inserted"]
    loss_minus: Annotated[float, "L⁻ of the call"]
    loss_plus: Annotated[float, "L⁺ of the call"]


class DatasetRow(TypedDict):
    """``RUN_DIR/build/dataset`` (``datasets`` on disk) and ``augmented.jsonl``."""

    text: Annotated[str, "the document with its calls inline"]
    doc_id: Annotated[str, "the document's id (`plain:N` for plain text mixed in)"]
    augmented: Annotated[bool, "whether calls were inserted"]
    calls: Annotated[str, "JSON list of the inserted calls: `tool`, `input`, `result`, `char_start`, "
                          "`loss_minus`, `loss_plus`"]


# The record of each stage that writes shards of candidate calls.
STAGE_RECORDS: dict[str, type] = {"sample": SampleRecord, "execute": ExecuteRecord, "filter": FilterRecord}
# What a kept filter record must carry, not null, for build to insert it.
KEPT_REQUIRED = ("doc_id", "tool", "input", "result", "char_start", "call_text", "loss_minus", "loss_plus")


def margin(record: dict) -> float | None:
    """L⁻ − L⁺ of a filter record: how much the call with its result lowers the
    loss; None when it has no losses."""
    lm, lp = record.get("loss_minus"), record.get("loss_plus")
    return None if lm is None or lp is None else float(lm) - float(lp)


def scored_margin(record: dict) -> float:
    """:func:`margin` of a record known to have both losses (a kept call has them: :data:`KEPT_REQUIRED`)."""
    return float(record["loss_minus"]) - float(record["loss_plus"])


def fields(record: type) -> dict[str, tuple[object, str]]:
    """name -> (type, meaning) of a record type, in declaration order (bases first)."""
    hints = typing.get_type_hints(record, include_extras=True)
    out = {}
    for name, hint in hints.items():
        base, meaning = typing.get_args(hint)[:2] if typing.get_origin(hint) is Annotated else (hint, "")
        out[name] = (base, meaning)
    return out


def required(stage: str) -> tuple[str, ...]:
    """Keys every record of ``stage`` has (a shard line without one is malformed)."""
    return tuple(fields(STAGE_RECORDS[stage]))


def check_record(stage: str, record: dict, complete: bool = True) -> str:
    """What keeps ``record`` from being a record of ``stage`` ('' when nothing): a field missing (unless not
    ``complete``: only the fields it has are checked) or of another type than :data:`STAGE_RECORDS` declares (a
    record that claims a tool of null, a position of "x")."""
    for name, (tp, _) in _fields_of(stage).items():
        if name not in record:
            if not complete:
                continue
            return f"no field {name!r}"
        if not _matches(record[name], tp):
            return f"field {name!r} is {_json_type(record[name])}, not {type_name(tp)} as in every {stage} record"
    return ""


def read_records(path: Path, stage: str, remedy: str = "", complete: bool = True) -> Iterator[tuple[int, dict]]:
    """(line, record) of a shard of ``stage``; a line that is not a record of the stage (:func:`check_record`)
    raises IntegrityError naming the file and line, followed by ``remedy``."""
    for n, rec in iter_jsonl(path):
        problem = check_record(stage, rec, complete)
        if problem:
            raise IntegrityError(f"{path}:{n}: {problem}" + (f": {remedy}" if remedy else ""))
        yield n, rec


@functools.lru_cache
def _fields_of(stage: str) -> dict[str, tuple[object, str]]:
    return fields(STAGE_RECORDS[stage])


def _matches(value: object, tp: object) -> bool:
    """Whether JSON ``value`` has type ``tp`` (an int is a float; a bool is not an int)."""
    args = typing.get_args(tp)
    if typing.get_origin(tp) is list:
        return isinstance(value, list) and all(_matches(v, args[0]) for v in value)
    if args:  # X | None
        return any(_matches(value, a) for a in args)
    if tp is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if tp is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return value is None if tp is type(None) else isinstance(value, tp)  # type: ignore[arg-type]


def _json_type(value: object) -> str:
    if isinstance(value, str):
        return f"the string {value[:40]!r}"
    return "null" if value is None else type_name(type(value))


def type_name(tp: object) -> str:
    names = {str: "string", int: "int", float: "float", bool: "bool", dict: "object", list: "list",
             type(None): "null"}
    args = typing.get_args(tp)
    if typing.get_origin(tp) is list:
        return f"list of {type_name(args[0])}" if args else "list"
    if args:
        return " or ".join(type_name(a) for a in args)
    return names.get(tp, getattr(tp, "__name__", str(tp)))  # type: ignore[call-overload]


def markdown_table() -> str:
    """The field table of the README and docs/design.md: stage, field, type, meaning."""
    lines = ["| written by | field | type | meaning |", "| --- | --- | --- | --- |"]
    seen: set[str] = set()
    for stage, record in STAGE_RECORDS.items():
        for name, (tp, meaning) in fields(record).items():
            if name not in seen:
                seen.add(name)
                lines.append(f"| `{stage}` | `{name}` | {type_name(tp)} | {meaning} |")
    for name, (tp, meaning) in fields(DatasetRow).items():
        lines.append(f"| `build` (data set) | `{name}` | {type_name(tp)} | {meaning} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(markdown_table(), end="")
