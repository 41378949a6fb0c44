"""What every tool is: a name, a description, a JSON Schema of its
arguments, a few-shot prompt and a call.

The paper's tools take one string. Their schema is an object with one
string property ``input`` (described, with an example); the text of a call
``[Tool(x)]`` is the argument object ``{"input": "x"}``. A tool that takes
nothing (Calendar) has an empty object schema and ignores what a call writes.
A tool also declares the grammar of its input (``input_pattern``, a regular
expression) that constrained decoding keeps a model's calls to. Code a call
must finish although the sandbox gives up on it runs in :func:`uninterrupted`.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

TEXT_PATTERN = r"[^\n]*\w[^\n]*"
"""The input grammar of the tools that take text (a question, a query): one line with a letter or digit."""


class ToolError(Exception):
    """A call that yields no result. ``code`` is a short machine-readable kind
    (``syntax``, ``division_by_zero``, ``not_found`` ...); ``hint`` says how to
    write a call that works, when there is a way."""

    def __init__(self, code: str, message: str, hint: str = ""):
        super().__init__(message)
        self.code = code
        self.message = message
        self.hint = hint

    def as_dict(self) -> dict:
        return {"code": self.code, "message": self.message, "hint": self.hint}


def side_effects_allowed(allow: bool | list[str], name: str) -> bool:
    """Whether ``tools.allow_side_effects`` (true, or a list of tool names) lets tool ``name`` run although it is
    not read-only."""
    return allow is True or (isinstance(allow, list) and name in allow)


class CallAbandoned(BaseException):
    """Raised in the thread of a call the sandbox gave up on (past its timeout), so that the tool's code stops
    working, and allocating, for nobody. A BaseException: a tool's ``except Exception`` does not keep it."""


CURRENT_CALL = threading.local()  # .call: the sandbox's call whose thread this is (`sandbox._Call`)


@contextmanager
def uninterrupted() -> Iterator[None]:
    """Run the block to its end even if the sandbox abandons the call meanwhile; the call stops right after.
    For work whose result later calls reuse and whose size is bounded (a tool loading its data file)."""
    call = getattr(CURRENT_CALL, "call", None)
    if call is None:  # not in a sandbox call
        yield
        return
    with call.lock:
        call.shields += 1
    try:
        yield
    finally:
        with call.lock:
            call.shields -= 1
            stop = call.abandoned and not call.shields
        if stop:
            raise CallAbandoned


def prepare_data(load: Callable[[], None]) -> None:
    """A tool's :meth:`Tool.prepare`: ``load()`` its data, index or model now; a failure (a missing or bad
    file) is left for each call to report, as it is when the first call loads it."""
    with contextlib.suppress(Exception):  # the calls return this error (each call loads again)
        load()


@dataclass
class Tool:
    """Base of the tools. Subclasses set the class attributes and implement
    :meth:`run`; they raise :class:`ToolError` for calls without a result."""

    name = ""
    description = ""
    """One paragraph: what the tool does and returns."""
    input_description = ""
    """What the input string must be."""
    example = ""
    """One input that works, shown in the schema."""
    takes_input = True
    """False for a tool whose call has no input (its schema is an empty object)."""
    input_pattern = r"[^\n]*"
    """The grammar of the input: a regular expression (Python syntax, no flags, lookarounds or back-references)
    that the whole input matches, like ``re.fullmatch``. Constrained decoding
    (:mod:`toolformer.lm.constrain`) lets a model write only inputs that match it, so it should be no wider
    than what :meth:`run` accepts. Brackets are counted by the call syntax: a pattern may allow ``(`` and
    ``)`` anywhere, the decoder keeps them balanced. Ignored when ``takes_input`` is false (the input is
    empty). Default: any one line."""
    prompt = ""
    """Few-shot prompt P(x) for the paper's sampler; ``{text}`` marks where x goes.
    Written with `[`, `]` and `→`; :func:`toolformer.tools.render_prompt` adapts
    it to the configured call style."""
    read_only = True
    """False for tools with side effects; annotation refuses them unless allowed."""
    needs_date = False
    """The result depends on the document date (part of the cache key)."""
    proposer = ""
    """The rule proposer and pre-filter of `toolformer/stages/proposers.py` that propose this tool's calls;
    empty = those named like the tool, if any (an MCP tool borrows one by config)."""

    def run(self, tool_input: str, date: str | None = None) -> str:
        raise NotImplementedError

    @property
    def input_schema(self) -> dict:
        """JSON Schema (2020-12) of the call's arguments."""
        if not self.takes_input:
            return {"type": "object", "properties": {}, "additionalProperties": False}
        return {"type": "object",
                "properties": {"input": {"type": "string", "description": self.input_description,
                                         "examples": [self.example]}},
                "required": ["input"], "additionalProperties": False}

    def arguments(self, tool_input: str) -> dict:
        """The argument object of a call written ``[Name(tool_input)]`` (a tool without input ignores it)."""
        return {"input": tool_input} if self.takes_input else {}

    def input_text(self, arguments: dict) -> str:
        """The text of a call written ``[Name(text)]`` whose argument object is ``arguments`` (the inverse of
        :meth:`arguments`; ``mcp-serve`` turns an MCP call's arguments into it)."""
        return str(arguments.get("input", "")) if self.takes_input else ""

    def prepare(self) -> None:
        """Load what the tool's calls share (a data file and its index) before the first call, outside every
        call's timeout: the sandbox calls it once when it is built. A failure is left for the calls to report
        (each call tries again and returns the error). Most tools have nothing to load."""

    def close(self) -> None:
        """Release what the tool holds (an MCP tool stops its server); most tools hold nothing."""

    def schema(self) -> dict:
        """Name, description, argument schema and whether the tool only reads."""
        return {"name": self.name, "description": self.description, "input_schema": self.input_schema,
                "read_only": self.read_only}
