"""toolformer mcp-serve: the enabled tools over stdio, checked with the MCP SDK's own client; it refuses arguments
its tools' schemas refuse and inputs over the limits, and goes on serving."""

import json

import pytest
from helpers import mcp_serve_params

pytestmark = pytest.mark.slow  # every test here starts a Python process

mcp = pytest.importorskip("mcp")


def test_mcp_serve_lists_and_calls_the_tools(capsys):
    import anyio
    from mcp.client.session import ClientSession
    from mcp.client.stdio import stdio_client
    from mcp.shared.exceptions import MCPError

    from toolformer.cli.app import main

    assert main(["tools", "list", "--format", "mcp", "--config", "configs/tiny.yaml"]) == 0
    listed = json.loads(capsys.readouterr().out)["tools"]

    async def session() -> tuple:
        async with stdio_client(mcp_serve_params()) as (read, write), ClientSession(read, write) as s:
            await s.initialize()
            tools = (await s.list_tools()).tools
            calls = [await s.call_tool(name, args) for name, args in (
                ("Calculator", {"input": "1,250 + 3 * 4"}), ("Calculator", {"input": "3 +* 4"}),
                ("Calendar", {}))]
            try:
                await s.call_tool("Nope", {"input": "x"})
            except MCPError as e:  # the MCP specification: an unknown tool is a protocol error, not a tool result
                calls.append(e)
            return tools, calls

    tools, (ok, bad, today, unknown) = anyio.run(session)
    served = [{"name": t.name, "description": t.description, "inputSchema": t.input_schema,
               "annotations": {"readOnlyHint": t.annotations.read_only_hint}} for t in tools]
    assert served == listed  # tools/list is `toolformer tools list --format mcp`
    assert [t["name"] for t in listed] == ["Calculator", "Calendar", "WikiSearch", "QA"]
    assert not ok.is_error and ok.content[0].text == "1262"
    assert bad.is_error and bad.structured_content["code"] == "syntax"
    assert "Calculator(" in bad.structured_content["hint"]
    assert not today.is_error and today.content[0].text.startswith("Today is ")
    assert (unknown.code, unknown.message) == (-32602, "Unknown tool: Nope")


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
