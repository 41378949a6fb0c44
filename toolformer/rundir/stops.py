"""Clean stops: SIGINT and SIGTERM end a command within seconds, keeping every complete unit of work.

The command line runs every command inside :func:`handled`. While a unit of
work runs inside :func:`deferred` (a shard being written, an optimizer step
and its checkpoint) the first signal only asks for a stop: the unit finishes,
its output is written, and :class:`Stopped` is raised when the block ends.
The part of a unit that only computes (a shard's documents or calls, however
long one of them is) runs inside :func:`abandonable`: there a signal, or one
that came earlier in the unit, raises :class:`Stopped` at once and the unit's
work is dropped -- nothing of it was written as complete, and a rerun does it
again. A signal outside these blocks, or a second one, raises :class:`Stopped`
at once; nothing partial is left that a rerun would take for complete, since
every output is written to a temporary name and renamed. The command line
turns :class:`Stopped` into one line -- what was kept and how to resume -- and
exit status 128 + the signal number (130 for SIGINT, 143 for SIGTERM), also when a library caught the
:class:`Stopped` and failed with another error (:func:`blamed`).
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Stopped(Exception):
    """The command was asked to stop by signal ``signum``."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


# depth: deferred blocks entered; abandon: abandonable blocks entered since the innermost deferred one;
# received: the first signal of the handled() block, whatever became of the Stopped it raised.
_state: dict = {"depth": 0, "abandon": 0, "pending": None, "kept": "", "received": None}


def _handler(signum: int, frame) -> None:
    if _state["received"] is None:
        _state["received"] = signum
    if _state["depth"] and not _state["abandon"] and _state["pending"] is None:
        _state["pending"] = signum  # quietly: the command's last line will say what was kept
        return
    raise Stopped(signum)


@contextmanager
def handled() -> Iterator[None]:
    """Route SIGINT and SIGTERM through :func:`deferred` for the block (from the
    main thread; elsewhere signals keep their handlers), then restore them."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {s: signal.signal(s, _handler) for s in SIGNALS}
    _state.update(depth=0, abandon=0, pending=None, kept="", received=None)
    try:
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, h)
        _state.update(depth=0, abandon=0, pending=None)  # a stop belongs to this block only


@contextmanager
def blamed() -> Iterator[None]:
    """Inside :func:`handled`: an error raised after a stop signal arrived is the stop's doing -- a library
    caught :class:`Stopped` and failed otherwise, or an import it cut off half way left a module broken -- so
    :class:`Stopped` is raised in its place (from it), and the command ends with its one line, not a traceback."""
    try:
        yield
    except Exception as e:
        if _state["received"] is not None and not isinstance(e, Stopped):
            raise Stopped(_state["received"]) from e
        raise


def forget() -> None:
    """The command dealt with the stop and goes on (``chat``: Ctrl-C ends one answer): later errors are its own."""
    _state.update(received=None, pending=None)


def pending() -> int | None:
    """The signal that asked for a stop, if any."""
    return _state["pending"]


@contextmanager
def deferred() -> Iterator[None]:
    """A unit of work that a signal does not interrupt; a stop asked for during
    it raises :class:`Stopped` when it ends (or, nested in :func:`abandonable`, when it returns there)."""
    outer = _state["abandon"]
    _state["depth"] += 1
    _state["abandon"] = 0
    try:
        yield
    finally:
        _state["depth"] -= 1
        _state["abandon"] = outer
    if (not _state["depth"] or _state["abandon"]) and _state["pending"] is not None:
        raise Stopped(_state["pending"])


@contextmanager
def abandonable() -> Iterator[None]:
    """Work of a :func:`deferred` unit that a stop may drop, because none of it is written yet (a shard's
    records being computed): a stop asked for before or during it raises :class:`Stopped` at once."""
    check()
    _state["abandon"] += 1
    try:
        yield
    finally:
        _state["abandon"] -= 1


def check() -> None:
    """Raise :class:`Stopped` if a signal asked for a stop (a loop's cooperative check)."""
    if _state["pending"] is not None:
        raise Stopped(_state["pending"])


def keep(note: str) -> None:
    """Say what a stop now would leave behind (the last complete unit of work)."""
    _state["kept"] = note


def kept() -> str:
    return _state["kept"]
