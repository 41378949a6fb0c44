"""Tools answer right or refuse: the calculator refuses what it cannot read exactly, ``mcp-serve`` refuses
arguments its tools' schemas refuse and inputs over the limits, and a tool's data file that is a device, a FIFO or
too large fails at once, without a thread left reading it."""

import json
import os
import re
import threading
import time

import pytest
from helpers import mcp_serve_params

from toolformer.cli.app import main
from toolformer.tools import ToolError, calculate
from toolformer.tools import wikisearch as wikisearch_module
from toolformer.tools.base import Tool, uninterrupted
from toolformer.tools.calculator import Calculator
from toolformer.tools.qa import QA
from toolformer.tools.sandbox import Sandbox
from toolformer.tools.wikisearch import WikiSearch


def rss_mb() -> float:
    """This process's resident memory (VmRSS), in MB."""
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:")) / 1024


def tool_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("tool-")]


# -- the calculator ----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("expr", ["5²", "2³ * 10", "0x10"])
def test_the_reported_inputs_are_refused_by_the_cli(expr, capsys):
    assert main(["tool", "Calculator", expr, "--json"]) == 1
    out = json.loads(capsys.readouterr().out)
    assert out["result"] is None and out["error"]["code"] == "not_arithmetic"
    assert "Calculator(" in out["error"]["hint"]


@pytest.mark.parametrize("expr, char", [
    ("5²", "²"), ("2³ * 10", "³"), ("10⁻¹", "⁻"), ("H₂ + 1", "H"), ("3₂ + 1", "₂"),
    ("½ + 1", "½"), ("١٢٣ + ٤", "١"), ("۵ + 1", "۵"), ("५ + 1", "५"), ("৩ * 2", "৩"), ("๓ * 2", "๓"),
    ("𝟓 + 1", "𝟓"), ("①+1", "①"), ("Ⅻ - 2", "Ⅻ"), ("3٫5 + 1", "٫"), ("1e3", "e"), ("1_000", "_"),
])
def test_characters_it_does_not_read_are_named_in_the_refusal(expr, char):
    with pytest.raises(ToolError) as e:
        calculate(expr)
    assert e.value.code == "not_arithmetic"
    assert repr(char) in e.value.message


@pytest.mark.parametrize("expr", ["0x10", "0X10", "0x1F", "2x3", "10x10", "x 3", "3 x", "2 xx 3"])
def test_an_x_glued_to_a_number_is_not_a_product(expr):
    with pytest.raises(ToolError) as e:
        calculate(expr)
    assert e.value.code == "not_arithmetic"


@pytest.mark.parametrize("expr, expected", [
    ("2 x 3", "6"), ("2 X 3", "6"), ("4 × 2.5", "10"), ("2·3", "6"), ("9 ∕ 3", "3"), ("5 – 7", "-2"),
    ("１２ + ３", "15"), ("１，２００ － ３００", "900"), ("1\u00a0+\u00a02", "3"), ("1,250 + 3 * 4", "1262"),
    ("12.50 * 4", "50"), ("1.", "1"), (".5 * 3", "1.5"),
    ("9999999999999.995 * 1", "10000000000000"),  # read as written: a float would give 9999999999999.99
])
def test_the_forms_it_reads_keep_their_values(expr, expected):
    assert calculate(expr) == expected


def test_every_call_in_the_calculator_prompt_computes_the_number_after_it():
    pairs = re.findall(r"\[Calculator\(([^\]]*)\)\] ([0-9][0-9.,]*[0-9])", Calculator.prompt)
    assert len(pairs) == 5
    for expr, number in pairs:
        assert calculate(expr) == number.replace(",", "")


# -- mcp-serve ---------------------------------------------------------------------------------------------------------
def test_mcp_serve_refuses_arguments_its_schemas_refuse_and_inputs_over_the_limits():
    pytest.importorskip("mcp")
    import anyio
    from mcp.client.session import ClientSession
    from mcp.client.stdio import stdio_client

    calls = [
        ("Calculator", {"input": 5}), ("Calculator", {"foo": "bar"}), ("Calculator", {}),
        ("Calculator", {"input": "1 + 1", "extra": True}), ("Calendar", {"input": "today"}),
        ("WikiSearch", {"input": "Danube " * 150_000}), ("QA", {"input": "Where? " * 40}),
        ("Calculator", {"input": "5²"}), ("Calculator", {"input": "2 x 3"}),
    ]

    async def session() -> list:
        async with stdio_client(mcp_serve_params()) as (read, write), ClientSession(read, write) as s:
            await s.initialize()
            return [await s.call_tool(name, args) for name, args in calls]

    (number, unknown_key, no_input, extra, calendar, huge, long_question, square, product) = anyio.run(session)
    for bad in (number, unknown_key, no_input, extra, calendar):
        assert bad.is_error and bad.structured_content["code"] == "invalid_arguments", bad
        assert json.loads(bad.content[0].text) == bad.structured_content
    assert "input: 5 is not of type 'string'" in number.structured_content["message"]
    assert "'input' is a required property" in unknown_key.structured_content["message"]
    assert "'foo'" in unknown_key.structured_content["message"]
    assert "'input' is a required property" in no_input.structured_content["message"]
    assert "'extra'" in extra.structured_content["message"]
    assert "Calculator(400 / 1400)" in number.structured_content["hint"]
    for long in (huge, long_question):  # tools.max_input_chars (200) holds for every tool, not just Calculator
        assert long.is_error and long.structured_content["code"] == "too_long"
        assert "tools.max_input_chars" in long.structured_content["message"]
    assert square.is_error and square.structured_content["code"] == "not_arithmetic"
    assert not product.is_error and product.content[0].text == "6"  # the server still serves after the refusals


def test_sandbox_call_checks_the_argument_object_before_its_text():
    from toolformer.tools import build_tool

    sb = Sandbox({"Calculator": build_tool("Calculator"), "Calendar": build_tool("Calendar")})
    assert sb.call("Calculator", {"input": "2 + 2"}).result == "4"
    assert sb.call("Calculator", {"input": 4}).error["code"] == "invalid_arguments"  # not run as "4"
    assert sb.call("Calculator", {"foo": "2 + 2"}).error["code"] == "invalid_arguments"  # not run as ""
    assert sb.call("Calculator", ["2 + 2"]).error["code"] == "invalid_arguments"
    assert sb.call("Calendar", {}, "2024-02-29").ok
    assert sb.call("Nope", {"input": "x"}).error["code"] == "unknown_tool"


# -- a tool's data file -----------------------------------------------------------------------------------------------
def _call_qa_at(knowledge: str, capsys) -> tuple[int, dict, float, float]:
    """``toolformer tool QA ... tools.knowledge=<knowledge>``: exit status, output, seconds, RSS growth (MB)."""
    before, t0 = rss_mb(), time.monotonic()
    code = main(["tool", "QA", "Where does the Danube end?", "--json", f"tools.knowledge={knowledge}"])
    elapsed = time.monotonic() - t0
    time.sleep(1.0)  # a thread left reading would keep growing meanwhile
    return code, json.loads(capsys.readouterr().out), elapsed, rss_mb() - before


def test_qa_pointed_at_dev_zero_fails_fast_without_growing(capsys):
    code, out, elapsed, growth = _call_qa_at("/dev/zero", capsys)
    assert code == 1 and out["error"]["code"] == "bad_data"
    assert "/dev/zero" in out["error"]["message"] and "not a regular file" in out["error"]["message"]
    assert "tools.knowledge" in out["error"]["hint"]
    assert elapsed < 4  # the tool's timeout is 5 s: it is not what ended the call
    assert growth < 200, f"RSS grew by {growth:.0f} MB"
    assert "tool-QA" not in tool_threads()


def test_qa_pointed_at_a_fifo_fails_fast_even_with_a_writer(tmp_path, capsys):
    fifo = tmp_path / "knowledge.jsonl"
    os.mkfifo(fifo)
    code, out, elapsed, growth = _call_qa_at(str(fifo), capsys)  # no writer: opening it would wait forever
    assert code == 1 and out["error"]["code"] == "bad_data" and str(fifo) in out["error"]["message"]
    assert elapsed < 4 and growth < 200 and "tool-QA" not in tool_threads()

    stop = threading.Event()

    def write_forever() -> None:  # a writer that never stops: reading it would never end
        try:
            with open(fifo, "w") as f:
                while not stop.is_set():
                    f.write('{"subject": "x", "relation": "y", "object": "z"}\n' * 1000)
        except OSError:  # the reader went away
            pass

    writer = threading.Thread(target=write_forever, daemon=True)
    writer.start()
    try:
        code, out, elapsed, growth = _call_qa_at(str(fifo), capsys)
    finally:
        stop.set()
        os.close(os.open(fifo, os.O_RDONLY | os.O_NONBLOCK))  # lets a writer still waiting to open go
        writer.join(5)
    assert code == 1 and out["error"]["code"] == "bad_data"
    assert elapsed < 4 and growth < 200


def test_a_data_file_over_the_cap_or_not_a_file_is_refused_naming_it(tmp_path, monkeypatch):
    collection = tmp_path / "collection.jsonl"
    collection.write_text("".join(json.dumps({"title": f"T{i}", "text": "Danube " * 10}) + "\n" for i in range(50)))
    assert WikiSearch(collection).run("Danube").startswith("T")
    monkeypatch.setattr(wikisearch_module, "MAX_DATA_BYTES", collection.stat().st_size - 1)
    for tool in (WikiSearch(collection), QA(collection), WikiSearch(tmp_path)):
        with pytest.raises(ToolError) as e:
            tool.run("Danube")
        assert e.value.code == "bad_data" and str(e.value.message).startswith(str(tool.path))
    with pytest.raises(ToolError) as e:
        WikiSearch(tmp_path / "absent.jsonl").run("Danube")
    assert e.value.code == "missing_data" and "tools.collection" in e.value.hint


def test_a_bad_line_is_named_by_file_and_line(tmp_path):
    knowledge = tmp_path / "knowledge.jsonl"
    knowledge.write_bytes(b'{"subject": "a", "relation": "b", "object": "c"}\n\xff\xfe\n')
    with pytest.raises(ValueError, match=rf"{knowledge}:2: not UTF-8"):
        QA(knowledge).run("Where is a?")


# -- the sandbox's timeout path ----------------------------------------------------------------------------------------
def test_a_call_past_its_timeout_stops_allocating():
    grown = []

    class Hog(Tool):
        name = "Hog"

        def run(self, tool_input, date=None):
            chunks = []
            while len(chunks) < 600:  # 50 MB/s for 12 s if nothing stops it
                chunks.append(bytearray(1 << 20))
                grown.append(1)
                time.sleep(0.02)
            return "done"

    before = rss_mb()
    out = Sandbox({"Hog": Hog()}, timeout_s=0.3).run("Hog", "x")
    assert out.error["code"] == "timeout"
    deadline = time.monotonic() + 5
    while "tool-Hog" in tool_threads() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert "tool-Hog" not in tool_threads()  # the thread ended long before its loop would: nothing allocates
    n = len(grown)
    time.sleep(0.5)
    assert len(grown) == n < 100
    assert rss_mb() - before < 200


def test_data_loading_finishes_for_the_next_call_but_the_abandoned_call_stops():
    steps = []

    class Loader(Tool):
        name = "Loader"
        loaded = False

        def run(self, tool_input, date=None):
            if not self.loaded:
                with uninterrupted():
                    time.sleep(0.6)
                    self.loaded = True
            steps.append(tool_input)
            return "ok"

    sb = Sandbox({"Loader": Loader()}, timeout_s=0.2, cache=False)
    assert sb.run("Loader", "first").error["code"] == "timeout"
    deadline = time.monotonic() + 10
    while "tool-Loader" in tool_threads() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert sb.tools["Loader"].loaded and steps == []  # loaded, and nothing after the load ran for nobody
    assert sb.run("Loader", "second").result == "ok" and steps == ["second"]
