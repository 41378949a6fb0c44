"""An MCP server that breaks the stdio transport's rules (lines on stdout that are no MCP message, an answer of
the wrong shape): one error, at once, in one line, never the SDK's traceback or a wait for the timeout."""

import sys
import time
from pathlib import Path

import pytest
import yaml
from helpers import ROOT

from toolformer.config.load import load_config
from toolformer.config.schema import PipelineConfig
from toolformer.tools import build_tools, close_tools
from toolformer.tools.sandbox import build_sandbox

pytestmark = pytest.mark.slow  # every test here starts a server (a Python process)
pytest.importorskip("mcp")

RAW = ROOT / "tests" / "fixtures" / "mcp_servers" / "raw.py"
TIMEOUT_S = 20.0  # far over what any answer here takes: a call that waited for it would show


def config(tmp_path: Path, mode: str) -> PipelineConfig:
    path = tmp_path / f"{mode}.yaml"
    path.write_text(yaml.safe_dump({"run_dir": str(tmp_path / "run"), "tools": {
        "enabled": ["Calculator", "raw.x"], "timeout_s": TIMEOUT_S,
        "mcp_servers": [{"name": "raw", "command": sys.executable, "args": [str(RAW), mode], "allow": ["x"]}]}}))
    return load_config(PipelineConfig, path)


def test_lines_that_are_no_message_refuse_the_server_in_one_line(tmp_path, capfd):
    with pytest.raises(ValueError) as err:
        build_tools(config(tmp_path, "noise").tools, ["raw.x"])
    message = str(err.value)
    assert message.startswith("tools.mcp_servers[0]: MCP server 'raw' did not start")
    assert "wrote 'server starting...' on stdout, which is not an MCP message" in message
    assert "\n" not in message and "Traceback" not in capfd.readouterr().err


@pytest.mark.parametrize(("mode", "shown"), [
    ("nonobject", "'result': 'not an object'"), ("nocontent", "'not a list'"), ("later", "'working on it'")])
def test_an_answer_of_the_wrong_shape_is_an_error_record_at_once(tmp_path, capfd, mode, shown):
    with build_sandbox(config(tmp_path, mode)) as sandbox:
        t0 = time.perf_counter()
        out = sandbox.run_many([("raw.x", "hello", None), ("raw.x", "again", None), ("Calculator", "2 * 21", None)])
        took = time.perf_counter() - t0
    assert took < TIMEOUT_S / 2, took
    assert [o.error["code"] for o in out[:2]] == ["bad_output", "bad_output"] and out[2].result == "42"
    assert shown in out[0].error["message"] and "\n" not in out[0].error["message"]
    assert "Traceback" not in capfd.readouterr().err


def test_a_well_behaved_raw_server_answers(tmp_path):
    tools = build_tools(config(tmp_path, "fine").tools, ["raw.x"])
    try:
        assert tools["raw.x"].run("hello") == '{"q": "hello"}'
    finally:
        close_tools(tools)
