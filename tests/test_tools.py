import json
import time

import pytest
from helpers import shard_lines, write_jsonl

from toolformer.config.load import load_config
from toolformer.config.schema import PipelineConfig
from toolformer.config.tools import ToolsConfig
from toolformer.tools import REGISTRY, Tool, ToolError, build_tool, render_prompt
from toolformer.tools.calls import STYLES
from toolformer.tools.sandbox import Sandbox


def test_registry_tools_describe_themselves():
    assert set(REGISTRY) == {"Calculator", "Calendar", "WikiSearch", "QA", "MT"}
    for tool in REGISTRY.values():
        assert tool.name and tool.description and tool.input_description
        assert "{text}" in tool.prompt and f"[{tool.name}(" in tool.prompt
        assert isinstance(tool.read_only, bool)


def test_render_prompt_special_style():
    tool = REGISTRY["Calculator"]
    p = render_prompt(tool, "X", STYLES["special"])
    assert "<API>Calculator(340 + 275)</API>" in p and p.rstrip().endswith("Input: X\nOutput:")


def test_calendar():
    cal = build_tool("Calendar")
    assert cal.run("", "2023-01-30") == "Today is Monday, January 30, 2023."
    with pytest.raises(ToolError) as e:
        cal.run("", None)
    assert e.value.code == "no_date"


def _tools_cfg(tmp_path, repo_root):
    import shutil

    for name in ("collection.jsonl", "knowledge.jsonl"):
        shutil.copy(repo_root / "data" / name, tmp_path / name)
    return ToolsConfig(collection=str(tmp_path / "collection.jsonl"), knowledge=str(tmp_path / "knowledge.jsonl"))


def test_wikisearch_finds_document_and_saves_index(tmp_path, repo_root):
    cfg = _tools_cfg(tmp_path, repo_root)
    ws = build_tool("WikiSearch", cfg)
    out = ws.run("Kessford")
    assert out.startswith("Kessford > Kessford is a village")
    assert (tmp_path / "collection.jsonl.bm25" / "stamp.txt").exists()
    # A second instance loads the saved index and answers the same.
    assert build_tool("WikiSearch", cfg).run("Kessford") == out
    assert len(out) <= cfg.snippet_chars + len("Kessford > ") + 1
    with pytest.raises(ToolError):
        ws.run("zzzz qqqq")


def test_qa_answers_from_knowledge(tmp_path, repo_root):
    qa = build_tool("QA", _tools_cfg(tmp_path, repo_root))
    assert qa.run("When was Kessford founded?") == "1550"
    assert qa.run("What is the population of Brightwater?") == "96,500"
    assert qa.run("Where was Tobias Renwick born?") == "Brightwater"
    with pytest.raises(ToolError) as e:
        qa.run("Who painted the Mona Lisa?")
    assert e.value.code == "not_found"


def test_mt_errors_without_model(tmp_path):
    with pytest.raises(ToolError) as e:
        build_tool("MT").run("hola")
    assert e.value.code == "no_model"
    with pytest.raises(ToolError) as e:
        build_tool("MT", ToolsConfig(mt_model=str(tmp_path / "missing"))).run("hola")
    assert "does not exist" in e.value.message


def test_mt_with_tiny_seq2seq_built_in_code(tmp_path):
    from transformers import T5Config, T5ForConditionalGeneration

    from toolformer.lm.tokenizer import train_tokenizer

    tok = train_tokenizer(["hola mundo", "bonjour le monde", "hello world"], vocab_size=120)
    model = T5ForConditionalGeneration(T5Config(
        vocab_size=len(tok), d_model=16, d_ff=32, d_kv=8, num_layers=1, num_heads=2,
        pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id, decoder_start_token_id=tok.pad_token_id,
    ))
    model.save_pretrained(tmp_path / "mt")
    tok.save_pretrained(tmp_path / "mt")
    mt = build_tool("MT", ToolsConfig(mt_model=str(tmp_path / "mt")))
    mt.max_new_tokens = 5
    out = Sandbox({"MT": mt}).run("MT", "hola mundo")
    # Random weights: any text, but a real generate ran (or a clean empty-result error).
    assert out.ok or out.error["code"] == "empty_result"


class Sleeper(Tool):
    name = "Sleeper"

    def run(self, tool_input, date=None):
        time.sleep(3600)


class Raiser(Tool):
    name = "Raiser"

    def run(self, tool_input, date=None):
        raise KeyError("boom")


class Flood(Tool):
    name = "Flood"

    def run(self, tool_input, date=None):
        return "x" * 5_000_000 + "]"


def test_sandbox_contains_hang_exception_and_flood():
    sb = Sandbox({t.name: t() for t in (Sleeper, Raiser, Flood)}, timeout_s=0.3, max_result_chars=50,
                 forbidden_markers=["]"])
    t0 = time.monotonic()
    hang, boom, flood, unknown = sb.run_many(
        [("Sleeper", "", None), ("Raiser", "", None), ("Flood", "", None), ("Nope", "", None)]
    )
    assert time.monotonic() - t0 < 3
    assert hang.error["code"] == "timeout"
    assert boom.error["code"] == "exception" and "KeyError" in boom.error["message"]
    assert len(flood.result) == 51 and "]" not in flood.result
    assert unknown.error["code"] == "unknown_tool"


def test_sandbox_cache_runs_identical_calls_once():
    calls = []

    class Counter(Tool):
        name = "Counter"

        def run(self, tool_input, date=None):
            calls.append(tool_input)
            return tool_input.upper()

    sb = Sandbox({"Counter": Counter()})
    outs = sb.run_many([("Counter", "a", None), ("Counter", "a", "2020-01-01"), ("Counter", "b", None)])
    assert [o.result for o in outs] == ["A", "A", "B"]  # date ignored: not a date tool
    sb.run("Counter", "a")
    assert sorted(calls) == ["a", "b"] and sb.calls_executed == 2


def test_sandbox_per_tool_limits_and_order():
    import threading

    lock = threading.Lock()
    in_flight: dict[str, int] = {"Slow": 0, "Fast": 0}
    most: dict[str, int] = {"Slow": 0, "Fast": 0}

    def tracked(name: str, secs: float):
        class Tracked(Tool):
            def run(self, tool_input, date=None):
                with lock:
                    in_flight[name] += 1
                    most[name] = max(most[name], in_flight[name])
                time.sleep(secs * (1 + int(tool_input) % 3))  # finish out of order
                with lock:
                    in_flight[name] -= 1
                return f"{name} {tool_input}"

        Tracked.name = name
        return Tracked()

    sb = Sandbox({"Slow": tracked("Slow", 0.03), "Fast": tracked("Fast", 0.01), "Sleeper": Sleeper()},
                 timeout_s=1.0, concurrency=4, per_tool={"Slow": 2}, cache=False)
    calls = [("Sleeper", "0", None)] + [(t, str(i), None) for i in range(12) for t in ("Slow", "Fast")]
    t0 = time.monotonic()
    outs = sb.run_many(calls)
    assert time.monotonic() - t0 < 3  # the hung call holds no slot past its timeout
    assert outs[0].error["code"] == "timeout"
    assert [o.result for o in outs[1:]] == [f"{t} {i}" for t, i, _ in calls[1:]]  # the order of the calls
    assert most == {"Slow": 2, "Fast": 4} and sb.calls_executed == 25


@pytest.mark.parametrize("style", ["plain", "plain_ascii", "special"])
def test_built_sandbox_removes_every_call_marker_from_results(style):
    """One marker policy (execute, evaluate, generate, `toolformer tool`): no call marker survives in a result."""
    from toolformer.config.schema import PipelineConfig
    from toolformer.tools.sandbox import build_sandbox, call_markers

    class Echo(Tool):
        name = "Echo"

        def run(self, tool_input, date=None):
            return tool_input

    cfg = PipelineConfig()
    cfg.calls.style = style
    sb = build_sandbox(cfg, {"Echo": Echo()})
    markers = call_markers(STYLES[style])
    out = sb.run("Echo", "a [b] c → d -> e <API> f </API> g")
    assert out.ok and not any(m in out.result for m in markers)
    assert out.result == ("a [b] c d e f g" if style == "special" else "a b c d e <API> f </API> g")


# -- schemas ---------------------------------------------------------------------------------
def test_every_tool_declares_a_valid_schema_that_its_example_satisfies():
    from jsonschema import Draft202012Validator

    from toolformer.tools import REGISTRY, build_tool

    for name in REGISTRY:
        tool = build_tool(name)
        Draft202012Validator.check_schema(tool.input_schema)
        validator = Draft202012Validator(tool.input_schema)
        assert validator.is_valid(tool.arguments(tool.example)), name
        assert tool.description and (tool.example or not tool.takes_input), name
    calendar = build_tool("Calendar")
    assert calendar.input_schema["properties"] == {} and calendar.arguments("ignored") == {}


def test_arguments_are_validated_before_a_call_with_a_hint():
    ran = []

    class Units(Tool):
        name = "Units"
        description = "converts a length"
        input_description = "a number of metres"
        example = "12"

        @property
        def input_schema(self):
            return {"type": "object", "properties": {"input": {"type": "string", "pattern": "^[0-9]+$"}},
                    "required": ["input"], "additionalProperties": False}

        def run(self, tool_input, date=None):
            ran.append(tool_input)
            return f"{int(tool_input) * 100} cm"

    sb = Sandbox({"Units": Units()})
    bad, good = sb.run_many([("Units", "twelve", None), ("Units", "12", None)])
    assert bad.error["code"] == "invalid_arguments" and "does not match" in bad.error["message"]
    assert bad.error["hint"] == "Units takes a number of metres, e.g. [Units(12)]"
    assert good.result == "1200 cm" and ran == ["12"]  # the invalid call never reached the tool
    syntax = Sandbox({"Calculator": build_tool("Calculator")}).run("Calculator", "3 +* 4")
    assert syntax.error["code"] == "syntax" and "[Calculator(400 / 1400)]" in syntax.error["hint"]


@pytest.mark.parametrize("fmt", ["json", "openai", "anthropic", "mcp"])
def test_tools_list_in_each_wire_format(fmt, capsys):
    from toolformer.cli.app import main

    assert main(["tools", "list", "--format", fmt, "--all"]) == 0
    out = json.loads(capsys.readouterr().out)
    if fmt == "openai":
        assert all(t["type"] == "function" and set(t["function"]) == {"name", "description", "parameters"}
                   for t in out)
        names = [t["function"]["name"] for t in out]
    elif fmt == "anthropic":
        assert all(set(t) == {"name", "description", "input_schema"} for t in out)
        names = [t["name"] for t in out]
    elif fmt == "mcp":
        assert all(set(t) == {"name", "description", "inputSchema", "annotations"} for t in out["tools"])
        assert all(t["annotations"]["readOnlyHint"] is True for t in out["tools"])
        names = [t["name"] for t in out["tools"]]
    else:
        assert all(set(t) == {"name", "description", "input_schema", "read_only"} for t in out)
        names = [t["name"] for t in out]
    assert sorted(names) == ["Calculator", "Calendar", "MT", "QA", "WikiSearch"]


def test_hostile_tools_contained_while_the_execute_stage_finishes(tiny_model_dir, tmp_path, monkeypatch, capsys):
    class Hang(Tool):
        name = "Hang"

        def run(self, tool_input, date=None):
            time.sleep(3600)

    class Crash(Tool):
        name = "Crash"

        def run(self, tool_input, date=None):
            raise MemoryError("pretend")

    class Megabytes(Tool):
        name = "Megabytes"

        def run(self, tool_input, date=None):
            return "y" * 3_000_000

    for t in (Hang, Crash, Megabytes):
        monkeypatch.setitem(REGISTRY, t.name, t)
    run_dir = tmp_path / "run"
    (run_dir / "sample").mkdir(parents=True)
    docs = [{"doc_id": "a", "text": "x y z", "date": None}]
    write_jsonl(run_dir / "sample" / "documents.jsonl", docs)
    recs = [{"doc_id": "a", "tool": t, "input": str(i), "position": 0, "char_start": 0, "p_i": None, "source": "rules"}
            for i, t in enumerate(["Hang", "Crash", "Megabytes", "Calculator"])]
    write_jsonl(run_dir / "sample" / "shard-00000.jsonl", recs)
    cfg = load_config(PipelineConfig, None, [f"run_dir={run_dir}", f"model.path={tiny_model_dir}",
                                             "tools.enabled=[Hang, Crash, Megabytes, Calculator]",
                                             "tools.timeout_s=0.5", "tools.max_result_chars=100"])
    from toolformer.rundir.folder import StageFolder
    from toolformer.stages import execute, stage_hash

    StageFolder(run_dir, "sample").finish(stage_hash(cfg, "sample"), 0, {})
    t0 = time.perf_counter()
    execute.run_stage(cfg)
    assert time.perf_counter() - t0 < 30
    out = {json.loads(line)["tool"]: json.loads(line) for line in shard_lines(run_dir, "execute")}
    assert out["Hang"]["error"]["code"] == "timeout"
    assert out["Crash"]["error"]["code"] == "exception" and "MemoryError" in out["Crash"]["error"]["message"]
    assert len(out["Megabytes"]["result"]) == 101
    assert out["Calculator"]["result"] == "3"
    assert "execute: 2 of 4 calls returned a result" in capsys.readouterr().out


def test_tool_with_side_effects_refused_unless_allowed(tiny_model_dir, tmp_path, monkeypatch):
    class Mailer(Tool):
        name = "Mailer"
        read_only = False

        def run(self, tool_input, date=None):
            return "sent"

    monkeypatch.setitem(REGISTRY, "Mailer", Mailer)
    from toolformer.stages.sample import check_tools

    cfg = load_config(PipelineConfig, None, ["tools.enabled=[Calculator, Mailer]"])
    with pytest.raises(ValueError, match="Mailer is not read-only.*tools.allow_side_effects=true"):
        check_tools(cfg)
    cfg.tools.allow_side_effects = True
    assert check_tools(cfg) == ["Calculator", "Mailer"]


def test_sandbox_call_checks_the_argument_object_before_its_text():
    from toolformer.tools import build_tool

    sb = Sandbox({"Calculator": build_tool("Calculator"), "Calendar": build_tool("Calendar")})
    assert sb.call("Calculator", {"input": "2 + 2"}).result == "4"
    assert sb.call("Calculator", {"input": 4}).error["code"] == "invalid_arguments"  # not run as "4"
    assert sb.call("Calculator", {"foo": "2 + 2"}).error["code"] == "invalid_arguments"  # not run as ""
    assert sb.call("Calculator", ["2 + 2"]).error["code"] == "invalid_arguments"
    assert sb.call("Calendar", {}, "2024-02-29").ok
    assert sb.call("Nope", {"input": "x"}).error["code"] == "unknown_tool"
