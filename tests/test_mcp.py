"""toolformer mcp-serve: the enabled tools over stdio, checked with the MCP SDK's own client."""

import json

import pytest
from helpers import mcp_serve_params

mcp = pytest.importorskip("mcp")


def test_mcp_serve_lists_and_calls_the_tools(capsys):
    import anyio
    from mcp.client.session import ClientSession
    from mcp.client.stdio import stdio_client

    from toolformer.cli.app import main

    assert main(["tools", "list", "--format", "mcp", "--config", "configs/tiny.yaml"]) == 0
    listed = json.loads(capsys.readouterr().out)["tools"]

    async def session() -> tuple:
        async with stdio_client(mcp_serve_params()) as (read, write), ClientSession(read, write) as s:
            await s.initialize()
            tools = (await s.list_tools()).tools
            calls = [await s.call_tool(name, args) for name, args in (
                ("Calculator", {"input": "1,250 + 3 * 4"}), ("Calculator", {"input": "3 +* 4"}),
                ("Calendar", {}), ("Nope", {"input": "x"}))]
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
    assert unknown.is_error and unknown.structured_content["code"] == "unknown_tool"
