"""One MCP server process and its session (:class:`McpServer`), for :mod:`toolformer.tools.mcpclient`.

The server is started over stdio with the official ``mcp`` SDK (``stdio_client``, ``ClientSession``) and
keeps one long-lived session on an asyncio loop of its own, in a background thread. A call is submitted to
that loop with ``asyncio.run_coroutine_threadsafe`` and waited for at most its timeout. A server is stopped
when the command that started it closes it, and at exit for any left open (:func:`close_all`): the SDK
closes its stdin, then terminates and finally kills its process tree, and waits for it.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import contextlib
import logging
import os
import sys
import threading
from typing import TYPE_CHECKING, Any

from toolformer.tools.base import ToolError

if TYPE_CHECKING:
    from toolformer.config.tools import McpServerConfig


_LIVE: set[McpServer] = set()  # servers started and not yet closed (closed at exit)
CLOSE_WAIT_S = 15.0  # the SDK's shutdown: stdin closed, 2 s, SIGTERM, 2 s, SIGKILL


class _Unparsed(logging.Filter):
    """Drops the SDK's log record (with its traceback) of a line it could not parse: :meth:`McpServer._bad_output`
    reports the line as the server's error instead."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("Failed to parse JSONRPC message")


def _sdk():
    stdio_log = logging.getLogger("mcp.client.stdio")
    if not any(isinstance(f, _Unparsed) for f in stdio_log.filters):
        stdio_log.addFilter(_Unparsed())
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
        self._session: Any = None  # the SDK's ClientSession (the SDK is imported on use)
        self._stop: asyncio.Event | None = None
        self._ended = threading.Event()  # the session's task has finished (the process is gone)
        self._ready: concurrent.futures.Future = concurrent.futures.Future()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True, name=f"mcp-{cfg.name}")
        self._main: concurrent.futures.Future | None = None
        self._calls: set[concurrent.futures.Future] = set()  # calls in flight (cancelled when the server misbehaves)

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
            why = self.failure.message if self.failure and self.failure.code == "bad_output" else _describe(e)
            raise ValueError(f"{self.key}: {self.label} did not start ({self.cfg.command} "
                             f"{' '.join(self.cfg.args)}): {why}") from None

    async def _serve(self) -> None:
        ClientSession, StdioServerParameters, stdio_client, _, _ = _sdk()  # noqa: N806 - SDK classes
        self._stop = asyncio.Event()
        params = StdioServerParameters(command=self.cfg.command, args=list(self.cfg.args), env=dict(self.cfg.env),
                                       cwd=self.cfg.cwd or None)
        try:
            async with stdio_client(params, errlog=_errlog()) as (read, write), \
                    ClientSession(read, write, message_handler=self._on_message) as session:
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

    async def _on_message(self, message) -> None:
        """The SDK's messages beside the responses: a line it could not parse arrives as an exception."""
        if isinstance(message, Exception):
            self._bad_output(message)

    def _bad_output(self, error: Exception) -> None:
        """The server wrote something on stdout that is not an MCP message (text, or an answer of the wrong shape):
        it breaks the transport's rule, so it is stopped, and its calls, those waiting included, fail at once."""
        self._fail("bad_output", f"{self.label} wrote {_offending(error)} on stdout, which is not an MCP message (a "
                                 f"server writes only protocol messages there, its logs to stderr)")
        if not self._ready.done():
            self._ready.set_exception(RuntimeError(self.failure.message if self.failure else "bad output"))
        for call in list(self._calls):
            call.cancel()
        if self._main is not None:
            self._main.cancel()  # the session ends; the SDK stops the process

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
        self._calls.add(future)
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
        except Exception as e:  # an answer the SDK refuses (a result that is no CallToolResult)
            raise ToolError("bad_output", f"{self.label} answered with no MCP tool result: "
                                          f"{_offending(e)}") from None
        finally:
            self._calls.discard(future)
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


def _offending(error: Exception) -> str:
    """What a server sent that the SDK could not read, in a few words (the first input a validation error names)."""
    errors = getattr(error, "errors", None)
    found = errors()[0].get("input") if callable(errors) and errors() else None
    if found is None:
        return _describe(error)[:120]
    shown = repr(found)
    return shown if len(shown) <= 80 else f"{shown[:77]}..."


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
