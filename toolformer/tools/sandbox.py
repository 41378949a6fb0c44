"""Running tool calls safely: timeouts, input and output caps, structured errors, a cache.

Every stage that calls a tool goes through :class:`Sandbox`, built from the
config by :func:`build_sandbox`; so does ``toolformer mcp-serve``, whose
calls come as argument objects (:meth:`Sandbox.call`). A call never
raises: it returns an :class:`Outcome` with either ``result`` or ``error``.
A call that outlives its timeout is abandoned and recorded as a ``timeout``
error, so one hanging tool cannot hang a stage; the Python code still running
in its thread is stopped (:class:`CallAbandoned` is raised there) as soon as
the thread runs Python again, except inside :func:`uninterrupted` (a tool
loading its data, bounded in size, finishes so that the next call finds it
loaded). What a tool's calls share (WikiSearch's and QA's BM25 index) is loaded when the sandbox is built
(:meth:`Tool.prepare`), outside every call's timeout: an index that takes longer to build than
``tools.timeout_s`` is built once, before the first call, not given up on call after call.
:meth:`Sandbox.close` (or leaving ``with sandbox:``)
releases the tools: it stops the MCP servers of MCP tools.
"""

from __future__ import annotations

import ctypes
import signal
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from toolformer.tools.base import CURRENT_CALL, CallAbandoned, Tool, ToolError
from toolformer.tools.base import uninterrupted as uninterrupted  # where tools and tests have found it

if TYPE_CHECKING:
    from toolformer.config.schema import PipelineConfig
    from toolformer.tools.calls import CallStyle


@dataclass(frozen=True)
class Outcome:
    result: str | None
    error: dict | None  # {"code": ..., "message": ..., "hint": ...}

    @property
    def ok(self) -> bool:
        return self.error is None

    def as_dict(self) -> dict:
        return {"result": self.result, "error": self.error}


def _error(code: str, message: str, hint: str = "") -> Outcome:
    return Outcome(None, {"code": code, "message": message[:500], "hint": hint[:300]})


def schema_validator(tool: Tool):
    """A validator of ``tool``'s argument schema (the schema itself checked first)."""
    from jsonschema import Draft202012Validator

    Draft202012Validator.check_schema(tool.input_schema)
    return Draft202012Validator(tool.input_schema)


def schema_errors(tool: Tool, arguments, validator) -> Outcome | None:
    """None when the argument object ``arguments`` satisfies the tool's JSON Schema, else an
    ``invalid_arguments`` error (each problem with where it is) whose hint shows a call that does."""
    errors = sorted(validator.iter_errors(arguments), key=lambda e: list(e.path))
    if not errors:
        return None
    example = f"[{tool.name}({tool.example})]" if tool.takes_input else f"[{tool.name}()]"
    problems = ("/".join(map(str, e.path)) + ": " + e.message if e.path else e.message for e in errors[:3])
    return _error("invalid_arguments", f"{tool.name}: " + "; ".join(problems),
                  f"{tool.name} takes {tool.input_description or 'no arguments'}, e.g. {example}")


def check_arguments(tool: Tool, tool_input: str, validator) -> Outcome | None:
    """None when the arguments of the call ``[Tool(tool_input)]`` satisfy the tool's JSON Schema, else an
    error (:func:`schema_errors`)."""
    try:
        arguments = tool.arguments(tool_input)
    except ToolError as e:  # text that maps to no argument object (an MCP tool's JSON)
        return _error(e.code, e.message, e.hint)
    return schema_errors(tool, arguments, validator)


def _raise_in(thread: threading.Thread, exc: type[BaseException] | None) -> None:
    """Raise ``exc`` in ``thread`` when it next runs Python code (CPython's PyThreadState_SetAsyncExc); ``None``
    takes back one that is still pending."""
    assert thread.ident is not None  # a started thread has one
    ident = ctypes.c_ulong(thread.ident)
    raised = None if exc is None else ctypes.py_object(exc)  # None: NULL, no exception
    if ctypes.pythonapi.PyThreadState_SetAsyncExc(ident, raised) > 1:  # never expected: undo it
        ctypes.pythonapi.PyThreadState_SetAsyncExc(ident, None)


# The signals blocked while a call's thread starts: those whose handler may raise (SIGTERM's Stopped, SIGINT's
# KeyboardInterrupt), never one a fault of the thread itself raises.
_BLOCKED = (frozenset(signal.valid_signals()) - {signal.SIGSEGV, signal.SIGBUS, signal.SIGFPE, signal.SIGILL,
                                                  signal.SIGTRAP, signal.SIGSYS, signal.SIGABRT}
            if hasattr(signal, "pthread_sigmask") else frozenset())


class _Call:
    """One call running in its daemon thread (:meth:`start`); ``outcome`` once it answered in time.

    :meth:`abandon` raises :class:`CallAbandoned` in the thread only while ``running`` (set and cleared under
    ``lock``), and once; the thread clears ``running`` inside its ``try`` and takes back there an exception not yet
    raised (CPython may raise it late: two threads given up on at once share one "pending" flag), so the exception
    is raised inside that ``try`` or never -- not in the thread's bootstrap, where the interpreter prints it."""

    def __init__(self, name: str, work: Callable[[], Outcome], finished: threading.Event, deadline: float):
        self.tool, self.deadline = name, deadline
        self.outcome: Outcome | None = None
        self.lock = threading.Lock()  # orders the thread's steps against abandon()
        self.abandoned = False
        self.running = False  # the thread is in ``work`` (or just past it, before it took the lock)
        self.shields = 0  # uninterrupted() blocks the thread is in
        self._mask: set[int | signal.Signals] | None = None  # the signal mask of the thread that started the call
        self._thread = threading.Thread(target=self._target, args=(work, finished), daemon=True,
                                        name=f"tool-{name}")

    def start(self) -> None:
        """Start the call's thread with the signals of :data:`_BLOCKED` blocked meanwhile. A handler raising in
        ``Thread.start()`` just after the thread was created would make start() drop it from ``threading._limbo``,
        and the thread, running anyway, would die with a KeyError that the interpreter prints. A signal sent
        meanwhile waits; its handler runs (and raises) here once the thread is started."""
        if not _BLOCKED:
            self._thread.start()
            return
        mask = signal.pthread_sigmask(signal.SIG_BLOCK, ())  # the mask now (a handler raising here changes nothing)
        try:
            signal.pthread_sigmask(signal.SIG_BLOCK, _BLOCKED)
            self._mask = mask
            self._thread.start()
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)

    def _target(self, work: Callable[[], Outcome], finished: threading.Event) -> None:
        if self._mask is not None:  # the thread inherited the blocked signals: a process it starts would too
            signal.pthread_sigmask(signal.SIG_SETMASK, self._mask)
        try:
            with self.lock:
                if self.abandoned:
                    return
                self.running = True
            CURRENT_CALL.call = self
            try:
                outcome = work()
            except CallAbandoned:
                outcome = None
            except BaseException as e:  # noqa: BLE001 - a tool's SystemExit is a record too
                outcome = _error("exception", f"{type(e).__name__}: {e}")
            with self.lock:
                self.running = False  # abandon() raises nothing in the thread from now on
                if self.abandoned:
                    _raise_in(self._thread, None)  # the CallAbandoned it raised, if still pending
                else:
                    self.outcome = outcome
            finished.set()
        except CallAbandoned:
            pass  # it arrived while the work was ending: nobody waits for this call any more

    def join(self, timeout: float) -> None:
        """Wait at most ``timeout`` seconds for the call's thread to end (a thread never started has ended)."""
        if self._thread.is_alive():
            self._thread.join(timeout)

    def abandon(self) -> Outcome | None:
        """Give up on the call unless it has answered (then return its outcome): stop the Python code its thread
        runs now, or when that leaves :func:`uninterrupted`."""
        with self.lock:
            if self.outcome is None and not self.abandoned:
                self.abandoned = True
                if self.running and not self.shields:
                    _raise_in(self._thread, CallAbandoned)
            return self.outcome


class Sandbox:
    """Executes calls of the given tools.

    ``timeout_s``: seconds per call; ``max_input_chars``: longer inputs are
    refused (``too_long``); ``max_result_chars``: longer results are
    cut; ``concurrency``: calls of one tool in flight at once in
    :meth:`run_many` (``per_tool`` sets it for single tools);
    ``forbidden_markers``: strings removed from results so a result can never
    close or open a call in the text it is inserted into.
    """

    def __init__(
        self,
        tools: dict[str, Tool],
        timeout_s: float = 5.0,
        max_result_chars: int = 300,
        max_input_chars: int = 200,
        concurrency: int = 4,
        cache: bool = True,
        forbidden_markers: Iterable[str] = (),
        per_tool: dict[str, int] | None = None,
    ):
        self.tools = tools
        self.timeout_s = timeout_s
        self.max_result_chars = max_result_chars
        self.max_input_chars = max_input_chars
        self.concurrency = max(1, concurrency)
        self.per_tool = {t: max(1, n) for t, n in (per_tool or {}).items()}
        self.forbidden_markers = tuple(m for m in forbidden_markers if m)
        self._cache: dict[tuple, Outcome] | None = {} if cache else None
        self._validators = {name: schema_validator(t) for name, t in tools.items()}  # built once, not per call
        self.calls_executed = 0  # calls that actually ran (cache misses)
        for tool in tools.values():
            tool.prepare()  # data and indexes loaded now, not inside the first call's timeout

    def key(self, tool: str, tool_input: str, date: str | None) -> tuple:
        t = self.tools.get(tool)
        return (tool, tool_input, date if (t is not None and t.needs_date) else None)

    def _invoke(self, tool: Tool, tool_input: str, date: str | None, validator) -> Outcome:
        invalid = check_arguments(tool, tool_input, validator)
        if invalid is not None:
            return invalid
        try:
            result = tool.run(tool_input, date)
        except ToolError as e:
            return _error(e.code, e.message, e.hint)
        except RecursionError:
            return _error("exception", "RecursionError: input nested too deeply")
        except Exception as e:  # noqa: BLE001 - any tool failure is a record, not a crash
            return _error("exception", f"{type(e).__name__}: {e}")
        if not isinstance(result, str):
            return _error("bad_result", f"tool returned {type(result).__name__}, not str")
        for marker in self.forbidden_markers:
            result = result.replace(marker, " ")
        result = " ".join(result.split())
        if not result:
            return _error("empty_result", "the tool returned an empty result")
        if len(result) > self.max_result_chars:
            result = result[: self.max_result_chars].rstrip() + "…"
        return Outcome(result, None)

    def _start(self, tool_name: str, tool_input: str, date: str | None, finished: threading.Event) -> _Call:
        """One call to run in a daemon thread (:meth:`_Call.start`); ``finished`` is set when it answers."""
        tool, validator = self.tools[tool_name], self._validators[tool_name]
        return _Call(tool_name, lambda: self._invoke(tool, tool_input, date, validator), finished,
                     time.monotonic() + self.timeout_s)

    def close(self) -> None:
        """Release the tools (stop their MCP servers); the sandbox runs no call after this."""
        for tool in self.tools.values():
            tool.close()

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def limit(self, tool: str) -> int:
        """Calls of ``tool`` in flight at once."""
        return self.per_tool.get(tool, self.concurrency)

    def run(self, tool: str, tool_input: str, date: str | None = None) -> Outcome:
        """Execute one call (or return the cached outcome)."""
        return self.run_many([(tool, tool_input, date)])[0]

    def call(self, tool: str, arguments, date: str | None = None) -> Outcome:
        """Execute one call given as an argument object (an MCP ``tools/call``): refused with
        ``invalid_arguments`` unless it satisfies the tool's JSON Schema, else run as the call
        ``[Tool(text)]`` whose arguments it is, with the same limits as every call."""
        if tool not in self.tools:
            return self.run(tool, "", date)  # the unknown_tool error
        t = self.tools[tool]
        return schema_errors(t, arguments, self._validators[tool]) or self.run(tool, t.input_text(arguments), date)

    def run_many(self, calls: list[tuple[str, str, str | None]]) -> list[Outcome]:
        """Execute calls, each unique (tool, input, date) once, at most
        :meth:`limit` of a tool at a time, each with its own timeout; the
        outcomes come back in the order of ``calls`` whatever order they finish in."""
        keys = [self.key(*c) for c in calls]
        queues: dict[str, deque] = {}
        results: dict[tuple, Outcome] = {}
        queued: set[tuple] = set()
        for k, c in zip(keys, calls):
            if (self._cache is not None and k in self._cache) or k in results or k in queued:
                continue
            if c[0] not in self.tools:
                results[k] = _error("unknown_tool", f"no tool named {c[0]!r}")
            elif len(c[1]) > self.max_input_chars:
                results[k] = _error("too_long", f"{c[0]}: input of {len(c[1]):,} characters, over the "
                                                f"{self.max_input_chars} allowed (tools.max_input_chars)",
                                    f"{c[0]} takes {self.tools[c[0]].input_description}, e.g. "
                                    f"[{c[0]}({self.tools[c[0]].example})]")
            else:
                queued.add(k)
                queues.setdefault(c[0], deque()).append((k, c))
        self._run_queues(queues, results)
        if self._cache is not None:
            self._cache.update(results)
            return [self._cache[k] for k in keys]
        return [results[k] for k in keys]

    def _run_queues(self, queues: dict[str, deque], results: dict[tuple, Outcome]) -> None:
        """Start calls while their tool is under its limit; collect each when it answers or its time is up
        (a call past its timeout is abandoned, :meth:`_Call.abandon`, and its slot given to the next)."""
        finished = threading.Event()
        running: dict[tuple, _Call] = {}
        try:
            self._collect(queues, results, running, finished)
        except BaseException:  # a stop (or any error) leaves no call working for nobody
            stop_by = time.monotonic() + 1.0
            for call in running.values():
                call.abandon()
            for call in running.values():
                call.join(max(0.0, stop_by - time.monotonic()))
            raise

    def _collect(self, queues: dict[str, deque], results: dict[tuple, Outcome], running: dict[tuple, _Call],
                 finished: threading.Event) -> None:
        in_flight: dict[str, int] = dict.fromkeys(queues, 0)
        while any(queues.values()) or running:
            for tool, queue in queues.items():
                while queue and in_flight[tool] < self.limit(tool):
                    k, (_, tool_input, date) = queue.popleft()
                    running[k] = call = self._start(tool, tool_input, date, finished)
                    call.start()  # in ``running`` first: a stop raised as it starts still abandons it
                    in_flight[tool] += 1
                    self.calls_executed += 1
            next_deadline = min(call.deadline for call in running.values())
            finished.wait(max(0.0, next_deadline - time.monotonic()))
            finished.clear()
            now = time.monotonic()
            for k, call in list(running.items()):
                if call.outcome is None and now < call.deadline:
                    continue
                outcome = call.outcome or call.abandon()
                results[k] = outcome or _error("timeout", f"no answer within {self.timeout_s:g} s")
                del running[k]
                in_flight[call.tool] -= 1


def call_markers(style: CallStyle) -> tuple[str, ...]:
    """Every marker of a call style: call start, call end and each result marker."""
    return (style.start, style.end, *style.arrows)


def build_sandbox(cfg: PipelineConfig, tools: dict[str, Tool] | None = None, cache: bool = True) -> Sandbox:
    """The sandbox of a pipeline config: ``tools`` (default: every enabled tool)
    with the limits of ``cfg.tools``.

    One marker policy for every stage: a result never contains a call marker of
    ``cfg.calls.style`` (start, end or a result marker; each is replaced by a
    space). A result with ``]`` would close its call early, one with ``[`` or
    ``→`` would read as a call of its own, in the training data (execute) as
    in generation (evaluate, ``toolformer generate``).
    """
    from toolformer.tools import build_tools
    from toolformer.tools.calls import get_style

    tools = build_tools(cfg.tools) if tools is None else tools
    return Sandbox(tools, cfg.tools.timeout_s, cfg.tools.max_result_chars, cfg.tools.max_input_chars,
                   cfg.tools.concurrency, cache=cache, per_tool=cfg.tools.per_tool_concurrency,
                   forbidden_markers=call_markers(get_style(cfg.calls.style)))
