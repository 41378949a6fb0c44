"""``toolformer export --format trl-sft|trl-dpo``: the data sets TRL's trainers read. On a run folder made by the
real stages on the tiny model (tau_f low enough that the filter keeps some calls and rejects others) and on
run folders made by hand: the published shapes (TRL's conversational type with tools, its standard preference
type), read back with ``datasets.load_dataset("json", ...)`` and ``load_from_disk``, each conversation back to
the built row's inline text, each pair the document with one call inserted at its position, a transformers chat
template round trip, and the output folder's refusals."""

import json
import re
from pathlib import Path

import pytest
from helpers import built_run_with_two_calls, filter_record, read_jsonl, shard_records
from jsonschema import Draft202012Validator
from runs import tiny_built_run

from toolformer.cli.app import main
from toolformer.cli.parser import TRL_EXPORT_FORMATS
from toolformer.config.schema import PipelineConfig
from toolformer.corpus.records import margin
from toolformer.inspect.chatformats import USER_TURN, add_text, inline_text, tool_name
from toolformer.inspect.trl import FORMATS, NO_CALL, REJECTED_CALL, export_trl
from toolformer.rundir.folder import StageFolder, read_documents, write_documents
from toolformer.tools import build_tool
from toolformer.tools.calls import get_style, insert_calls

TAU = 0.0  # the tiny random model's margins lie around 0: the filter keeps some calls and rejects others
STYLE = get_style("plain")


@pytest.fixture(scope="module")
def run_dir(tiny_model_dir, tmp_path_factory) -> Path:
    return tiny_built_run(tiny_model_dir, tmp_path_factory.mktemp("trl") / "run", TAU)


def load_both(folder: Path) -> tuple[list[dict], list[dict], list[dict]]:
    """The export's rows: from data.jsonl as written, through load_dataset("json"), through load_from_disk."""
    from datasets import load_dataset, load_from_disk

    assert sorted(p.name for p in folder.iterdir()) in (["data.jsonl", "dataset"],
                                                         ["chat_template.jinja", "data.jsonl", "dataset"])
    written = read_jsonl(folder / "data.jsonl")
    loaded = list(load_dataset("json", data_files=str(folder / "data.jsonl"), split="train"))
    return written, loaded, list(load_from_disk(str(folder / "dataset")))


def without_nulls(value):
    """What transformers and TRL read: keys whose value is null dropped (Arrow fills the keys a row lacks)."""
    if isinstance(value, dict):
        return {k: without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [without_nulls(v) for v in value]
    return value


def built_rows(run_dir) -> list[dict]:
    from datasets import load_from_disk

    return list(load_from_disk(str(Path(run_dir) / "build/dataset")))


# -- trl-sft ---------------------------------------------------------------------------------------------------
def check_conversation(row: dict) -> list[dict]:
    """The published shape of a TRL conversation with tools; returns its segments (text, and calls by tool name)."""
    assert set(row) == {"messages", "tools"}
    schemas = {}
    for t in row["tools"]:
        assert set(t) == {"type", "function"} and t["type"] == "function"
        assert set(t["function"]) == {"name", "description", "parameters"}
        schemas[t["function"]["name"]] = t["function"]["parameters"]
        assert t["function"]["parameters"] == build_tool(tool_name(t["function"]["name"])).input_schema
    messages = row["messages"]
    assert messages[0] == {"role": "user", "content": USER_TURN}
    segs: list[dict] = []
    for i, m in enumerate(messages[1:], 1):
        assert m["role"] in ("assistant", "tool") and isinstance(m["content"], str)
        if m["role"] == "tool":
            assert set(m) == {"role", "name", "content"} and "tool_calls" in messages[i - 1]
            continue
        add_text(segs, m["content"])
        if "tool_calls" not in m:
            assert set(m) == {"role", "content"} and m["content"] and i == len(messages) - 1
            continue
        assert set(m) == {"role", "content", "tool_calls"}
        (tc,) = m["tool_calls"]
        assert set(tc) == {"type", "function"} and tc["type"] == "function"
        assert set(tc["function"]) == {"name", "arguments"} and isinstance(tc["function"]["arguments"], dict)
        name, arguments = tc["function"]["name"], tc["function"]["arguments"]
        Draft202012Validator(schemas[name]).validate(arguments)
        reply = messages[i + 1]
        assert reply["role"] == "tool" and reply["name"] == name and reply["content"]
        segs.append({"type": "call", "tool": tool_name(name), "arguments": arguments, "result": reply["content"]})
    return segs


def test_sft_conversations_are_the_built_rows(run_dir, tok, capsys):
    capsys.readouterr()
    assert main(["export", str(run_dir), "--format", "trl-sft"]) == 0
    folder = run_dir / "export/trl-sft"
    assert capsys.readouterr().out.strip().splitlines()[-1].endswith(f"0 rows skipped -> {folder}")
    written, loaded, on_disk = load_both(folder)
    assert on_disk == written and [without_nulls(r) for r in loaded] == written
    rows = built_rows(run_dir)
    assert len(written) == len(rows) and sum(r["augmented"] for r in rows) > 0
    template = (folder / "chat_template.jinja").read_text()
    header = "Tools you may call:\n" + "\n".join(json.dumps(t, ensure_ascii=False) for t in written[0]["tools"])
    for record, row in zip(written, rows):
        segs = check_conversation(record)
        assert inline_text(segs, STYLE, " ") == row["text"]  # the conversation is the built row, calls and all
        assert [t["function"]["name"] for t in record["tools"]] == ["Calculator", "QA"]  # tools.enabled, every row
        assert any(s["type"] == "call" for s in segs) == row["augmented"]
        text = tok.apply_chat_template(record["messages"], tools=record["tools"], chat_template=template,
                                       tokenize=False)
        assert text == f"{header}\n\n{row['text']}"  # the template the folder carries writes the built row


def test_sft_one_conversation_exactly(tmp_path):
    """A call first (no text before it), two calls, and a document without calls."""
    cfg = built_run_with_two_calls(tmp_path / "run")
    counts = export_trl(cfg, "trl-sft", tmp_path / "sft")
    assert (counts["conversations"], counts["with_calls"], counts["calls"]) == (2, 1, 2)
    rows = read_jsonl(tmp_path / "sft/data.jsonl")
    assert rows[0]["messages"] == [
        {"role": "user", "content": USER_TURN},
        {"role": "assistant", "content": "", "tool_calls": [
            {"type": "function", "function": {"name": "Calendar", "arguments": {}}}]},
        {"role": "tool", "name": "Calendar", "content": "Today is Thursday, March 4, 2021."},
        {"role": "assistant", "content": "She paid 18 + 12 * 3 = ", "tool_calls": [
            {"type": "function", "function": {"name": "Calculator", "arguments": {"input": "18 + 12 * 3"}}}]},
        {"role": "tool", "name": "Calculator", "content": "54"},
        {"role": "assistant", "content": "54 dollars."}]
    assert rows[1]["messages"] == [{"role": "user", "content": USER_TURN},
                                   {"role": "assistant", "content": "Nothing to compute."}]
    assert [t["function"]["name"] for t in rows[1]["tools"]] == PipelineConfig().tools.enabled and \
        rows[0]["tools"] == rows[1]["tools"]


TEMPLATE = (  # a small chat template that writes every field a TRL conversation with tools has
    "{% if tools %}<tools>{% for t in tools %}{{ t | tojson }}\n{% endfor %}</tools>{% endif %}"
    "{% for m in messages %}<|{{ m.role }}|>{% if m.role == 'tool' %}[{{ m.name }}]{% endif %}{{ m.content }}"
    "{% for c in m.tool_calls or [] %}<call>{{ c.function | tojson }}</call>{% endfor %}<|end|>{% endfor %}")


def test_sft_rows_through_a_chat_template(run_dir, tiny_model_dir, tmp_path):
    """Each row of the saved data set, rendered by apply_chat_template(messages, tools=...), reads back as itself."""
    from datasets import load_from_disk
    from transformers import AutoTokenizer

    export_trl(PipelineConfig(run_dir=str(run_dir)), "trl-sft", tmp_path / "sft")
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    tok.chat_template = TEMPLATE
    calls = 0
    for row in load_from_disk(str(tmp_path / "sft/dataset")):
        text = tok.apply_chat_template(row["messages"], tools=row["tools"], tokenize=False)
        tools, _, body = text.removeprefix("<tools>").partition("</tools>")
        assert [json.loads(line) for line in tools.splitlines()] == row["tools"]
        back: list[dict] = []
        for role, content in re.findall(r"<\|(\w+)\|>(.*?)<\|end\|>", body, re.S):
            tool_calls = [{"type": "function", "function": json.loads(c)}
                          for c in re.findall(r"<call>(.*?)</call>", content)]
            content = re.sub(r"<call>.*?</call>", "", content)
            if role == "tool":
                name, content = content[1:].split("]", 1)
                back.append({"role": role, "name": name, "content": content})
            else:
                back.append({"role": role, "content": content, **({"tool_calls": tool_calls} if tool_calls else {})})
            calls += len(tool_calls)
        assert back == row["messages"]
    assert calls > 0


# -- trl-dpo ---------------------------------------------------------------------------------------------------
def check_pair(pair: dict, text: str, at_position: list[dict]) -> None:
    """``pair`` against the filter's candidates at its position: prompt + chosen is the document with the kept call of
    the largest margin inserted there, prompt + rejected with a rejected candidate (or none) inserted there."""
    def inserted(r: dict | None) -> str:
        return text if r is None else insert_calls(text, [(r["char_start"], STYLE.render(r["tool"], r["input"],
                                                                                         r["result"]))], " ")

    at = pair["char_start"]
    assert pair["prompt"] == text[:at] and set(pair) >= {"prompt", "chosen", "rejected"}
    kept = [r for r in at_position if r["kept"]]
    best = max(margin(r) for r in kept)
    chosen = next(r for r in kept if margin(r) == best)
    assert pair["prompt"] + pair["chosen"] == inserted(chosen) != text
    assert (pair["tool"], pair["chosen_margin"], pair["position"]) == (
        chosen["tool"], round(best, 6), chosen["position"])
    if pair["kind"] == NO_CALL:
        assert pair["prompt"] + pair["rejected"] == text and pair["rejected_tool"] is pair["rejected_margin"] is None
        assert not any(not r["kept"] and r["result"] is not None for r in at_position)
    else:
        assert pair["kind"] == REJECTED_CALL
        rejected = [r for r in at_position if not r["kept"] and pair["prompt"] + pair["rejected"] == inserted(r)]
        assert rejected and (rejected[0]["tool"], round(margin(rejected[0]), 6)) == (
            pair["rejected_tool"], pair["rejected_margin"])


def test_dpo_pairs_of_the_filters_judgements(run_dir, capsys):
    capsys.readouterr()
    assert main(["export", str(run_dir), "--format", "trl-dpo"]) == 0
    folder = run_dir / "export/trl-dpo"
    summary = capsys.readouterr().out.strip().splitlines()[-1]
    written, loaded, on_disk = load_both(folder)
    assert on_disk == written and [without_nulls(r) for r in loaded] == [without_nulls(r) for r in written]
    docs = read_documents(run_dir)
    candidates = shard_records(run_dir, "filter")
    by_position: dict[tuple, list[dict]] = {}
    for r in candidates:
        by_position.setdefault((r["doc_id"], r["char_start"]), []).append(r)
    kinds = {REJECTED_CALL: 0, NO_CALL: 0}
    for pair in written:
        check_pair(pair, docs[pair["doc_id"]]["text"], by_position[(pair["doc_id"], pair["char_start"])])
        kinds[pair["kind"]] += 1
    # Every position with a kept call gives pairs, one per rejected candidate with a result, or one without a call.
    with_kept = {k for k, rs in by_position.items() if any(r["kept"] for r in rs)}
    assert {(p["doc_id"], p["char_start"]) for p in written} == with_kept
    assert kinds[REJECTED_CALL] > 0 and kinds[NO_CALL] > 0
    assert kinds[REJECTED_CALL] == sum(not r["kept"] and r["result"] is not None
                                       for k in with_kept for r in by_position[k])
    assert re.fullmatch(rf"export: {len(candidates)} filter candidates; {len(with_kept)} positions with a kept call "
                        rf"give {len(written)} pairs \({kinds[REJECTED_CALL]} vs a rejected call, {kinds[NO_CALL]} vs "
                        rf"no call\); chosen calls: .*; \d+ candidates in no pair \(.*\) -> {re.escape(str(folder))}",
                        summary), summary


def write_judged_run(run_dir: Path, docs: list[dict], records: list[dict]) -> None:
    """Documents and a finished filter stage of ``records`` in one shard."""
    write_documents(run_dir, docs)
    stage = StageFolder(run_dir, "filter")
    stage.begin("x")
    stage.write_shard(0, records)
    stage.finish("x", 0, {"per_tool": {}})


def test_dpo_pairing_rules_and_what_is_left_out(tmp_path, capsys):
    docs = [{"doc_id": "d1", "text": "She paid 18 + 12 * 3 = 54 dollars.", "date": None},
            {"doc_id": "d2", "text": "Lake Orun has 4 islands.", "date": None}]
    failed = {**filter_record("d2", "Calculator", "4 +", "", 14, 0, 0, kept=False), "result": None,
              "error": {"code": "bad_input", "message": "no", "hint": ""}, "call_text": None, "loss_minus": None,
              "loss_plus": None}
    write_judged_run(tmp_path / "run", docs, [
        filter_record("d1", "Calculator", "18 + 12 * 3", "54", 23, 2.0, 0.5),  # chosen: margin 1.5
        filter_record("d1", "Calculator", "18 + 12", "30", 23, 2.0, 1.0),  # kept, margin 1.0: not chosen
        filter_record("d1", "Calculator", "12 * 3", "36", 23, 2.0, 2.4, kept=False),  # a pair
        filter_record("d1", "QA", "What did she pay?", "54 dollars", 23, 2.0, 1.9, kept=False),  # a pair
        filter_record("d1", "Calculator", "18 + 12 * 3", "54", 23, 2.0, 1.9, kept=False),  # written as the chosen
        filter_record("d1", "Calculator", "1 + 1", "2", 26, 2.0, 2.5, kept=False),  # no kept call there
        filter_record("d2", "QA", "How many islands has Lake Orun?", "4", 14, 1.0, 0.25),  # chosen, vs no call
        failed,  # rejected with no result: no text to show
        filter_record("d9", "QA", "Where?", "Vell", 0, 2.0, 0.5),  # not a document of the run
        filter_record("d2", "QA", "Why?", "So", 99, 2.0, 0.5)])  # past the end of d2
    cfg = PipelineConfig(run_dir=str(tmp_path / "run"))
    counts = export_trl(cfg, "trl-dpo", tmp_path / "dpo")
    rows = read_jsonl(tmp_path / "dpo/data.jsonl")
    chosen = {"prompt": "She paid 18 + 12 * 3 = ", "chosen": "[Calculator(18 + 12 * 3) → 54] 54 dollars."}
    meta = {"doc_id": "d1", "position": 0, "char_start": 23, "tool": "Calculator", "chosen_margin": 1.5}
    assert rows == [
        {**chosen, "rejected": "[Calculator(12 * 3) → 36] 54 dollars.", "kind": REJECTED_CALL, **meta,
         "rejected_tool": "Calculator", "rejected_margin": -0.4},
        {**chosen, "rejected": "[QA(What did she pay?) → 54 dollars] 54 dollars.", "kind": REJECTED_CALL, **meta,
         "rejected_tool": "QA", "rejected_margin": 0.1},
        {"prompt": "Lake Orun has ", "chosen": "[QA(How many islands has Lake Orun?) → 4] 4 islands.",
         "rejected": "4 islands.", "kind": NO_CALL, "doc_id": "d2", "position": 0, "char_start": 14, "tool": "QA",
         "chosen_margin": 0.75, "rejected_tool": None, "rejected_margin": None}]
    unpaired = {"kept, smaller margin than the chosen call": 1, "rejected, written as the chosen call": 1,
                "no kept call at its position": 1, "rejected without a result": 1, "unknown document": 1,
                "position outside the text": 1}
    assert counts["unpaired"] == unpaired and counts["candidates"] == 10 == counts["positions"] + 2 + 6
    assert counts["pairs_by_kind"] == {REJECTED_CALL: 2, NO_CALL: 1} and counts["per_tool"] == {"Calculator": 1,
                                                                                                 "QA": 1}
    assert capsys.readouterr().out.strip().splitlines()[-1] == (
        "export: 10 filter candidates; 2 positions with a kept call give 3 pairs (2 vs a rejected call, 1 vs no "
        "call); chosen calls: Calculator 1, QA 1; 6 candidates in no pair (kept, smaller margin than the chosen "
        "call 1, rejected, written as the chosen call 1, no kept call at its position 1, rejected without a "
        f"result 1, unknown document 1, position outside the text 1) -> {tmp_path / 'dpo'}")


def test_dpo_in_the_runs_call_style(tmp_path):
    """Calls are written in the call style and separator the run saved (RUN_DIR/config.yaml)."""
    from toolformer.pipeline import save_resolved_config

    docs = [{"doc_id": "d2", "text": "Lake Orun has 4 islands.", "date": None}]
    write_judged_run(tmp_path / "run", docs, [
        filter_record("d2", "QA", "How many islands has Lake Orun?", "4", 14, 1.0, 0.25, style="special")])
    saved = PipelineConfig(run_dir=str(tmp_path / "run"))
    saved.calls.style, saved.calls.separator = "special", "\n"
    save_resolved_config(saved)
    export_trl(PipelineConfig(run_dir=str(tmp_path / "run")), "trl-dpo")
    (row,) = read_jsonl(tmp_path / "run/export/trl-dpo/data.jsonl")
    assert row["chosen"] == "<API>QA(How many islands has Lake Orun?) → 4</API>\n4 islands."


# -- the command -----------------------------------------------------------------------------------------------
def test_output_folder_is_replaced_or_refused(tmp_path, capsys):
    docs = [{"doc_id": "d2", "text": "Lake Orun has 4 islands.", "date": None}]
    run = tmp_path / "run"
    write_judged_run(run, docs, [filter_record("d2", "QA", "How many islands has Lake Orun?", "4", 14, 1.0, 0.25)])
    out = run / "export/trl-dpo"
    for _ in range(2):  # a second export replaces the first, leaving nothing else behind
        assert main(["export", str(run), "--format", "trl-dpo"]) == 0
        assert sorted(p.name for p in out.iterdir()) == ["data.jsonl", "dataset"]
        assert sorted(p.name for p in out.parent.iterdir()) == ["trl-dpo"]

    def refused(*args: str) -> str:
        capsys.readouterr()
        assert main(["export", str(run), *args]) == 2
        return capsys.readouterr().err

    (tmp_path / "notes").mkdir()
    (tmp_path / "notes/mine.txt").write_text("keep me")
    assert "holds other files (mine.txt)" in refused("--format", "trl-dpo", "--out", str(tmp_path / "notes"))
    assert (tmp_path / "notes/mine.txt").read_text() == "keep me"
    assert "holds other files" in refused("--format", "trl-dpo", "--out", str(run))
    assert "is a file; name a folder" in refused("--format", "trl-dpo", "--out", str(tmp_path / "notes/mine.txt"))
    assert "which export reads" in refused("--format", "trl-dpo", "--out", str(run / "filter/pairs"))
    assert "--kept-only" in refused("--format", "trl-dpo", "--kept-only")
    assert "no finished build" in refused("--format", "trl-sft")
    unfiltered = tmp_path / "unfiltered"
    write_documents(unfiltered, docs)
    capsys.readouterr()
    assert main(["export", str(unfiltered), "--format", "trl-dpo"]) == 2
    assert "stage 'filter' has not finished" in capsys.readouterr().err and not (unfiltered / "export").exists()
    assert TRL_EXPORT_FORMATS == FORMATS
