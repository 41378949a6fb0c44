"""A tool's data file that is a device, a FIFO, too large or not a file fails at once naming it, a bad line is
named by file and line, a call past its timeout stops reading without a thread left behind, and an index
slower to build than a call's timeout is built before the first call (toolformer.tools.qa,
toolformer.tools.wikisearch)."""

import json
import os
import threading
import time

import pytest

from toolformer.cli.app import main
from toolformer.tools import ToolError
from toolformer.tools import wikisearch as wikisearch_module
from toolformer.tools.base import Tool, uninterrupted
from toolformer.tools.qa import QA
from toolformer.tools.sandbox import Sandbox
from toolformer.tools.wikisearch import WikiSearch


def rss_mb() -> float:
    """This process's resident memory (VmRSS), in MB."""
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:")) / 1024


def tool_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("tool-")]


# -- a tool's data file -----------------------------------------------------------------------------------------------
def _call_qa_at(knowledge: str, capsys) -> tuple[int, dict, float, float]:
    """``toolformer tool QA ... tools.knowledge=<knowledge>``: exit status, output, seconds, RSS growth (MB)."""
    before, t0 = rss_mb(), time.monotonic()
    code = main(["tool", "QA", "Where does the Danube end?", "--json", f"tools.knowledge={knowledge}"])
    elapsed = time.monotonic() - t0
    time.sleep(1.0)  # a thread left reading would keep growing meanwhile
    return code, json.loads(capsys.readouterr().out), elapsed, rss_mb() - before


def test_qa_pointed_at_dev_zero_fails_fast_without_growing(capsys):
    code, out, elapsed, growth = _call_qa_at("/dev/zero", capsys)
    assert code == 1 and out["error"]["code"] == "bad_data"
    assert "/dev/zero" in out["error"]["message"] and "not a regular file" in out["error"]["message"]
    assert "tools.knowledge" in out["error"]["hint"]
    assert elapsed < 4  # the tool's timeout is 5 s: it is not what ended the call
    assert growth < 200, f"RSS grew by {growth:.0f} MB"
    assert "tool-QA" not in tool_threads()


def test_qa_pointed_at_a_fifo_fails_fast_even_with_a_writer(tmp_path, capsys):
    fifo = tmp_path / "knowledge.jsonl"
    os.mkfifo(fifo)
    code, out, elapsed, growth = _call_qa_at(str(fifo), capsys)  # no writer: opening it would wait forever
    assert code == 1 and out["error"]["code"] == "bad_data" and str(fifo) in out["error"]["message"]
    assert elapsed < 4 and growth < 200 and "tool-QA" not in tool_threads()

    stop = threading.Event()

    def write_forever() -> None:  # a writer that never stops: reading it would never end
        try:
            with open(fifo, "w") as f:
                while not stop.is_set():
                    f.write('{"subject": "x", "relation": "y", "object": "z"}\n' * 1000)
        except OSError:  # the reader went away
            pass

    writer = threading.Thread(target=write_forever, daemon=True)
    writer.start()
    try:
        code, out, elapsed, growth = _call_qa_at(str(fifo), capsys)
    finally:
        stop.set()
        os.close(os.open(fifo, os.O_RDONLY | os.O_NONBLOCK))  # lets a writer still waiting to open go
        writer.join(5)
    assert code == 1 and out["error"]["code"] == "bad_data"
    assert elapsed < 4 and growth < 200


def test_a_data_file_over_the_cap_or_not_a_file_is_refused_naming_it(tmp_path, monkeypatch):
    collection = tmp_path / "collection.jsonl"
    collection.write_text("".join(json.dumps({"title": f"T{i}", "text": "Danube " * 10}) + "\n" for i in range(50)))
    assert WikiSearch(collection).run("Danube").startswith("T")
    monkeypatch.setattr(wikisearch_module, "MAX_DATA_BYTES", collection.stat().st_size - 1)
    for tool in (WikiSearch(collection), QA(collection), WikiSearch(tmp_path)):
        with pytest.raises(ToolError) as e:
            tool.run("Danube")
        assert e.value.code == "bad_data" and str(e.value.message).startswith(str(tool.path))
    with pytest.raises(ToolError) as e:
        WikiSearch(tmp_path / "absent.jsonl").run("Danube")
    assert e.value.code == "missing_data" and "tools.collection" in e.value.hint


def test_a_bad_line_is_named_by_file_and_line(tmp_path):
    knowledge = tmp_path / "knowledge.jsonl"
    knowledge.write_bytes(b'{"subject": "a", "relation": "b", "object": "c"}\n\xff\xfe\n')
    with pytest.raises(ValueError, match=rf"{knowledge}:2: not UTF-8"):
        QA(knowledge).run("Where is a?")


# -- the sandbox's timeout path ----------------------------------------------------------------------------------------
def test_a_call_past_its_timeout_stops_allocating():
    grown = []

    class Hog(Tool):
        name = "Hog"

        def run(self, tool_input, date=None):
            chunks = []
            while len(chunks) < 600:  # 50 MB/s for 12 s if nothing stops it
                chunks.append(bytearray(1 << 20))
                grown.append(1)
                time.sleep(0.02)
            return "done"

    before = rss_mb()
    out = Sandbox({"Hog": Hog()}, timeout_s=0.3).run("Hog", "x")
    assert out.error["code"] == "timeout"
    deadline = time.monotonic() + 5
    while "tool-Hog" in tool_threads() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert "tool-Hog" not in tool_threads()  # the thread ended long before its loop would: nothing allocates
    n = len(grown)
    time.sleep(0.5)
    assert len(grown) == n < 100
    assert rss_mb() - before < 200


def test_data_loading_finishes_for_the_next_call_but_the_abandoned_call_stops():
    steps = []

    class Loader(Tool):
        name = "Loader"
        loaded = False

        def run(self, tool_input, date=None):
            if not self.loaded:
                with uninterrupted():
                    time.sleep(0.6)
                    self.loaded = True
            steps.append(tool_input)
            return "ok"

    sb = Sandbox({"Loader": Loader()}, timeout_s=0.2, cache=False)
    assert sb.run("Loader", "first").error["code"] == "timeout"
    deadline = time.monotonic() + 10
    while "tool-Loader" in tool_threads() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert sb.tools["Loader"].loaded and steps == []  # loaded, and nothing after the load ran for nobody
    assert sb.run("Loader", "second").result == "ok" and steps == ["second"]


def test_an_index_slower_to_build_than_the_timeout_is_built_before_the_first_call(tmp_path, monkeypatch, capsys):
    collection = tmp_path / "collection.jsonl"
    collection.write_text("".join(json.dumps({"title": f"Town {i}", "text": f"Town {i} lies on river {i}."}) + "\n"
                                  for i in range(40)))
    real_init = wikisearch_module.BM25Index.__init__

    def slow_init(self, *args, **kwargs):  # an index of a large collection: longer to build than a call may take
        time.sleep(0.6)
        real_init(self, *args, **kwargs)

    monkeypatch.setattr(wikisearch_module.BM25Index, "__init__", slow_init)
    monkeypatch.setattr(wikisearch_module, "PROGRESS_DOCS", 10)
    sb = Sandbox({"WikiSearch": WikiSearch(collection)}, timeout_s=0.2, cache=False)
    assert f"tools: building the BM25 index of WikiSearch's collection {collection}: 40 documents" in (
        capsys.readouterr().err)
    out = sb.run("WikiSearch", "river 7")
    assert out.ok and out.result.startswith("Town 7 >"), out
    missing = Sandbox({"WikiSearch": WikiSearch(tmp_path / "none.jsonl")}, timeout_s=0.2)  # left to the calls
    assert missing.run("WikiSearch", "river").error["code"] == "missing_data"
