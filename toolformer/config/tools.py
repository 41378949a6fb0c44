"""Configuration of the tools: the built-in ones and the MCP servers whose tools join them (the `tools`
section; :mod:`toolformer.config.schema` holds the whole config)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from toolformer.config.load import above, at_least

# The config names what the layers below it implement, so that it imports none of them (CONTRIBUTING.md,
# "Layout"); tests/test_layout.py keeps these names equal to the registries.
BUILTIN_TOOLS = ("Calculator", "Calendar", "WikiSearch", "QA", "MT")
"""The built-in tools by name (their classes are `toolformer.tools.REGISTRY`)."""
CALL_NAME = r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*"
"""What a call can name: letters, digits and `_`, in parts joined by dots (`words.lookup`, an MCP server's tool);
`toolformer.tools.calls` parses calls with it."""


def _call_name(name: str) -> bool:
    """A name a call can write (:data:`CALL_NAME`)."""
    return re.fullmatch(CALL_NAME, name) is not None


@dataclass
class McpServerConfig:
    """One MCP server whose allowed tools become tools of the pipeline (`toolformer/tools/mcpclient.py`)."""

    name: str = ""
    """Server name; its tools are called `<name>.<tool>` (letters, digits and `_`, no dot)."""
    command: str = ""
    """Executable that starts the server; it talks MCP over its stdin and stdout."""
    args: list[str] = field(default_factory=list)
    """Arguments of `command`."""
    env: dict[str, str] = field(default_factory=dict)
    """Environment variables of the server, over the few the MCP SDK passes on (HOME, PATH, SHELL, TERM, USER)."""
    cwd: str = ""
    """Working folder of the server; empty = the current one."""
    allow: list[str] = field(default_factory=list)
    """The server's tools that become pipeline tools, by the server's names; its other tools are invisible. An
    entry the server does not list is an error."""
    read_only: bool = True
    """Policy: a tool counts as read-only only if its annotations say `readOnlyHint: true`; false = a tool without
    the hint counts as read-only too. `readOnlyHint: false` or `destructiveHint: true` always mean side effects."""
    aliases: dict[str, str] = field(default_factory=dict)
    """Pipeline name of an allowed tool instead of `<name>.<tool>`, e.g. {lookup: Gazetteer}."""
    prompts: dict[str, str] = field(default_factory=dict)
    """Few-shot prompt P(x) of an allowed tool for the paper's sampler (`sample.method` sampler or both): `{text}`
    marks the document, calls are written `[<pipeline name>(input) → result]`."""
    proposers: dict[str, str] = field(default_factory=dict)
    """Built-in rule proposer (and pre-filter) an allowed tool borrows for `sample.method` rules or both:
    Calculator, WikiSearch, QA or Calendar, e.g. {lookup: WikiSearch}; it fills the tool's one string argument."""
    describe_in_prompt: bool = False
    """Show the server's tool descriptions (untrusted text) in the sampler's prompt and in `tools list` /
    `mcp-serve`; false = a neutral line naming the server and tool instead."""
    startup_timeout_s: float = 30.0
    """Seconds the server may take to start, answer `initialize` and list its tools."""
    max_result_chars: int = 100_000
    """A result longer than this is refused (`too_long`) and never kept; shorter ones are cut to
    tools.max_result_chars like every tool's."""
    abandon_after_timeouts: int = 3
    """After this many calls in a row time out, the server is stopped and its later calls fail at once
    (`server_abandoned`); 0 = never."""

    def validate(self) -> None:
        if not self.name or not self.command:
            raise ValueError("every MCP server needs a name and a command")
        if "." in self.name or not _call_name(self.name):
            raise ValueError(f"name: {self.name!r} must be letters, digits and `_` (its tools are `<name>.<tool>`)")
        if not self.allow:
            raise ValueError("allow: list the server's tools to use (none is used otherwise)")
        for key in ("aliases", "prompts", "proposers"):
            for tool in getattr(self, key):
                if tool not in self.allow:
                    raise ValueError(f"{key}: {tool!r} is not in allow ({', '.join(self.allow)})")
        for tool, prompt in self.prompts.items():
            if "{text}" not in prompt:
                raise ValueError(f"prompts: the prompt of {tool!r} must contain {{text}} (where the document goes)")
        for tool in self.allow:
            if not _call_name(self.call_name(tool)):
                raise ValueError(f"allow: {tool!r} gives the call name {self.call_name(tool)!r}, which a call cannot "
                                 "write (letters, digits, `_` and dots): give it an alias")
        above(self, 0, "startup_timeout_s", "max_result_chars")
        at_least(self, 0, "abandon_after_timeouts")

    def call_name(self, tool: str) -> str:
        """The pipeline name of the server's tool ``tool``: its alias or `<name>.<tool>`."""
        return self.aliases.get(tool) or f"{self.name}.{tool}"


@dataclass
class ToolsConfig:
    enabled: list[str] = field(default_factory=lambda: ["Calculator", "Calendar", "WikiSearch", "QA"])
    """Tools to annotate with, by registry name, or an MCP server's tool by its pipeline name (`<server>.<tool>`
    or its alias)."""
    collection: str = "data/collection.jsonl"
    """JSONL documents (`id`, `title`, `text`) that WikiSearch searches."""
    knowledge: str = "data/knowledge.jsonl"
    """JSONL facts (`subject`, `relation`, `object`, `question`) that QA answers from. QA and WikiSearch read a
    regular file of at most 1 GiB (`tools.wikisearch.MAX_DATA_BYTES`); anything else is refused naming it."""
    mt_model: str = ""
    """Folder of a seq2seq translation model (NLLB in the paper); empty = MT unavailable."""
    mt_target_lang: str = "eng_Latn"
    """Target language code for NLLB-style tokenizers (ignored when the tokenizer has none)."""
    search_top_k: int = 1
    """WikiSearch snippets returned per query."""
    snippet_chars: int = 200
    """WikiSearch: characters of each snippet's text."""
    timeout_s: float = 5.0
    """Seconds a single call may run before it is abandoned with a timeout error."""
    max_input_chars: int = 200
    """Longer tool inputs are refused."""
    max_result_chars: int = 300
    """Longer results are truncated."""
    concurrency: int = 4
    """Calls of one tool run at once (threads) when executing many; each has its own timeout."""
    per_tool_concurrency: dict[str, int] = field(default_factory=dict)
    """Per-tool limits instead of `concurrency`, e.g. {WikiSearch: 8, MT: 1}."""
    allow_side_effects: bool | list[str] = False
    """Tools not marked read-only that may run: true = all, or a list of tool names (an MCP tool with side effects
    runs only when named here or with true); false = none."""
    mcp_servers: list[McpServerConfig] = field(default_factory=list)
    """MCP servers whose allowed tools join the tools, started over stdio with the official MCP SDK."""

    def validate(self) -> None:
        above(self, 0.0, "timeout_s")
        at_least(self, 1, "search_top_k", "snippet_chars", "max_input_chars", "max_result_chars", "concurrency")
        for tool, n in self.per_tool_concurrency.items():
            if n < 1:
                raise ValueError(f"per_tool_concurrency.{tool}: must be at least 1, got {n}")
        seen: dict[str, str] = {}
        for i, server in enumerate(self.mcp_servers):
            if server.name in {s.name for s in self.mcp_servers[:i]}:
                raise ValueError(f"mcp_servers[{i}].name: {server.name!r} is used by another server")
            for tool in server.allow:
                name = server.call_name(tool)
                if name in BUILTIN_TOOLS or name in seen:
                    raise ValueError(f"mcp_servers[{i}].allow: {tool!r} is called {name!r}, which "
                                     f"{'a built-in tool' if name in BUILTIN_TOOLS else seen[name]} is called already")
                seen[name] = f"mcp_servers[{i}] ({server.name}) tool {tool!r}"
