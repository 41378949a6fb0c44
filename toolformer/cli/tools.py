"""``toolformer tool``, ``tools list`` and ``mcp-serve``: one tool run by hand, the tools' schemas, the enabled
tools as an MCP server."""

from __future__ import annotations

import json
import sys

from toolformer.cli.common import load_pipeline


def cmd_tool(args) -> int:
    from toolformer.tools import build_tool, known_tools
    from toolformer.tools.sandbox import build_sandbox

    cfg = load_pipeline(args)
    if args.name not in known_tools(cfg.tools):
        print(f"toolformer: unknown tool {args.name!r}; known: {', '.join(known_tools(cfg.tools))}", file=sys.stderr)
        return 2
    tool = build_tool(args.name, cfg.tools)
    sandbox = build_sandbox(cfg, {tool.name: tool}, cache=False)
    out = sandbox.run(tool.name, args.input, args.date)
    sandbox.close()
    if args.json:
        print(json.dumps({"tool": tool.name, "input": args.input, **out.as_dict()}, ensure_ascii=False))
    elif out.error is None:
        print(out.result)
    else:
        print(f"error ({out.error['code']}): {out.error['message']}", file=sys.stderr)
    return 0 if out.ok else 1


def cmd_tools(args) -> int:
    from toolformer.tools import build_tools, catalogue, close_tools, known_tools

    cfg = load_pipeline(args)
    tools = build_tools(cfg.tools, known_tools(cfg.tools) if args.all else None)
    close_tools(tools)  # an MCP tool's schema was read when it was built
    print(json.dumps(catalogue(tools, args.format), indent=2, ensure_ascii=False))
    return 0


def cmd_mcp_serve(args) -> int:
    from toolformer.integrations.mcpserve import serve

    return serve(load_pipeline(args))
