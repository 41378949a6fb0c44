"""``toolformer export``: the built data set as chat conversations (OpenAI
chat fine-tuning with tools, Anthropic Messages with tool_use/tool_result
blocks, the neutral segments), checked against the published shapes, and
back to the inline text."""

import json
import re

import pytest
from helpers import filter_record, read_jsonl, write_build, write_filter_run
from jsonschema import Draft202012Validator

from toolformer.cli.app import main
from toolformer.cli.parser import EXPORT_FORMATS
from toolformer.config.schema import PipelineConfig
from toolformer.inspect.chatformats import FORMATS, USER_TURN, round_trip, segments_from, tool_name, wire_name
from toolformer.inspect.export import export_run
from toolformer.pipeline import save_resolved_config
from toolformer.stages.build import run_stage as build
from toolformer.tools import build_tool
from toolformer.tools.calculator import Calculator
from toolformer.tools.calls import get_style

NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")  # function / tool names in both APIs
DOCS = [
    {"doc_id": "d1", "text": "She paid 18 + 12 * 3 = 54 dollars on 2021-03-04.", "date": "2021-03-04"},
    {"doc_id": "d2", "text": "Lake Orun lies near Vell. It has 4 islands.", "date": None},
    {"doc_id": "d3", "text": "Nothing to compute here.", "date": None},
    {"doc_id": "d4", "text": "12 + 30 = 42 and 2 * 21 = 42.", "date": None},
    {"doc_id": "d5", "text": "Today is a good day.", "date": "2021-03-05"},
    {"doc_id": "d6", "text": "The sum of 7 and 5 is", "date": None},
    {"doc_id": "d7", "text": "Another plain document.", "date": None},
]
CALLS = [  # (doc_id, tool, input, result, char_start)
    ("d1", "Calculator", "18 + 12 * 3", "54", 23),
    ("d1", "Calendar", "", "Today is Thursday, March 4, 2021.", 37),
    ("d2", "QA", "How many islands has Lake Orun?", "4", 33),
    ("d4", "Calculator", "12 + 30", "42", 10),
    ("d4", "Calculator", "2 * 21", "42", 26),
    ("d5", "Calendar", "", "Today is Friday, March 5, 2021.", 0),  # a call before any text
    ("d6", "Calculator", "7 + 5", "12", 21),  # a call after all the text
]
TEXTS = {d["doc_id"]: d["text"] for d in DOCS}
OFFERED = set(PipelineConfig().tools.enabled)  # the tools every record offers, whether it calls or not


def make_built_run(root, style="plain", separator=" ", calls=CALLS, save_config=False) -> PipelineConfig:
    """A run folder with a finished build of DOCS and CALLS (every document kept)."""
    cfg = PipelineConfig(run_dir=str(root / "run"))
    cfg.calls.style, cfg.calls.separator = style, separator
    cfg.build.drop_without_calls = False
    write_filter_run(cfg.run_dir, DOCS, [filter_record(*c, 2.0, 0.5, style=style) for c in calls])
    build(cfg)
    if save_config:
        save_resolved_config(cfg)
    return cfg


@pytest.fixture(scope="module")
def run_cfg(tmp_path_factory) -> PipelineConfig:
    return make_built_run(tmp_path_factory.mktemp("export"))


def dataset_rows(cfg) -> list[dict]:
    from datasets import load_from_disk

    return list(load_from_disk(f"{cfg.run_dir}/build/dataset"))


def export(cfg, fmt, tmp_path, **kw) -> tuple[list[dict], dict]:
    out = tmp_path / f"{fmt}.jsonl"
    counts = export_run(cfg, fmt, out, **kw)
    return read_jsonl(out), counts


def check_arguments(arguments: dict, schema: dict, tool: str) -> None:
    Draft202012Validator.check_schema(schema)
    Draft202012Validator(schema).validate(arguments)
    assert schema == build_tool(tool_name(tool)).input_schema


def check_openai(record: dict) -> str:
    """The published shape of an OpenAI chat fine-tuning example with tools;
    returns the assistant text, joined."""
    assert set(record) <= {"messages", "tools"}
    messages = record["messages"]
    assert messages[0] == {"role": "user", "content": USER_TURN}
    assert all(m["role"] in ("user", "assistant", "tool") for m in messages)
    schemas = {}
    for t in record.get("tools", []):
        assert set(t) == {"type", "function"} and t["type"] == "function"
        assert set(t["function"]) == {"name", "description", "parameters"} and NAME.match(t["function"]["name"])
        schemas[t["function"]["name"]] = t["function"]["parameters"]
    text, ids, called = "", set(), set()
    for i, m in enumerate(messages[1:], 1):
        if m["role"] == "assistant":
            assert set(m) <= {"role", "content", "tool_calls"}
            assert m["content"] is None or (isinstance(m["content"], str) and m["content"])
            text += m["content"] or ""
            if "tool_calls" not in m:
                assert i == len(messages) - 1, "a text-only assistant message ends the conversation"
                continue
            (tc,) = m["tool_calls"]
            assert set(tc) == {"id", "type", "function"} and tc["type"] == "function" and tc["id"] not in ids
            assert set(tc["function"]) == {"name", "arguments"} and isinstance(tc["function"]["arguments"], str)
            check_arguments(json.loads(tc["function"]["arguments"]), schemas[tc["function"]["name"]],
                            tc["function"]["name"])
            ids.add(tc["id"])
            called.add(tc["function"]["name"])
            reply = messages[i + 1]
            assert set(reply) == {"role", "tool_call_id", "content"} and reply["role"] == "tool"
            assert reply["tool_call_id"] == tc["id"] and isinstance(reply["content"], str) and reply["content"]
        else:
            assert m["role"] == "tool" and "tool_calls" in messages[i - 1]
    assert called <= set(schemas) == OFFERED, "every record offers the run's tools"
    return text


def check_anthropic(record: dict) -> str:
    """The published shape of a Messages API conversation with tool_use and
    tool_result blocks; returns the assistant text, joined."""
    assert set(record) <= {"system", "tools", "messages"}
    messages = record["messages"]
    assert messages[0] == {"role": "user", "content": USER_TURN}
    assert [m["role"] for m in messages] == ["user", "assistant"] * (len(messages) // 2) + (
        ["user"] if len(messages) % 2 else []), "roles alternate, user first"
    schemas = {}
    for t in record.get("tools", []):
        assert set(t) == {"name", "description", "input_schema"} and NAME.match(t["name"])
        schemas[t["name"]] = t["input_schema"]
    text, called = "", set()
    for i, m in enumerate(messages[1:], 1):
        assert isinstance(m["content"], list) and m["content"]
        if m["role"] == "user":
            (block,) = m["content"]  # nothing but the tool_result
            assert set(block) == {"type", "tool_use_id", "content"} and block["type"] == "tool_result"
            (use,) = [b for b in messages[i - 1]["content"] if b["type"] == "tool_use"]
            assert block["tool_use_id"] == use["id"] and isinstance(block["content"], str) and block["content"]
            continue
        *texts, last = m["content"]
        for b in texts + ([last] if last["type"] == "text" else []):
            assert set(b) == {"type", "text"} and b["type"] == "text" and b["text"]
            text += b["text"]
        if last["type"] == "tool_use":
            assert set(last) == {"type", "id", "name", "input"} and NAME.match(last["id"])
            check_arguments(last["input"], schemas[last["name"]], last["name"])
            called.add(last["name"])
            assert messages[i + 1]["role"] == "user"
        else:
            assert i == len(messages) - 1, "an assistant message without tool_use ends the conversation"
    ids = [b["id"] for m in messages if m["role"] == "assistant" for b in m["content"] if b["type"] == "tool_use"]
    assert len(ids) == len(set(ids))
    assert called <= set(schemas) == OFFERED, "every record offers the run's tools"
    return text


def check_jsonl(record: dict) -> str:
    assert set(record) == {"id", "segments"}
    text = ""
    for s in record["segments"]:
        if s["type"] == "text":
            assert set(s) == {"type", "text"} and s["text"]
            text += s["text"]
        else:
            assert set(s) == {"type", "tool", "arguments", "result"} and s["type"] == "call"
            check_arguments(s["arguments"], build_tool(s["tool"]).input_schema, s["tool"])
    kinds = [s["type"] for s in record["segments"]]
    assert "text,text" not in ",".join(kinds), "text segments are merged"
    return text


CHECKS = {"openai": check_openai, "anthropic": check_anthropic, "jsonl": check_jsonl}


@pytest.mark.parametrize("fmt", FORMATS)
def test_published_shape_and_text_of_every_record(run_cfg, tmp_path, fmt, capsys):
    records, counts = export(run_cfg, fmt, tmp_path)
    rows = dataset_rows(run_cfg)
    assert len(records) == len(rows) == len(DOCS)
    for record, row in zip(records, rows):
        # The assistant's text (the segments' text) is the document without its calls.
        assert CHECKS[fmt](record) == TEXTS[row["doc_id"]]
    assert (counts["rows"], counts["conversations"], counts["with_calls"], counts["calls"]) == (7, 7, 5, 7)
    assert counts["per_tool"] == {"Calculator": 4, "Calendar": 2, "QA": 1} and counts["skipped"] == {}
    assert capsys.readouterr().out.strip().endswith(
        f"export: 7 rows; 7 conversations (5 with calls, 2 without) with 7 calls (Calculator 4, Calendar 2, "
        f"QA 1); 0 rows skipped -> {tmp_path / (fmt + '.jsonl')}")


def test_conversation_of_one_document(run_cfg, tmp_path):
    records = {fmt: export(run_cfg, fmt, tmp_path)[0][0] for fmt in FORMATS}  # d1
    calc = {"input": "18 + 12 * 3"}
    assert records["openai"]["messages"][1:] == [
        {"role": "assistant", "content": "She paid 18 + 12 * 3 = ", "tool_calls": [
            {"id": "call_0", "type": "function",
             "function": {"name": "Calculator", "arguments": json.dumps(calc)}}]},
        {"role": "tool", "tool_call_id": "call_0", "content": "54"},
        {"role": "assistant", "content": "54 dollars on ", "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "Calendar", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "Today is Thursday, March 4, 2021."},
        {"role": "assistant", "content": "2021-03-04."},
    ]
    assert records["anthropic"]["messages"][1:3] == [
        {"role": "assistant", "content": [{"type": "text", "text": "She paid 18 + 12 * 3 = "},
                                          {"type": "tool_use", "id": "toolu_0", "name": "Calculator",
                                           "input": calc}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_0", "content": "54"}]},
    ]
    assert [t["name"] for t in records["anthropic"]["tools"]] == PipelineConfig().tools.enabled
    assert records["jsonl"] == {"id": "d1", "segments": [
        {"type": "text", "text": "She paid 18 + 12 * 3 = "},
        {"type": "call", "tool": "Calculator", "arguments": calc, "result": "54"},
        {"type": "text", "text": "54 dollars on "},
        {"type": "call", "tool": "Calendar", "arguments": {}, "result": "Today is Thursday, March 4, 2021."},
        {"type": "text", "text": "2021-03-04."}]}


def test_call_first_and_last(run_cfg, tmp_path):
    """A call before any text (d5) has no text before it; after a call that
    ends the text (d6) the conversation ends with its result."""
    openai = dict(zip(TEXTS, export(run_cfg, "openai", tmp_path)[0]))  # rows in corpus order
    assert openai["d5"]["messages"][1]["content"] is None
    assert openai["d6"]["messages"][-1]["role"] == "tool"
    anthropic = dict(zip(TEXTS, export(run_cfg, "anthropic", tmp_path)[0]))
    assert [b["type"] for b in anthropic["d5"]["messages"][1]["content"]] == ["tool_use"]
    assert [b["type"] for b in anthropic["d6"]["messages"][-2]["content"]] == ["text", "tool_use"]
    assert [b["type"] for b in anthropic["d6"]["messages"][-1]["content"]] == ["tool_result"]


@pytest.mark.parametrize("fmt", FORMATS)
def test_round_trip_gives_the_inline_text(run_cfg, tmp_path, fmt):
    records, _ = export(run_cfg, fmt, tmp_path)
    rows = dataset_rows(run_cfg)
    style = get_style("plain")
    assert round_trip(records[0], fmt, style) == rows[0]["text"] == (
        "She paid 18 + 12 * 3 = [Calculator(18 + 12 * 3) → 54] 54 dollars on "
        "[Calendar() → Today is Thursday, March 4, 2021.] 2021-03-04.")
    assert [round_trip(r, fmt, style) for r in records] == [r["text"] for r in rows]
    assert all(s["tool"] in ("Calculator", "Calendar", "QA")
               for r in records for s in segments_from(r, fmt) if s["type"] == "call")


def test_kept_only_counts(run_cfg, tmp_path, capsys):
    records, counts = export(run_cfg, "openai", tmp_path, kept_only=True)
    assert len(records) == counts["conversations"] == counts["with_calls"] == 5
    assert counts["left_out_without_calls"] == 2 and counts["rows"] == 7 and counts["calls"] == 7
    assert all("tools" in r for r in records)
    assert "; 2 rows without calls left out (--kept-only)" in capsys.readouterr().out


def test_call_style_and_separator_come_from_the_saved_config(tmp_path, capsys):
    cfg = make_built_run(tmp_path / "a", style="special", separator="\n", save_config=True)
    rows = dataset_rows(cfg)
    assert "<API>Calculator(18 + 12 * 3) → 54</API>\n54 dollars" in rows[0]["text"]
    plain = PipelineConfig(run_dir=cfg.run_dir)  # the current config says plain; the run's says special
    for fmt in FORMATS:
        records, counts = export(plain, fmt, tmp_path)
        assert counts["conversations"] == 7 and counts["skipped"] == {}
        assert [round_trip(r, fmt, get_style("special"), "\n") for r in records] == [r["text"] for r in rows]
    # Without the saved config the calls are not where the plain style puts them: those rows are skipped.
    (tmp_path / "a/run/config.yaml").unlink()
    _, counts = export(plain, "jsonl", tmp_path)
    assert counts["skipped"] == {"call not in text": 5} and counts["conversations"] == 2
    assert "export: skipped d1: call 0 ('[Calculator(18 + 12 * 3) → 54]') is not at offset 23" in \
        capsys.readouterr().out


def test_invalid_arguments_are_skipped_and_counted(tmp_path, monkeypatch, capsys):
    cfg = make_built_run(tmp_path)
    schema = {"type": "object", "properties": {"input": {"type": "string", "pattern": r"^[0-9 +]*$"}},
              "required": ["input"], "additionalProperties": False}
    monkeypatch.setattr(Calculator, "input_schema", property(lambda self: schema))
    records, counts = export(cfg, "anthropic", tmp_path)
    # d1 (18 + 12 * 3) and d4 (2 * 21) fail the pattern; d6 (7 + 5) passes.
    assert counts["skipped"] == {"invalid arguments": 2} and counts["invalid_calls"] == 2
    assert counts["conversations"] == len(records) == 5 and counts["per_tool"]["Calculator"] == 1
    out = capsys.readouterr().out
    assert "export: skipped d1: call 0 Calculator(18 + 12 * 3): '18 + 12 * 3' does not match" in out
    assert "2 rows skipped (invalid arguments 2), 2 calls with invalid arguments" in out


def test_rows_calling_an_unknown_tool_are_skipped(tmp_path, capsys):
    cfg = make_built_run(tmp_path, calls=[*CALLS, ("d3", "Weather", "Vell", "rain", 0)])
    records, counts = export(cfg, "openai", tmp_path)
    assert counts["skipped"] == {"unknown tool": 1} and counts["conversations"] == len(records) == 6
    assert "export: skipped d3: tool 'Weather' is not one of Calculator, Calendar" in capsys.readouterr().out


def test_an_input_the_arguments_do_not_keep_is_counted(tmp_path):
    calls = [("d5", "Calendar", "when?", "Today is Friday, March 5, 2021.", 0)]
    cfg = make_built_run(tmp_path, calls=calls)
    records, counts = export(cfg, "jsonl", tmp_path, kept_only=True)
    assert counts["inputs_rewritten"] == 1 and counts["conversations"] == 1
    # Calendar takes no input: its arguments are {} and the call comes back without the text.
    assert dataset_rows(cfg)[4]["text"].startswith("[Calendar(when?) → ")
    assert round_trip(records[0], "jsonl", get_style("plain")).startswith("[Calendar() → ")


def test_tool_names_on_the_wire():
    assert wire_name("Calculator") == "Calculator" and wire_name("server.search") == "server__search"
    assert tool_name(wire_name("a.b.c-d_e")) == "a.b.c-d_e"
    for bad in ("has__double", "with space", "x" * 65, "", "ünï"):
        assert wire_name(bad) is None


def test_cli_default_path_and_errors(tmp_path, capsys):
    cfg = make_built_run(tmp_path)
    assert main(["export", cfg.run_dir, "--format", "jsonl", "--kept-only"]) == 0
    out = tmp_path / "run/export/jsonl.jsonl"
    assert [r["id"] for r in read_jsonl(out)] == ["d1", "d2", "d4", "d5", "d6"]
    assert sorted(p.name for p in out.parent.iterdir()) == ["jsonl.jsonl"]  # no temporary file left
    assert f"-> {out}" in capsys.readouterr().out

    assert main(["export", str(tmp_path / "nope"), "--format", "openai"]) == 2
    assert f"{tmp_path / 'nope'}: no such run folder" in capsys.readouterr().err
    unbuilt = tmp_path / "unbuilt"
    write_filter_run(unbuilt, DOCS, [])
    assert main(["export", str(unbuilt), "--format", "openai"]) == 2
    err = capsys.readouterr().err
    assert f"{unbuilt / 'build'}: no finished build" in err and "toolformer build --config" in err
    assert not (unbuilt / "export").exists()
    write_build(tmp_path / "text-only", ["just text"])
    assert main(["export", str(tmp_path / "text-only"), "--format", "openai"]) == 2
    assert "has no column(s) doc_id, augmented, calls" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        main(["export", cfg.run_dir, "--format", "xml"])
    assert e.value.code == 2 and "invalid choice: 'xml'" in capsys.readouterr().err
    assert EXPORT_FORMATS == FORMATS
    assert main(["export", cfg.run_dir, "--format", "jsonl", "--out", str(tmp_path / "run/build/x.jsonl")]) == 2
    assert "which export reads" in capsys.readouterr().err


def test_an_existing_out_file_is_replaced_only_when_it_holds_an_export(run_cfg, tmp_path, capsys):
    def export_to(out, fmt="jsonl", *extra) -> int:
        return main(["export", run_cfg.run_dir, "--format", fmt, "--out", str(out), *extra])

    notes, other = tmp_path / "notes.txt", tmp_path / "other.jsonl"
    notes.write_text("my notes\n")
    other.write_text('{"a": 1}\n')
    for user_file in (notes, other):
        assert export_to(user_file) == 2
        err = capsys.readouterr().err
        assert f"--out {user_file} exists and holds no export" in err and "--force" in err and err.count("\n") == 1
    assert notes.read_text() == "my notes\n" and other.read_text() == '{"a": 1}\n'
    assert export_to(notes, "openai", "--force") == 0 and read_jsonl(notes)[0]["messages"]
    assert export_to(notes) == 0 and read_jsonl(notes)[0]["id"] == "d1"  # an export (of another format) is replaced
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    assert export_to(empty) == 0 and read_jsonl(empty)
    link = tmp_path / "link.jsonl"
    link.symlink_to(other)
    assert export_to(link, "jsonl", "--force") == 2
    assert "is not a regular file" in capsys.readouterr().err and link.is_symlink()
    assert export_to(tmp_path / "trl", "trl-sft", "--force") == 2
    assert "--force: a trl-sft export replaces only a folder" in capsys.readouterr().err
    assert not (tmp_path / "trl").exists() and other.read_text() == '{"a": 1}\n'
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty.jsonl", "link.jsonl", "notes.txt", "other.jsonl"]


def test_an_out_file_that_cannot_be_read_is_refused(tmp_path, monkeypatch):
    from pathlib import Path

    from toolformer.inspect.export import output_path

    out = tmp_path / "locked.jsonl"
    out.write_text("secret\n")

    def denied(self, *a, **kw):
        raise PermissionError(13, "Permission denied", str(self))

    monkeypatch.setattr(Path, "open", denied)  # what a file without read permission gives (tests may run as root)
    with pytest.raises(ValueError, match=r"locked.jsonl exists and cannot be read .*\(Permission denied\).*--force"):
        output_path(tmp_path, "jsonl", out)
    assert output_path(tmp_path, "jsonl", out, force=True) == out
