"""Resident memory of ``toolformer mcp-serve`` under a client that sends requests and never reads a reply.

    python scripts/mcp_unread_memory.py --requests 20000

Starts the server on ``configs/tiny.yaml``, initializes, then writes ``--requests`` Calculator calls from a thread
without reading stdout. When the writes are done or have stalled (the server stopped reading) and the server's
memory has settled, prints one JSON line: the requests written, the server's resident memory after initializing
(``VmRSS_idle``), now (``VmRSS``) and at its peak (``VmHWM``), in MiB. Then it reads every reply and checks that
each request got exactly one (Linux: /proc).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
INIT = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
    "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "unread", "version": "1"}}}


def memory_mib(pid: int) -> dict[str, float]:
    fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
    return {key: round(int(fields[key].split()[0]) / 1024, 1) for key in ("VmRSS", "VmHWM")}


def settle(pid: int, sent: list[int], total: int, quiet_s: float) -> None:
    """Wait until the writes are done or stalled and the resident memory has stopped moving for ``quiet_s``."""
    last = (-1, -1.0)
    since = time.monotonic()
    while time.monotonic() - since < quiet_s:
        time.sleep(0.25)
        now = (sent[0], memory_mib(pid)["VmRSS"])
        if now[0] != last[0] or abs(now[1] - last[1]) > 0.5:
            last, since = now, time.monotonic()
    if sent[0] < total:
        print(f"writes stalled after {sent[0]:,} of {total:,} requests (the server stopped reading)", file=sys.stderr)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=20_000)
    ap.add_argument("--quiet-s", type=float, default=3.0, help="how long nothing moves before measuring")
    args = ap.parse_args()
    proc = subprocess.Popen([sys.executable, "-m", "toolformer.cli", "mcp-serve", "--config", "configs/tiny.yaml"],
                            cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    assert proc.stdin and proc.stdout
    proc.stdin.write((json.dumps(INIT) + "\n").encode())
    proc.stdin.flush()
    proc.stdout.readline()
    proc.stdin.write(b'{"jsonrpc": "2.0", "method": "notifications/initialized"}\n')
    idle = memory_mib(proc.pid)["VmRSS"]
    sent = [0]

    def write() -> None:
        assert proc.stdin
        for i in range(1, args.requests + 1):
            proc.stdin.write((json.dumps({"jsonrpc": "2.0", "id": i, "method": "tools/call", "params": {
                "name": "Calculator", "arguments": {"input": f"{i} + 1"}}}) + "\n").encode())
            proc.stdin.flush()
            sent[0] = i

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    settle(proc.pid, sent, args.requests, args.quiet_s)
    print(json.dumps({"requests": args.requests, "written_before_measuring": sent[0], "VmRSS_idle": idle,
                      **memory_mib(proc.pid)}))
    replies = {json.loads(proc.stdout.readline())["id"] for _ in range(args.requests)}
    writer.join()
    proc.stdin.close()
    proc.wait(30)
    ok = replies == set(range(1, args.requests + 1))
    print(f"replies: {len(replies):,} distinct ids, one per request: {ok}; server exit {proc.returncode}")
    return 0 if ok and proc.returncode == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
