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
* ``mcp_error``: the server answered the request with a protocol error.

Servers are stopped when the stage (or command) that built them ends
(:meth:`Sandbox.close <toolformer.tools.sandbox.Sandbox.close>`, and at exit
for any left open): the SDK closes the server's stdin, then terminates and
finally kills its process tree, and waits for it, so no process or zombie is
left behind.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import contextlib
import json
import os
import sys
import threading
from typing import TYPE_CHECKING

from toolformer.tools.base import Tool, ToolError, side_effects_allowed

if TYPE_CHECKING:
    from toolformer.config.schema import McpServerConfig, ToolsConfig

_LIVE: set[McpServer] = set()  # servers started and not yet closed (closed at exit)
CLOSE_WAIT_S = 15.0  # the SDK's shutdown: stdin closed, 2 s, SIGTERM, 2 s, SIGKILL


def mcp_names(cfg: ToolsConfig) -> dict[str, tuple[int, str]]:
    """Pipeline name -> (index in ``tools.mcp_servers``, the server's tool name), for every allowed tool."""
    return {s.call_name(t): (i, t) for i, s in enumerate(cfg.mcp_servers) for t in s.allow}


def _sdk():
    try:
        from mcp.client.session import ClientSession
        from mcp.client.stdio import StdioServerParameters, stdio_client
        from mcp.shared.exceptions import MCPError
        from mcp_types import CONNECTION_CLOSED
    except ImportError:
        raise ValueError("tools.mcp_servers needs the MCP SDK: pip install 'toolformer[mcp]'") from None
    return ClientSession, StdioServerParameters, stdio_client, MCPError, CONNECTION_CLOSED


_DEVNULL: list = []


def _errlog():
    """Where the server's stderr goes: ours when it is a real file, else nowhere."""
    try:
        sys.stderr.fileno()
        return sys.stderr
    except (AttributeError, OSError, ValueError):
        if not _DEVNULL:
            _DEVNULL.append(open(os.devnull, "w"))  # noqa: SIM115 - one for the process, never closed
        return _DEVNULL[0]


class McpServer:
    """One MCP server process and its session, on an asyncio loop in a daemon thread.

    :meth:`start` connects and returns the server's tools; :meth:`call` runs
    one ``tools/call`` from any thread, with a timeout; :meth:`close` stops
    the process and the loop. After the server died or was abandoned,
    ``failure`` holds the error every later call fails with at once.
    """

    def __init__(self, cfg: McpServerConfig, key: str):
        self.cfg = cfg
        self.key = key  # config key, e.g. tools.mcp_servers[0]
        self.label = f"MCP server {cfg.name!r}"
        self.failure: ToolError | None = None
        self._lock = threading.Lock()
        self._timeouts = 0  # in a row
        self._closed = False
        self._session = None
        self._stop: asyncio.Event | None = None
        self._ended = threading.Event()  # the session's task has finished (the process is gone)
        self._ready: concurrent.futures.Future = concurrent.futures.Future()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True, name=f"mcp-{cfg.name}")
        self._main: concurrent.futures.Future | None = None

    # -- life cycle ------------------------------------------------------------------

    def begin(self) -> None:
        """Start the process and the session in the background (:meth:`start` waits for them)."""
        _sdk()
        self._thread.start()
        _LIVE.add(self)
        self._main = asyncio.run_coroutine_threadsafe(self._serve(), self._loop)

    def start(self) -> list:
        """Start the process (unless :meth:`begin` did), initialize the session, list every tool (all pages)."""
        if self._main is None:
            self.begin()
        try:
            return self._ready.result(self.cfg.startup_timeout_s)
        except concurrent.futures.TimeoutError:
            self.close()
            raise ValueError(f"{self.key}: {self.label} did not start and list its tools within "
                             f"{self.cfg.startup_timeout_s:g} s ({self.key}.startup_timeout_s)") from None
        except Exception as e:
            self.close()
            raise ValueError(f"{self.key}: {self.label} did not start ({self.cfg.command} "
                             f"{' '.join(self.cfg.args)}): {_describe(e)}") from None

    async def _serve(self) -> None:
        ClientSession, StdioServerParameters, stdio_client, _, _ = _sdk()  # noqa: N806 - SDK classes
        self._stop = asyncio.Event()
        params = StdioServerParameters(command=self.cfg.command, args=list(self.cfg.args), env=dict(self.cfg.env),
                                       cwd=self.cfg.cwd or None)
        try:
            async with stdio_client(params, errlog=_errlog()) as (read, write), \
                    ClientSession(read, write) as session:
                await session.initialize()
                tools, cursor = [], None
                while True:
                    from mcp import types

                    page = await session.list_tools(params=types.PaginatedRequestParams(cursor=cursor)
                                                    if cursor else None)
                    tools += page.tools
                    cursor = page.next_cursor
                    if not cursor:
                        break
                self._session = session
                self._ready.set_result(tools)
                await self._stop.wait()
        except BaseException as e:  # noqa: BLE001 - reported to start() or to later calls
            if not self._ready.done():
                self._ready.set_exception(e if isinstance(e, Exception) else RuntimeError(repr(e)))
            self._fail("server_died", f"{self.label} stopped: {_describe(e)}")
        finally:
            self._fail("server_closed", f"{self.label} was closed")
            self._ended.set()

    def close(self) -> None:
        """Stop the server (its process tree is terminated and reaped) and the loop; idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._fail("server_closed", f"{self.label} was closed")
        if self._thread.is_alive():
            up = self._ready.done() and not self._ready.cancelled() and self._ready.exception() is None
            if up and self._stop is not None:
                self._loop.call_soon_threadsafe(self._stop.set)  # the session ends, the SDK stops the process
                self._ended.wait(CLOSE_WAIT_S)
            if not self._ended.is_set() and self._main is not None:
                self._main.cancel()  # still starting: cancel; the SDK stops the process all the same (shielded)
                self._ended.wait(CLOSE_WAIT_S)
            with contextlib.suppress(concurrent.futures.TimeoutError, concurrent.futures.CancelledError):
                asyncio.run_coroutine_threadsafe(_cancel_rest(), self._loop).result(CLOSE_WAIT_S)
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(CLOSE_WAIT_S)
        if not self._thread.is_alive():
            self._loop.close()
        _LIVE.discard(self)

    def _fail(self, code: str, message: str) -> None:
        with self._lock:
            if self.failure is None:
                self.failure = ToolError(code, message)

    # -- calls -----------------------------------------------------------------------

    def call(self, tool: str, arguments: dict, timeout_s: float):
        """``tools/call`` of ``tool``; the SDK's ``CallToolResult``, or :class:`ToolError`."""
        _, _, _, MCPError, CONNECTION_CLOSED = _sdk()  # noqa: N806 - SDK names
        if self.failure is not None:
            raise ToolError(self.failure.code, self.failure.message)
        coro = self._session.call_tool(tool, arguments)
        try:
            future = asyncio.run_coroutine_threadsafe(coro, self._loop)
        except RuntimeError:  # the loop was closed since the check above
            coro.close()
            failure = self.failure or ToolError("server_closed", f"{self.label} was closed")
            raise ToolError(failure.code, failure.message) from None
        try:
            result = future.result(timeout_s)
        except concurrent.futures.TimeoutError:
            future.cancel()
            self._timed_out()
            raise ToolError("timeout", f"{self.label} gave no answer within {timeout_s:g} s") from None
        except concurrent.futures.CancelledError:
            failure = self.failure or ToolError("server_closed", f"{self.label} was closed")
            raise ToolError(failure.code, failure.message) from None
        except MCPError as e:
            if e.code == CONNECTION_CLOSED:
                self._fail("server_died", f"{self.label} closed the connection (its process ended)")
                failure = self.failure or ToolError("server_died", f"{self.label} closed the connection")
                raise ToolError(failure.code, failure.message) from None
            raise ToolError("mcp_error", f"{self.label}: {e.message} (MCP error {e.code})") from None
        with self._lock:
            self._timeouts = 0
        return result

    def _timed_out(self) -> None:
        limit = self.cfg.abandon_after_timeouts
        with self._lock:
            self._timeouts += 1
            abandon = limit > 0 and self._timeouts >= limit
        if abandon:
            self._fail("server_abandoned", f"{self.label} was stopped after {limit} calls in a row timed out "
                                           f"({self.key}.abandon_after_timeouts)")
            threading.Thread(target=self.close, daemon=True, name=f"mcp-close-{self.cfg.name}").start()


async def _cancel_rest() -> None:
    """Cancel the loop's other tasks (calls still in flight) and let them finish."""
    others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
    for t in others:
        t.cancel()
    await asyncio.gather(*others, return_exceptions=True)


def _describe(e: BaseException) -> str:
    """One line for an exception, the first of a group's."""
    while getattr(e, "exceptions", None):  # an exception group (anyio's task groups raise them)
        e = e.exceptions[0]  # type: ignore[attr-defined]
    return f"{type(e).__name__}: {e}" if str(e) else type(e).__name__


@atexit.register
def close_all() -> None:
    """Stop every server still running (a command that ended without closing its tools)."""
    for server in list(_LIVE):
        server.close()


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


_PLACEHOLDERS = {"string": "text", "number": 1, "integer": 1, "boolean": True, "array": [], "object": {}}


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
