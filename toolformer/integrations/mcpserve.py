"""``toolformer mcp-serve``: the enabled tools as a Model Context Protocol
server over stdio, with the official ``mcp`` SDK.

``tools/list`` gives each tool's name, description, JSON Schema
(``inputSchema``) and ``readOnlyHint``, the same as ``toolformer tools list
--format mcp``. ``tools/call`` runs the call through the project's sandbox
(:meth:`~toolformer.tools.sandbox.Sandbox.call`: the arguments checked against
the tool's ``inputSchema``, then the limits of every call: ``tools.max_input_chars``,
timeout, result cap, marker stripping, cache): a result is one text content;
a refusal or error is ``isError`` with ``{code, message, hint}`` as structured
content (``invalid_arguments`` for arguments the schema refuses). A call of a
tool the server does not list is a protocol error, as the MCP specification
has it: the JSON-RPC error -32602 (invalid params), ``Unknown tool: NAME``.
Calendar answers with today's date (a server has no document date).

The transport (:mod:`~toolformer.integrations.mcpwire`) answers every line that is no valid message with one
JSON-RPC error, and stops reading while too many replies are unread.
"""

from __future__ import annotations

import datetime as dt
import json
from typing import cast

from toolformer.config.schema import PipelineConfig
from toolformer.integrations.mcpwire import stdio_transport
from toolformer.tools import build_tools, catalogue
from toolformer.tools.sandbox import build_sandbox
from toolformer.version import __version__


def serve(cfg: PipelineConfig) -> int:
    try:
        import anyio
        from mcp import types
        from mcp.server.lowlevel import Server
        from mcp.shared.exceptions import MCPError
        from mcp_types import INVALID_PARAMS
    except ImportError:
        raise ValueError("mcp-serve needs the MCP SDK: pip install 'toolformer[mcp]'") from None

    tools = build_tools(cfg.tools)
    sandbox = build_sandbox(cfg, tools)
    listed = cast(dict, catalogue(tools, "mcp"))["tools"]  # the mcp format is a tools/list result

    async def list_tools(ctx, params) -> types.ListToolsResult:
        return types.ListToolsResult(tools=[types.Tool(name=t["name"], description=t["description"],
                                                       input_schema=t["inputSchema"],
                                                       annotations=types.ToolAnnotations(**t["annotations"]))
                                            for t in listed])

    async def call_tool(ctx, params) -> types.CallToolResult:
        if params.name not in tools:
            raise MCPError(INVALID_PARAMS, f"Unknown tool: {params.name}")
        arguments = {} if params.arguments is None else params.arguments
        outcome = await anyio.to_thread.run_sync(sandbox.call, params.name, arguments, dt.date.today().isoformat())
        if outcome.result is not None:  # ok
            return types.CallToolResult(content=[types.TextContent(text=outcome.result)])
        return types.CallToolResult(content=[types.TextContent(text=json.dumps(outcome.error))], is_error=True,
                                    structured_content=outcome.error)

    server = Server("toolformer", version=__version__, on_list_tools=list_tools, on_call_tool=call_tool)

    async def run() -> None:
        async with stdio_transport(drain_s=cfg.tools.timeout_s + 5) as (read, write):
            await server.run(read, write, server.create_initialization_options())

    try:
        anyio.run(run)
    finally:
        sandbox.close()  # stops the MCP servers whose tools it serves
    return 0
