"""The stdio transport of ``toolformer mcp-serve``: one JSON-RPC message a line, each line checked before the MCP
SDK's server sees it, and a bound on the replies the client has not read.

Every line that is no valid message gets exactly one JSON-RPC error at once (:func:`check_line`), never silence:

- not UTF-8, not JSON, JSON nested too deeply to read, or a string with a lone surrogate: -32700 Parse error,
  id null;
- a JSON array (a batch: MCP 2025-06-18 removed them, so the whole batch is refused, not its members), a scalar,
  ``null``, a line over :data:`MAX_LINE_BYTES`, an object with an ``id`` that is no string or integer (null,
  an object, a bool, 1.5), without ``"jsonrpc": "2.0"`` or without a string ``method``: -32600 Invalid Request,
  with the request's id where it has a valid one, else id null;
- a request whose ``params`` is no object (an array): -32602 Invalid params, with its id.

A notification (no ``id``) with bad params, and any response from the client, are dropped without a reply (JSON-RPC
never answers either); a blank line is skipped.

Backpressure: at most :data:`MAX_PENDING` requests are read and not yet answered on stdout. When a client stops
reading, the replies fill the pipe, the writes block, the count reaches the bound and the server reads no more
lines until the client reads: its memory stays flat instead of holding every reply (``scripts/mcp_unread_memory.py``).
A request the client cancels (``notifications/cancelled``) frees its place: the SDK never answers it.

While serving, fd 0 reads the null device and fd 1 writes to stderr, so a tool or a child process that reads
stdin or prints cannot touch the wire (as the SDK's own ``stdio_server`` does).
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import BinaryIO, TypeGuard

from toolformer.config.text import parse_json

MAX_PENDING = 32  # requests read and not yet answered on stdout
MAX_LINE_BYTES = 16 * 2**20  # a longer line is refused unread (its bytes are skipped to its end)
PARSE_ERROR, INVALID_REQUEST, INVALID_PARAMS = -32700, -32600, -32602
RequestId = int | str
TOO_LONG = b"\x00too long\x00"  # what read_line gives for a line over MAX_LINE_BYTES (no JSON text starts with NUL)


def error_reply(rid: RequestId | None, code: int, message: str) -> dict:
    return {"jsonrpc": "2.0", "id": rid, "error": {"code": code, "message": message}}


def valid_id(rid: object) -> TypeGuard[RequestId]:
    """MCP: a request's id is a string or an integer (a bool is no integer here; null is not allowed)."""
    return isinstance(rid, str | int) and not isinstance(rid, bool)


def parsed(line: bytes) -> object:
    """The JSON value of a line; ValueError (the parse error's message) when it is no UTF-8 JSON text."""
    try:
        value = parse_json(line.decode("utf-8"))
        json.dumps(value, ensure_ascii=False).encode("utf-8")  # a lone surrogate ("\ud800") is no Unicode text
    except UnicodeDecodeError:
        raise ValueError("Parse error: not UTF-8 text") from None
    except UnicodeEncodeError:
        raise ValueError("Parse error: a string holds a lone surrogate (no Unicode text)") from None
    except json.JSONDecodeError as e:
        raise ValueError(f"Parse error: {e.msg} (character {e.pos})") from None
    except ValueError as e:  # an integer of over 4,300 digits
        raise ValueError(f"Parse error: {str(e).split(':')[0]}") from None
    except RecursionError:
        raise ValueError("Parse error: nested too deeply to read") from None
    return value


def check_line(line: bytes) -> tuple[dict | None, dict | None]:
    """(the message to hand to the SDK, the error to answer) for one line read; (None, None): nothing to do."""
    if not line.strip():
        return None, None
    if line == TOO_LONG:
        return None, error_reply(None, INVALID_REQUEST, f"Invalid Request: a line over {MAX_LINE_BYTES:,} bytes")
    try:
        msg = parsed(line)
    except ValueError as e:
        return None, error_reply(None, PARSE_ERROR, str(e))
    if isinstance(msg, list):
        return None, error_reply(None, INVALID_REQUEST, "Invalid Request: batches are not supported (one JSON-RPC "
                                                        "message a line, MCP 2025-06-18)")
    if not isinstance(msg, dict):
        kind = "null" if msg is None else "string" if isinstance(msg, str) else "boolean" if isinstance(msg, bool) \
            else "number"
        return None, error_reply(None, INVALID_REQUEST, f"Invalid Request: a JSON {kind} is no JSON-RPC message "
                                                        "(an object)")
    rid, is_request = msg.get("id"), "id" in msg
    if "method" not in msg and ("result" in msg or "error" in msg):
        return (msg if valid_id(rid) else None), None  # a response from the client: never answered
    if is_request and not valid_id(rid):
        return None, error_reply(None, INVALID_REQUEST, "Invalid Request: id must be a string or an integer")
    answer_id = rid if is_request else None
    if msg.get("jsonrpc") != "2.0":
        return None, error_reply(answer_id, INVALID_REQUEST, 'Invalid Request: "jsonrpc" must be "2.0"')
    if not isinstance(msg.get("method"), str):
        return None, error_reply(answer_id, INVALID_REQUEST, 'Invalid Request: "method" must be a string')
    if msg.get("params") is not None and not isinstance(msg["params"], dict):
        if not is_request:
            return None, None  # a notification is never answered
        return None, error_reply(rid, INVALID_PARAMS, 'Invalid params: "params" must be an object')
    return msg, None


def read_line(wire: BinaryIO) -> bytes | None:
    """The next line of ``wire``; None at its end. A line over :data:`MAX_LINE_BYTES` is skipped to its end and
    given as :data:`TOO_LONG`."""
    line = wire.readline(MAX_LINE_BYTES + 1)
    if len(line) > MAX_LINE_BYTES and not line.endswith(b"\n"):
        while (rest := wire.readline(MAX_LINE_BYTES)) and not rest.endswith(b"\n"):
            pass
        return TOO_LONG
    return line or None


class Pending:
    """The requests read and not yet answered on the wire, at most ``limit`` (a slot taken before each line)."""

    def __init__(self, limit: int):
        import anyio

        self.slots = anyio.Semaphore(limit)
        self.ids: Counter[RequestId] = Counter()
        self.none_left = anyio.Event()

    async def take(self) -> None:
        await self.slots.acquire()

    def read(self, msg: dict | None) -> None:
        """A line was read: a request keeps its slot; any other line gives it back, a cancellation frees the
        cancelled request's."""
        if msg is not None and "method" in msg and "id" in msg:
            self.ids[key(msg["id"])] += 1
            return
        self.slots.release()
        if msg is not None and msg.get("method") == "notifications/cancelled":
            rid = (msg.get("params") or {}).get("requestId")
            if valid_id(rid):
                self.answered(rid)

    def answered(self, rid: RequestId) -> None:
        k = key(rid)
        if self.ids[k] > 0:
            self.ids[k] -= 1
            self.slots.release()
        if not self.ids[k]:
            del self.ids[k]
        if not self.ids:
            self.none_left.set()

    async def drained(self, wait_s: float) -> None:
        """Wait, at most ``wait_s``, until every request read is answered."""
        import anyio

        with anyio.move_on_after(wait_s):
            while self.ids:
                self.none_left = anyio.Event()
                await self.none_left.wait()


def key(rid: RequestId) -> RequestId:
    """An id as the SDK matches a cancellation to its request: "7" and 7 are one id."""
    try:
        return int(rid)
    except ValueError:
        return rid


@asynccontextmanager
async def stdio_transport(drain_s: float, limit: int = MAX_PENDING) -> AsyncIterator[tuple]:
    """(read stream, write stream) for ``Server.run``, served over this process's stdin and stdout. At the end of
    stdin the requests read are answered (for at most ``drain_s``) before the server is told the input ended."""
    import anyio
    from mcp.shared.message import SessionMessage

    wire_in, wire_out, restore = claim_stdio()
    pending = Pending(limit)
    read_send, read_recv = anyio.create_memory_object_stream[SessionMessage | Exception](0)
    write_send, write_recv = anyio.create_memory_object_stream[SessionMessage | bytes](0)
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(read_wire, wire_in, read_send, write_send.clone(), pending, drain_s)
            tg.start_soon(write_wire, wire_out, write_recv, pending)
            yield read_recv, write_send
    finally:
        restore()


async def read_wire(wire: BinaryIO, to_server, to_wire, pending: Pending, drain_s: float) -> None:
    """Hand each valid message to the server and answer each bad line, one line at a time, while a slot is free."""
    import anyio
    from mcp.shared.message import SessionMessage
    from mcp_types import jsonrpc_message_adapter

    async with to_server, to_wire:
        while True:
            await pending.take()
            line = await anyio.to_thread.run_sync(read_line, wire, abandon_on_cancel=True)
            if line is None:
                await pending.drained(drain_s)
                return
            msg, reply = check_line(line)
            message = None
            if msg is not None:
                try:
                    message = jsonrpc_message_adapter.validate_python(msg)
                except ValueError:  # only a client's response of another shape gets here: dropped, like any response
                    msg = None
            pending.read(msg)
            if message is not None:
                await to_server.send(SessionMessage(message))
            if reply is not None:
                await to_wire.send(json.dumps(reply, separators=(",", ":"), ensure_ascii=False).encode())


async def write_wire(wire: BinaryIO, from_server, pending: Pending) -> None:
    """Write each message as one line (the server's, or bytes: an error :func:`read_wire` answers itself); the
    server's answer to a request frees its slot. A client gone (a broken pipe): the rest is dropped, so that no
    handler waits on a write forever."""
    import anyio

    broken = False
    async with from_server:
        async for item in from_server:
            own = isinstance(item, bytes)
            if not broken:
                data = item if own else item.message.model_dump_json(by_alias=True, exclude_unset=True).encode()
                try:
                    await anyio.to_thread.run_sync(write_line, wire, data, abandon_on_cancel=True)
                except OSError:
                    broken = True
            rid = None if own or hasattr(item.message, "method") else getattr(item.message, "id", None)
            if valid_id(rid):
                pending.answered(rid)


def write_line(wire: BinaryIO, data: bytes) -> None:
    wire.write(data + b"\n")
    wire.flush()


def claim_stdio() -> tuple[BinaryIO, BinaryIO, Callable[[], None]]:
    """The wire's stdin and stdout on descriptors of their own; fd 0 then reads the null device and fd 1 writes
    to stderr. Returns them and a function that puts fd 0 and 1 back."""
    saved = os.dup(0), os.dup(1)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    os.dup2(2, 1)

    def restore() -> None:
        os.dup2(saved[0], 0)
        os.dup2(saved[1], 1)

    return os.fdopen(os.dup(saved[0]), "rb"), os.fdopen(os.dup(saved[1]), "wb"), restore
