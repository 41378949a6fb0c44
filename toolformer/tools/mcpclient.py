"""MCP servers as a tool source: the allowed tools of the servers in
``tools.mcp_servers`` become tools of the pipeline.

Each server is started over stdio with the official ``mcp`` SDK
(``stdio_client``, ``ClientSession``) and keeps one long-lived session on an
asyncio loop of its own, in a background thread (:class:`McpServer`). A call
is submitted to that loop with ``asyncio.run_coroutine_threadsafe`` and waited
for at most ``tools.timeout_s``; it runs inside the
:class:`~toolformer.tools.sandbox.Sandbox` like every tool's call (schema
check with the server's ``inputSchema``, timeout, result cap, marker
stripping, cache, structured errors).

**Names.** The server's tool ``t`` is called ``<server>.<t>`` in calls and in
``tools.enabled``, or by its alias (``aliases: {t: Alias}``). Only the tools
in ``allow`` exist: the others are never listed, built or called, and an
``allow`` entry the server does not list is an error naming it.

**Inline text → arguments.** The paper's calls carry one string,
``[srv.t(x)]``. When the tool's ``inputSchema`` has exactly one required
property and it is a string, ``x`` is that property's value
(``[words.lookup(Aldermoor)]`` → ``{"query": "Aldermoor"}``). Otherwise ``x``
must be a JSON object literal, the arguments themselves
(``[words.add({"a": 2, "b": 3})]``), or empty for ``{}``; anything else is an
``invalid_arguments`` error.

**Side effects.** A tool counts as having side effects when its annotations say
``destructiveHint: true`` or ``readOnlyHint: false``, or say nothing of
``readOnlyHint`` while the server's ``read_only`` policy is true (the
default). Such a tool is refused when it is built, by every command, unless
``tools.allow_side_effects`` is true or names it.

**Untrusted text.** A server's tool descriptions are shown nowhere (not in the
sampler's prompt, ``tools list`` or ``mcp-serve``) unless the server's
``describe_in_prompt`` is true; a neutral line naming the server and tool
stands in for them.

**Results and failures** (the error codes of the records):

* ``tool_error``: the server answered ``isError``; the message is its text;
* ``non_text_result``: content other than text (an image, audio, a resource);
* ``too_long``: text over the server's ``max_result_chars`` (the result is
  dropped, never written); shorter results are joined with newlines and cut to
  ``tools.max_result_chars`` by the sandbox;
* ``timeout``: no answer within ``tools.timeout_s``; the request is cancelled.
  After ``abandon_after_timeouts`` timeouts in a row the server is stopped and
  its later calls fail at once with ``server_abandoned``;
* ``server_died``: the connection closed (the process ended or crashed). The
  server is not restarted: its later calls fail at once with ``server_died``,
  and the stage goes on with the other tools;
* ``mcp_error``: the server answered the request with a protocol error;
* ``bad_output``: the server wrote a line on stdout that is no MCP message
  (the stdio transport allows nothing else there), or answered a call with no
  tool result. A stray line stops the server at once: every call, those
  waiting included, fails without waiting for its timeout (at start, the
  server does not start). The SDK's own log of the line is left out.

Servers are stopped when the stage (or command) that built them ends
(:meth:`Sandbox.close <toolformer.tools.sandbox.Sandbox.close>`, and at exit
for any left open): the SDK closes the server's stdin, then terminates and
finally kills its process tree, and waits for it, so no process or zombie is
left behind.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from toolformer.tools.base import Tool, ToolError, side_effects_allowed
from toolformer.tools.mcpsession import McpServer

if TYPE_CHECKING:
    from toolformer.config.tools import ToolsConfig


def mcp_names(cfg: ToolsConfig) -> dict[str, tuple[int, str]]:
    """Pipeline name -> (index in ``tools.mcp_servers``, the server's tool name), for every allowed tool."""
    return {s.call_name(t): (i, t) for i, s in enumerate(cfg.mcp_servers) for t in s.allow}


# -- tools ---------------------------------------------------------------------------

def string_argument(schema: dict) -> str | None:
    """The property an inline call's text fills: the only required property, when it is a string."""
    required = schema.get("required") or []
    props = schema.get("properties") or {}
    if len(required) == 1 and isinstance(props.get(required[0]), dict) and props[required[0]].get("type") == "string":
        return required[0]
    return None


def side_effects(annotations, read_only_policy: bool) -> str | None:
    """Why a tool counts as having side effects (None when it does not), from its MCP annotations."""
    read_only = getattr(annotations, "read_only_hint", None)
    if getattr(annotations, "destructive_hint", None) is True:
        return "destructiveHint is true"
    if read_only is False:
        return "readOnlyHint is false"
    if read_only is None and read_only_policy:
        return "it does not say readOnlyHint: true, which the server's read_only policy requires"
    return None


_PLACEHOLDERS: dict[str | None, object] = {"string": "text", "number": 1, "integer": 1, "boolean": True, "array": [],
                                           "object": {}}


class McpTool(Tool):
    """An allowed tool of an MCP server, as a pipeline tool."""

    def __init__(self, server: McpServer, listed, name: str, timeout_s: float, max_result_chars: int):
        cfg = server.cfg
        self.server = server
        self.server_tool = listed.name
        self.name = name
        self.key = server.key
        self.timeout_s = timeout_s
        self.max_result_chars = max_result_chars
        self.schema_ = dict(listed.input_schema or {"type": "object"})
        self.annotations = listed.annotations
        self.why_not_read_only = side_effects(listed.annotations, cfg.read_only)
        self.read_only = self.why_not_read_only is None
        self.description = (listed.description or "") if cfg.describe_in_prompt else \
            f"Tool {listed.name!r} of the MCP server {cfg.name!r} (its own description is not shown)."
        prompt = cfg.prompts.get(listed.name, "")
        if prompt and cfg.describe_in_prompt and listed.description:
            prompt = f"{name}: {' '.join(listed.description.split())}\n\n{prompt}"
        self.prompt = prompt
        self.proposer = cfg.proposers.get(listed.name, "")
        self.string_arg = string_argument(self.schema_)
        self.takes_input = bool(self.string_arg or self.schema_.get("properties") or self.schema_.get("required"))
        self.input_description, self.example = self._describe_input()

    def _describe_input(self) -> tuple[str, str]:
        props = self.schema_.get("properties") or {}
        if self.string_arg:
            examples = props[self.string_arg].get("examples") or []
            example = examples[0] if examples and isinstance(examples[0], str) else "text"
            return f"the string {self.string_arg!r}", example
        required = self.schema_.get("required") or list(props)
        obj = {p: _PLACEHOLDERS.get((props.get(p) or {}).get("type")) for p in required}
        return "a JSON object of its arguments", json.dumps(obj, ensure_ascii=False)

    @property
    def input_schema(self) -> dict:
        """The server's ``inputSchema``, as it listed it."""
        return self.schema_

    def arguments(self, tool_input: str) -> dict:
        """The module's rule: the one required string property, else a JSON object literal (or empty: {})."""
        if self.string_arg:
            return {self.string_arg: tool_input}
        text = tool_input.strip()
        if not text:
            return {}
        try:
            value = json.loads(text)
        except ValueError:
            value = None
        if not isinstance(value, dict):
            raise ToolError("invalid_arguments", f"{self.name} takes a JSON object of its arguments, not {text[:80]!r}",
                            f"e.g. [{self.name}({self.example})]")
        return value

    def input_text(self, arguments: dict) -> str:
        if self.string_arg:
            return str(arguments.get(self.string_arg, ""))
        return json.dumps(arguments, ensure_ascii=False) if arguments else ""

    def run(self, tool_input: str, date: str | None = None) -> str:
        # Give up just inside the sandbox's timeout, so that this error (and the count of timeouts in a row
        # that abandons a hanging server) is settled before the sandbox starts the next call.
        result = self.server.call(self.server_tool, self.arguments(tool_input), self.timeout_s * 0.9)
        return self._text(result)

    def _text(self, result) -> str:
        """The text of a ``CallToolResult`` (its text parts joined by newlines), or the error it stands for."""
        texts = [c.text for c in result.content if c.type == "text"]
        if result.is_error:
            raise ToolError("tool_error", " ".join(" ".join(texts)[:2000].split()) or "the tool reported an error")
        others = sorted({c.type for c in result.content if c.type != "text"})
        if others:
            raise ToolError("non_text_result", f"{self.name} returned {', '.join(others)} content; only text is used")
        size = sum(len(t) for t in texts)
        if size > self.max_result_chars:
            raise ToolError("too_long", f"{self.name} returned {size:,} characters, over the cap of "
                                        f"{self.max_result_chars:,} ({self.key}.max_result_chars)")
        return "\n".join(texts)

    def close(self) -> None:
        self.server.close()


def build_mcp_tools(cfg: ToolsConfig, names: list[str]) -> dict[str, McpTool]:
    """Start the servers of the MCP tools ``names`` (pipeline names), check their allow-lists and
    annotations, and return the tools. A server that fails to start, an ``allow`` entry the server
    lacks and a tool with side effects that is not allowed raise ``ValueError`` (every server started
    here is closed first)."""
    known = mcp_names(cfg)
    wanted: dict[int, list[str]] = {}
    for n in names:
        wanted.setdefault(known[n][0], []).append(n)
    tools: dict[str, McpTool] = {}
    servers: list[McpServer] = []
    try:
        for i in wanted:
            servers.append(McpServer(cfg.mcp_servers[i], f"tools.mcp_servers[{i}]"))
            servers[-1].begin()  # the servers start side by side
        for server, (i, group) in zip(servers, wanted.items()):
            scfg = cfg.mcp_servers[i]
            listed = {t.name: t for t in server.start()}
            missing = [t for t in scfg.allow if t not in listed]
            if missing:
                raise ValueError(f"tools.mcp_servers[{i}].allow: {scfg.name!r} has no tool {missing[0]!r} "
                                 f"(it lists: {', '.join(sorted(listed)) or 'none'})")
            for n in group:
                tools[n] = _checked(McpTool(server, listed[known[n][1]], n, cfg.timeout_s, scfg.max_result_chars),
                                    cfg, i)
    except BaseException:
        for s in servers:
            s.close()
        raise
    return {n: tools[n] for n in names}


def _checked(tool: McpTool, cfg: ToolsConfig, i: int) -> McpTool:
    """``tool``, after the checks that need the server's listing: side effects, schema, borrowed proposer."""
    from jsonschema import Draft202012Validator
    from jsonschema.exceptions import SchemaError

    if not tool.read_only and not side_effects_allowed(cfg.allow_side_effects, tool.name):
        raise ValueError(f"tools.enabled: {tool.name} is not read-only ({tool.why_not_read_only}); it is refused "
                         f"unless tools.allow_side_effects=true or lists {tool.name}")
    try:
        Draft202012Validator.check_schema(tool.input_schema)
    except SchemaError as e:
        raise ValueError(f"tools.mcp_servers[{i}]: {tool.server_tool!r} lists an invalid inputSchema: "
                         f"{e.message}") from None
    if tool.proposer and not tool.string_arg and tool.takes_input:
        raise ValueError(f"tools.mcp_servers[{i}].proposers.{tool.server_tool}: a rule proposer writes one string, "
                         f"but {tool.name} takes {tool.input_description}")
    return tool
