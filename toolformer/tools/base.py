"""What every tool is: a name, a description, a few-shot prompt and a call."""

from __future__ import annotations

from dataclasses import dataclass


class ToolError(Exception):
    """A call that yields no result. ``code`` is a short machine-readable kind
    (``syntax``, ``division_by_zero``, ``not_found`` ...)."""

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code
        self.message = message

    def as_dict(self) -> dict:
        return {"code": self.code, "message": self.message}


@dataclass
class Tool:
    """Base of the tools. Subclasses set the class attributes and implement
    :meth:`run`; they raise :class:`ToolError` for calls without a result."""

    name = ""
    description = ""
    """One paragraph: what the tool does and returns."""
    input_description = ""
    """What the input string must be."""
    prompt = ""
    """Few-shot prompt P(x) for the paper's sampler; ``{text}`` marks where x goes.
    Written with `[`, `]` and `→`; :func:`toolformer.tools.render_prompt` adapts
    it to the configured call style."""
    read_only = True
    """False for tools with side effects; annotation refuses them unless allowed."""
    needs_date = False
    """The result depends on the document date (part of the cache key)."""

    def run(self, tool_input: str, date: str | None = None) -> str:
        raise NotImplementedError
