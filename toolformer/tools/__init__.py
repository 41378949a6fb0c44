"""The tool registry: every tool by name, built from the tools config."""

from __future__ import annotations

from toolformer.tools.base import Tool, ToolError
from toolformer.tools.calculator import Calculator, calculate
from toolformer.tools.calendar import Calendar
from toolformer.tools.mt import MT
from toolformer.tools.qa import QA
from toolformer.tools.wikisearch import WikiSearch

__all__ = ["CATALOGUE_FORMATS", "REGISTRY", "Tool", "ToolError", "build_tool", "build_tools", "calculate", "catalogue",
           "render_prompt"]

REGISTRY: dict[str, type[Tool]] = {t.name: t for t in (Calculator, Calendar, WikiSearch, QA, MT)}


def build_tool(name: str, cfg=None) -> Tool:
    """Instantiate tool ``name`` with paths and limits from a ToolsConfig."""
    from toolformer.config.schema import ToolsConfig

    cfg = cfg or ToolsConfig()
    if name not in REGISTRY:
        raise KeyError(f"unknown tool {name!r}; known tools: {', '.join(sorted(REGISTRY))}")
    if name == "Calculator":
        return Calculator(cfg.max_input_chars)
    if name == "WikiSearch":
        return WikiSearch(cfg.collection, cfg.search_top_k, cfg.snippet_chars)
    if name == "QA":
        return QA(cfg.knowledge)
    if name == "MT":
        return MT(cfg.mt_model, cfg.mt_target_lang)
    return REGISTRY[name]()


def build_tools(cfg) -> dict[str, Tool]:
    return {name: build_tool(name, cfg) for name in cfg.enabled}


def render_prompt(tool: Tool, text: str, style) -> str:
    """P(x): the tool's few-shot prompt around ``text``, in the configured style."""
    prompt = tool.prompt
    if style.start != "[" or style.end != "]":
        # The prompts are written with `[`/`]`; swap in the style's markers only
        # where they open a call of this tool or close it.
        import re

        prompt = re.sub(rf"\[{tool.name}\(([^\]]*)\)\]", lambda m: style.render(tool.name, m.group(1)), prompt)
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
