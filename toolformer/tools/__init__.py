"""The tool registry: every tool by name, built from the tools config, and
the tools of MCP servers (``tools.mcp_servers``, :mod:`toolformer.tools.mcpclient`)."""

from __future__ import annotations

from collections.abc import Mapping

from toolformer.tools.base import Tool, ToolError
from toolformer.tools.calculator import Calculator, calculate
from toolformer.tools.calendar import Calendar
from toolformer.tools.mt import MT
from toolformer.tools.qa import QA
from toolformer.tools.wikisearch import WikiSearch

__all__ = ["CATALOGUE_FORMATS", "REGISTRY", "Tool", "ToolError", "build_tool", "build_tools", "calculate", "catalogue",
           "close_tools", "known_tools", "render_prompt"]

REGISTRY: dict[str, type[Tool]] = {t.name: t for t in (Calculator, Calendar, WikiSearch, QA, MT)}


def known_tools(cfg) -> list[str]:
    """Every tool name a ToolsConfig can enable: the registry's and its MCP servers' allowed tools."""
    from toolformer.tools.mcpclient import mcp_names

    return sorted(REGISTRY) + sorted(mcp_names(cfg))


def build_tool(name: str, cfg=None) -> Tool:
    """Instantiate tool ``name`` with paths and limits from a ToolsConfig (an MCP tool starts its server:
    close it with ``tool.close()``)."""
    from toolformer.config.tools import ToolsConfig
    from toolformer.tools.mcpclient import build_mcp_tools, mcp_names

    cfg = cfg or ToolsConfig()
    if name in mcp_names(cfg):
        return build_mcp_tools(cfg, [name])[name]
    if name not in REGISTRY:
        raise KeyError(f"unknown tool {name!r}; known tools: {', '.join(known_tools(cfg))}")
    if name == "Calculator":
        return Calculator(cfg.max_input_chars)
    if name == "WikiSearch":
        return WikiSearch(cfg.collection, cfg.search_top_k, cfg.snippet_chars)
    if name == "QA":
        return QA(cfg.knowledge)
    if name == "MT":
        return MT(cfg.mt_model, cfg.mt_target_lang)
    return REGISTRY[name]()


def build_tools(cfg, names: list[str] | None = None) -> dict[str, Tool]:
    """The tools ``names`` (default: ``cfg.enabled``), in that order. The MCP servers they need are
    started together; :func:`close_tools` (or ``Sandbox.close``) stops them."""
    from toolformer.tools.mcpclient import build_mcp_tools, mcp_names

    names = list(cfg.enabled if names is None else names)
    remote = mcp_names(cfg)
    mcp = build_mcp_tools(cfg, [n for n in names if n in remote]) if any(n in remote for n in names) else {}
    try:
        return {name: mcp[name] if name in mcp else build_tool(name, cfg) for name in names}
    except BaseException:
        close_tools(mcp)
        raise


def close_tools(tools: Mapping[str, Tool]) -> None:
    """Release every tool (stop the MCP servers among them)."""
    for tool in tools.values():
        tool.close()


def render_prompt(tool: Tool, text: str, style) -> str:
    """P(x): the tool's few-shot prompt around ``text``, in the configured style."""
    prompt = tool.prompt
    if style.start != "[" or style.end != "]":
        # The prompts are written with `[`/`]`; swap in the style's markers only
        # where they open a call of this tool or close it.
        import re

        prompt = re.sub(rf"\[{re.escape(tool.name)}\(([^\]]*)\)\]", lambda m: style.render(tool.name, m.group(1)),
                        prompt)
    return prompt.replace("{text}", text)


CATALOGUE_FORMATS = ("json", "openai", "anthropic", "mcp")


def catalogue(tools: dict[str, Tool], fmt: str = "json") -> list | dict:
    """The tools' schemas in a wire format: ``json`` (this project's), ``openai``
    (chat-completions ``tools``), ``anthropic`` (messages ``tools``) or ``mcp``
    (a ``tools/list`` result)."""
    if fmt == "json":
        return [t.schema() for t in tools.values()]
    if fmt == "openai":
        return [{"type": "function", "function": {"name": t.name, "description": t.description,
                                                  "parameters": t.input_schema}} for t in tools.values()]
    if fmt == "anthropic":
        return [{"name": t.name, "description": t.description, "input_schema": t.input_schema}
                for t in tools.values()]
    if fmt == "mcp":
        return {"tools": [{"name": t.name, "description": t.description, "inputSchema": t.input_schema,
                           "annotations": {"readOnlyHint": t.read_only}} for t in tools.values()]}
    raise ValueError(f"format: {fmt!r} is not one of {', '.join(CATALOGUE_FORMATS)}")
