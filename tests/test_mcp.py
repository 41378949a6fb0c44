"""toolformer mcp-serve: the enabled tools over stdio, checked with the MCP SDK's own client; it refuses arguments
its tools' schemas refuse and inputs over the limits, and goes on serving. Every line that is no valid message
gets one JSON-RPC error, and the server stops reading while its replies are unread."""

import io
import json
import subprocess
import sys
import threading
import time

import pytest
from helpers import ROOT, mcp_serve_params

from toolformer.integrations import mcpwire

mcp = pytest.importorskip("mcp")
INIT = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
    "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "test", "version": "1"}}}
PING = '{"jsonrpc": "2.0", "id": 7, "method": "ping"}'
CALL = {"jsonrpc": "2.0", "id": "c", "method": "tools/call", "params": {"name": "Calculator",
                                                                       "arguments": {"input": "6 * 7"}}}
# A line and its answer: (code, id), or None for no answer (a notification, a response, a blank line).
LINES = [
    ('[{"jsonrpc": "2.0", "id": 1, "method": "ping"}]', (-32600, None)),  # a batch
    ("[]", (-32600, None)), ("42", (-32600, None)), ('"ping"', (-32600, None)), ("null", (-32600, None)),
    ("not json", (-32700, None)), ("[" * 100_000 + "]" * 100_000, (-32700, None)),
    ('{"jsonrpc": "2.0", "id": "\\ud800", "method": "ping"}', (-32700, None)),  # a lone surrogate
    ('{"jsonrpc": "2.0", "id": {"a": 1}, "method": "ping"}', (-32600, None)),
    ('{"jsonrpc": "2.0", "id": null, "method": "ping"}', (-32600, None)),
    ('{"jsonrpc": "2.0", "id": true, "method": "ping"}', (-32600, None)),
    ('{"jsonrpc": "2.0", "id": 1.5, "method": "ping"}', (-32600, None)),
    ('{"jsonrpc": "1.0", "id": 2, "method": "ping"}', (-32600, 2)), ('{"id": 3, "method": "ping"}', (-32600, 3)),
    ('{"jsonrpc": "2.0", "id": 4}', (-32600, 4)), ('{"foo": "bar"}', (-32600, None)),
    ('{"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": ["Calculator", {"input": "1"}]}', (-32602, 5)),
    ('{"jsonrpc": "2.0", "method": "notifications/x", "params": [1]}', None),
    ('{"jsonrpc": "2.0", "id": 6, "result": {}}', None), ('{"jsonrpc": "2.0", "id": 6, "result": 5}', None),
    ("   ", None), (PING, None),  # a valid message: handed on, not answered here
]


@pytest.mark.parametrize(("line", "answer"), LINES, ids=range(len(LINES)))
def test_every_bad_line_gets_one_error_and_a_good_one_is_handed_on(line, answer):
    msg, reply = mcpwire.check_line(line.encode())
    assert (reply["error"]["code"], reply["id"]) == answer if answer else reply is None
    assert (msg is not None) == (line == PING or '"result"' in line)  # a response goes on too (and is dropped)
    assert reply is None or msg is None
    assert mcpwire.check_line(b"\xff\xfe{}")[1]["error"]["code"] == -32700  # not UTF-8


def test_a_line_over_the_limit_is_refused_and_skipped_to_its_end(monkeypatch):
    monkeypatch.setattr(mcpwire, "MAX_LINE_BYTES", 60)
    wire = io.BytesIO(b'{"a": "' + b"x" * 500 + b'"}\n' + PING.encode() + b"\n")
    first = mcpwire.read_line(wire)
    assert mcpwire.check_line(first)[1]["error"] == {"code": -32600, "message": "Invalid Request: a line over 60 bytes"}
    assert mcpwire.read_line(wire) == PING.encode() + b"\n" and mcpwire.read_line(wire) is None


def test_pending_requests_are_bounded_and_freed_by_answers_and_cancellations():
    import anyio

    async def taken(pending) -> bool:
        with anyio.move_on_after(0.2):
            await pending.take()
            return True
        return False

    async def scenario() -> list[bool]:
        pending, seen = mcpwire.Pending(2), []
        for rid in (1, "two"):
            await pending.take()
            pending.read({"jsonrpc": "2.0", "id": rid, "method": "ping"})
        seen.append(await taken(pending))  # two unanswered: no third line is read
        pending.answered(1)
        seen.append(await taken(pending))
        pending.read({"jsonrpc": "2.0", "method": "notifications/initialized"})  # a notification keeps no slot
        seen.append(await taken(pending))
        pending.read({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": "two"}})
        seen.append(await taken(pending))  # the SDK never answers a cancelled request: its slot is free
        pending.answered(1)  # an answer to no pending request frees nothing
        seen += [await taken(pending), await taken(pending)]
        return seen

    assert anyio.run(scenario) == [False, True, True, True, True, False]


def serve_process() -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "toolformer.cli", "mcp-serve", "--config", "configs/tiny.yaml"],
                            cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


@pytest.mark.slow
def test_the_server_answers_every_bad_line_once_and_serves_on():
    lines = [json.dumps(INIT)] + [line for line, _ in LINES] + [json.dumps(CALL)]
    out, err = serve_process().communicate(("\n".join(lines) + "\n").encode(), timeout=120)
    replies = [json.loads(line) for line in out.decode().splitlines()]
    assert replies[0]["id"] == 0 and "result" in replies[0]
    expected = [answer for _, answer in LINES if answer] + [(None, 7), (None, "c")]
    assert [(r["error"]["code"] if "error" in r else None, r["id"]) for r in replies[1:]] == expected
    assert replies[-1]["result"]["content"][0]["text"] == "42"  # a request read before stdin ended is answered
    assert b"Traceback" not in err


@pytest.mark.slow
def test_a_client_that_never_reads_stops_the_server_reading():
    proc, sent, total = serve_process(), [0], 600
    assert proc.stdin and proc.stdout

    def write() -> None:
        assert proc.stdin
        for i in range(total):
            line = f'{{"jsonrpc": "2.0", "id": {i}, "method": "tools/list"}}'  # a reply of some KiB
            proc.stdin.write(f"{line:<2000}\n".encode())  # 2,000 bytes a line: the pipe holds few
            proc.stdin.flush()
            sent[0] = i + 1

    proc.stdin.write((json.dumps(INIT) + "\n").encode())
    proc.stdin.flush()
    assert json.loads(proc.stdout.readline())["id"] == 0
    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    last, since = -1, time.monotonic()
    while time.monotonic() - since < 2 and sent[0] < total:  # until the writes stall for 2 s
        time.sleep(0.1)
        if sent[0] != last:
            last, since = sent[0], time.monotonic()
    assert sent[0] < 300  # the pipes and the 32 unanswered requests hold some tens of them, not 600
    ids = [json.loads(proc.stdout.readline())["id"] for _ in range(total)]  # reading lets the rest through
    writer.join(60)
    proc.stdin.close()
    assert proc.wait(60) == 0 and sorted(ids) == list(range(total))


@pytest.mark.slow
def test_mcp_serve_lists_and_calls_the_tools(capsys):
    import anyio
    from mcp.client.session import ClientSession
    from mcp.client.stdio import stdio_client
    from mcp.shared.exceptions import MCPError

    from toolformer.cli.app import main

    assert main(["tools", "list", "--format", "mcp", "--config", "configs/tiny.yaml"]) == 0
    listed = json.loads(capsys.readouterr().out)["tools"]

    async def session() -> tuple:
        async with stdio_client(mcp_serve_params()) as (read, write), ClientSession(read, write) as s:
            await s.initialize()
            tools = (await s.list_tools()).tools
            calls = [await s.call_tool(name, args) for name, args in (
                ("Calculator", {"input": "1,250 + 3 * 4"}), ("Calculator", {"input": "3 +* 4"}),
                ("Calendar", {}))]
            try:
                await s.call_tool("Nope", {"input": "x"})
            except MCPError as e:  # the MCP specification: an unknown tool is a protocol error, not a tool result
                calls.append(e)
            return tools, calls

    tools, (ok, bad, today, unknown) = anyio.run(session)
    served = [{"name": t.name, "description": t.description, "inputSchema": t.input_schema,
               "annotations": {"readOnlyHint": t.annotations.read_only_hint}} for t in tools]
    assert served == listed  # tools/list is `toolformer tools list --format mcp`
    assert [t["name"] for t in listed] == ["Calculator", "Calendar", "WikiSearch", "QA"]
    assert not ok.is_error and ok.content[0].text == "1262"
    assert bad.is_error and bad.structured_content["code"] == "syntax"
    assert "Calculator(" in bad.structured_content["hint"]
    assert not today.is_error and today.content[0].text.startswith("Today is ")
    assert (unknown.code, unknown.message) == (-32602, "Unknown tool: Nope")


@pytest.mark.slow
def test_mcp_serve_refuses_arguments_its_schemas_refuse_and_inputs_over_the_limits():
    pytest.importorskip("mcp")
    import anyio
    from mcp.client.session import ClientSession
    from mcp.client.stdio import stdio_client

    calls = [
        ("Calculator", {"input": 5}), ("Calculator", {"foo": "bar"}), ("Calculator", {}),
        ("Calculator", {"input": "1 + 1", "extra": True}), ("Calendar", {"input": "today"}),
        ("WikiSearch", {"input": "Danube " * 150_000}), ("QA", {"input": "Where? " * 40}),
        ("Calculator", {"input": "5²"}), ("Calculator", {"input": "2 x 3"}),
    ]

    async def session() -> list:
        async with stdio_client(mcp_serve_params()) as (read, write), ClientSession(read, write) as s:
            await s.initialize()
            return [await s.call_tool(name, args) for name, args in calls]

    (number, unknown_key, no_input, extra, calendar, huge, long_question, square, product) = anyio.run(session)
    for bad in (number, unknown_key, no_input, extra, calendar):
        assert bad.is_error and bad.structured_content["code"] == "invalid_arguments", bad
        assert json.loads(bad.content[0].text) == bad.structured_content
    assert "input: 5 is not of type 'string'" in number.structured_content["message"]
    assert "'input' is a required property" in unknown_key.structured_content["message"]
    assert "'foo'" in unknown_key.structured_content["message"]
    assert "'input' is a required property" in no_input.structured_content["message"]
    assert "'extra'" in extra.structured_content["message"]
    assert "Calculator(400 / 1400)" in number.structured_content["hint"]
    for long in (huge, long_question):  # tools.max_input_chars (200) holds for every tool, not just Calculator
        assert long.is_error and long.structured_content["code"] == "too_long"
        assert "tools.max_input_chars" in long.structured_content["message"]
    assert square.is_error and square.structured_content["code"] == "not_arithmetic"
    assert not product.is_error and product.content[0].text == "6"  # the server still serves after the refusals
