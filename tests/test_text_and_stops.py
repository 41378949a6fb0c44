"""Text is text (bytes that are not UTF-8, lone surrogates) and stops are prompt (SIGTERM inside a huge
document or a long tool call); a 5 MB single-line document goes through ``sample`` in bounded memory."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from helpers import ROOT, read_jsonl, run_cli, write_jsonl

from toolformer.config.schema import CorpusConfig
from toolformer.corpus.reader import read_corpus
from toolformer.corpus.windows import PIECE, pieces, shard_groups
from toolformer.rundir import stops
from toolformer.rundir.sharding import chunked

WORDS = ["the", "river", "mill", "market", "town", "council", "harbour", "boats", "sold", "bought", "north", "south",
         "old", "new", "bridge", "road"]


def sums(n_chars: int, seed: int = 0) -> str:
    """Sentences with sums of distinct numbers (each a Calculator candidate of its own), ``n_chars`` long."""
    r = random.Random(seed)
    out, n = [], 0
    while n < n_chars:
        a, b = r.randint(10, 99999), r.randint(10, 99999)
        out.append(f"The mill sold {a} sacks and {b} more, {a + b} in all.")
        n += len(out[-1]) + 1
    return " ".join(out)[:n_chars]


def words(n_chars: int, seed: int = 0) -> str:
    """Words without numbers (no tool's pre-filter keeps them), ``n_chars`` long, on one line."""
    r = random.Random(seed)
    return " ".join(r.choice(WORDS) for _ in range(n_chars // 4 + 10))[:n_chars]


def small(n: int) -> list[dict]:
    return [{"id": f"s{i}", "text": f"Sold {i + 3} and {i + 5}, {2 * i + 8} in all.", "date": "2021-01-01"}
            for i in range(n)]


def cli(run_dir: Path, model: str, corpus: Path, *extra: str) -> list[str]:
    """Settings for a stage of a run on ``corpus`` with the Calculator's rules."""
    return ["--config", "configs/tiny.yaml", f"run_dir={run_dir}", f"model.path={model}", f"corpus.path={corpus}",
            "tools.enabled=[Calculator]", "sample.method={Calculator: rules}", "shard_size=2", *extra]


def stop_when(path: Path, args: list[str], logs: Path, after: float = 1.0) -> tuple[subprocess.CompletedProcess, float]:
    """Run ``toolformer ARGS`` (its output into files under ``logs``); ``after`` seconds once ``path`` exists,
    send it SIGTERM. Returns the finished process (text output) and the seconds from the signal to its exit."""
    logs.mkdir(exist_ok=True)
    with open(logs / "out", "w") as out, open(logs / "err", "w") as err:
        proc = subprocess.Popen([sys.executable, "-m", "toolformer.cli", *args], cwd=ROOT, stdout=out, stderr=err)
        deadline = time.monotonic() + 300
        while not path.exists():
            assert proc.poll() is None, (logs / "err").read_text()[-2000:]
            assert time.monotonic() < deadline, f"{path} never appeared"
            time.sleep(0.05)
        time.sleep(after)
        assert proc.poll() is None, "the stage ended before the signal: the test's work is too small"
        proc.send_signal(signal.SIGTERM)
        t0 = time.monotonic()
        proc.wait(timeout=120)
        seconds = time.monotonic() - t0
    return subprocess.CompletedProcess(proc.args, proc.returncode, (logs / "out").read_text(),
                                       (logs / "err").read_text()), seconds


# -- text is text ---------------------------------------------------------------------------------


def test_corpus_records_that_are_not_text_are_rejected_with_the_reason(tmp_path):
    good = {"id": "ok", "text": "Sold 3 and 4, 7 in all.", "date": "2021-01-01"}
    (tmp_path / "c.jsonl").write_bytes(b"\n".join([
        json.dumps(good).encode(),
        b'{"id": "s1", "text": "a lone \\ud800 surrogate"}',  # the JSON escape a user meets in a corpus
        b'{"id": "s2\\udcff", "text": "fine text, bad id"}',
        b'{"id": "s3", "text": "fine", "gold_calls": [{"tool": "QA", "input": "\\udfff", "char_start": 0}]}',
        b'{"id": "pair", "text": "an emoji \\ud83d\\ude00 is text"}',
        b'{"id": "b1", "text": "not utf8 \xff"}',
    ]) + b"\n")
    corpus = read_corpus(CorpusConfig(path=str(tmp_path / "c.jsonl")))
    assert [(d["doc_id"], d["text"]) for d in corpus.documents] == [("ok", good["text"]),
                                                                     ("pair", "an emoji \U0001F600 is text")]
    reasons = {int(r["source"].rsplit(":", 1)[1]): r["reason"] for r in corpus.rejected}
    assert reasons == {2: "field 'text': lone surrogate U+D800 at character 7 (not valid Unicode text)",
                       3: "field 'id': lone surrogate U+DCFF at character 2 (not valid Unicode text)",
                       4: "field 'gold_calls': lone surrogate U+DFFF (not valid Unicode text)",
                       6: "not UTF-8 (invalid start byte at byte 31)"}
    for r in corpus.rejected:
        r["raw"].encode("utf-8")  # a rejected record can be written (the surrogate shown escaped)

    (tmp_path / "c.txt").write_bytes(b"first line\r\nsecond \xff line\nthird\rfourth\n\nlast")
    corpus = read_corpus(CorpusConfig(path=str(tmp_path / "c.txt")))
    assert [(d["doc_id"], d["text"]) for d in corpus.documents] == [
        ("0", "first line"), ("2", "third"), ("3", "fourth"), ("5", "last")]  # ids: the rows as `datasets` counts
    assert [(r["source"], r["reason"]) for r in corpus.rejected] == [
        (f"{tmp_path / 'c.txt'}:2", "not UTF-8 (invalid start byte at byte 7)"),
        (f"{tmp_path / 'c.txt'}:4", "empty text")]

    (tmp_path / "c.csv").write_bytes(b"id,text\na,fine\nb,caf\xe9\n")  # Latin-1, read whole by `datasets`
    with pytest.raises(ValueError, match=r"c\.csv: cannot be read as csv \(not UTF-8 \(byte 0xe9"):
        read_corpus(CorpusConfig(path=str(tmp_path / "c.csv")))


def test_sample_rejects_a_lone_surrogate_and_goes_on(tiny_model_dir, tmp_path):
    corpus = tmp_path / "c.jsonl"
    lines = [json.dumps(r) for r in small(2)]
    lines.insert(1, '{"id": "bad", "text": "Sold 3 and \\ud800 4, 7 in all."}')
    corpus.write_text("\n".join(lines) + "\n")
    run_dir = tmp_path / "run"
    res = run_cli(["sample", *cli(run_dir, tiny_model_dir, corpus)])
    assert res.returncode == 0 and "Traceback" not in res.stderr, res.stderr[-2000:]
    assert "1 records rejected" in res.stdout
    (rejected,) = read_jsonl(run_dir / "sample" / "rejected.jsonl")
    assert rejected["source"] == f"{corpus}:2" and "lone surrogate U+D800" in rejected["reason"]
    assert "\\ud800" in rejected["raw"]
    assert [d["doc_id"] for d in read_jsonl(run_dir / "sample" / "documents.jsonl")] == ["s0", "s1"]


def _generate(model: str, stdin: bytes, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "toolformer.cli", "generate", "--model", model, "--disabled",
                           "--max-new-tokens", "2", *args], input=stdin, capture_output=True, cwd=ROOT, timeout=300)


def test_generate_refuses_prompts_that_are_not_text(tiny_model_dir, tmp_path):
    res = _generate(tiny_model_dir, b"a fine prompt\nhello \xff there\n")
    assert res.returncode == 2 and b"Traceback" not in res.stderr, res.stderr[-2000:]
    assert b"<stdin>:2: not UTF-8 (byte 0xff at character 6); prompts must be UTF-8 text" in res.stderr

    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"prompt": "fine"}\n{"prompt": "x \\ud800 y"}\n')
    res = _generate(tiny_model_dir, b"", "--file", str(prompts))
    assert res.returncode == 2 and b"Traceback" not in res.stderr, res.stderr[-2000:]
    assert f"{prompts}:2: `prompt`: lone surrogate U+D800 at character 2".encode() in res.stderr

    latin = tmp_path / "p.txt"
    latin.write_bytes(b"fine\ncaf\xe9 au lait\n")
    res = _generate(tiny_model_dir, b"", "--file", str(latin))
    assert res.returncode == 2 and b"Traceback" not in res.stderr, res.stderr[-2000:]
    assert f"{latin}:2: not UTF-8 (invalid continuation byte: byte 0xe9 at byte 3 of the line)".encode() in res.stderr

    res = _generate(tiny_model_dir, b"", "fine", os.fsdecode(b"bad \xff argument"))
    assert res.returncode == 2 and b"Traceback" not in res.stderr, res.stderr[-2000:]
    assert b"prompt 2 (argument): not UTF-8 (byte 0xff at character 4)" in res.stderr


def test_chat_skips_a_line_that_is_not_text(tiny_model_dir):
    res = subprocess.run([sys.executable, "-m", "toolformer.cli", "chat", "--model", tiny_model_dir, "--disabled",
                          "--max-new-tokens", "2"], input=b"hello \xff there\nsecond try\n", capture_output=True,
                         cwd=ROOT, timeout=300)
    assert res.returncode == 0 and b"Traceback" not in res.stderr, res.stderr[-2000:]
    out = res.stdout.decode()
    assert "that line was not read: not UTF-8 (byte 0xff at character 6); type it again" in out
    assert "second try" in out  # the next line was read and answered


# -- documents longer than corpus.max_doc_chars ---------------------------------------------------


def test_a_long_document_is_cut_into_pieces_each_ending_its_shard():
    text = words(1000) + "x" * 300  # the last 300 characters have no whitespace to cut before
    doc = {"doc_id": "d", "text": text, "date": "2020-01-01",
           "gold_calls": [{"tool": "QA", "input": "q", "result": "r", "char_start": 420}]}
    got = list(pieces(doc, 200))
    assert "".join(p["text"] for p in got) == text and all(len(p["text"]) <= 200 for p in got)
    assert [p["doc_id"] for p in got] == [f"d#p{k}" for k in range(len(got))]
    assert all(p["text"][-1] != " " and q["text"][0] == " " for p, q in zip(got[:-3], got[1:-2]))  # at a space
    starts = [sum(len(p["text"]) for p in got[:k]) for k in range(len(got))]
    with_call = [(p, a) for p, a in zip(got, starts) if p["gold_calls"]]
    assert [(p["gold_calls"][0]["char_start"] + a) for p, a in with_call] == [420]
    assert list(pieces(doc, 0)) == [doc] and list(pieces(doc, len(text))) == [doc]

    docs = [{"doc_id": f"a{i}", "text": "x", "date": None} for i in range(5)]
    assert list(shard_groups(docs, 2)) == list(chunked(docs, 2))  # no piece: the groups as before
    stream = [docs[0], *({"doc_id": f"p{k}", "text": "y", "date": None, PIECE: k} for k in range(3)), *docs[1:4]]
    assert [[d["doc_id"] for d in g] for g in shard_groups(stream, 2)] == [
        ["a0", "p0"], ["p1"], ["p2"], ["a1", "a2"], ["a3"]]


# The peak resident size of this process alone: VmHWM belongs to the address space that execve made (getrusage's
# ru_maxrss is kept across execve, so it would count a large parent such as a long pytest session).
RSS = ("import re, sys\nfrom toolformer.cli.app import main\nrc = main(sys.argv[1:])\n"
       "hwm = re.search(r'VmHWM:\\s+(\\d+)', open('/proc/self/status').read()).group(1)\n"
       "print('maxrss_kib', hwm, file=sys.stderr)\nsys.exit(rc)\n")


@pytest.mark.slow
def test_a_5mb_single_line_document_goes_through_sample_in_bounded_memory(tiny_model_dir, tmp_path):
    huge = words(5_000_000)
    corpus = tmp_path / "c.jsonl"
    write_jsonl(corpus, [*small(1), {"id": "huge", "text": huge}, *small(3)[2:]])
    run_dir = tmp_path / "run"
    t0 = time.monotonic()
    res = subprocess.run([sys.executable, "-c", RSS, "sample", *cli(run_dir, tiny_model_dir, corpus)], cwd=ROOT,
                         capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-2000:]
    assert time.monotonic() - t0 < 300  # 8 to 20 s here
    rss_mib = int(res.stderr.split("maxrss_kib")[1].split()[0]) // 1024
    assert rss_mib < 900, rss_mib  # about 450 MiB here; 1,200 MiB with the document tokenized whole
    docs = read_jsonl(run_dir / "sample" / "documents.jsonl")
    assert "".join(d["text"] for d in docs if d["doc_id"].startswith("huge#p")) == huge  # nothing lost
    assert docs[0]["doc_id"] == "s0" and docs[-1]["doc_id"] == "s2"
    n_pieces = len(list(pieces({"doc_id": "huge", "text": huge, "date": None}, 100_000)))
    assert n_pieces >= 50 and len(list((run_dir / "sample").glob("shard-*.jsonl"))) == n_pieces + 1  # s0 with p0
    assert json.loads((run_dir / "sample" / "manifest.json").read_text())["counts"]["documents"] == 3


# -- stops are prompt -----------------------------------------------------------------------------


def test_a_signal_drops_the_work_in_progress_at_once_but_not_a_write():
    """In a deferred unit a signal waits for its end, except in its abandonable part: there it stops at once."""
    def kill_and_spin(seconds: float = 5.0) -> float:
        t0 = time.monotonic()
        os.kill(os.getpid(), signal.SIGTERM)
        while time.monotonic() - t0 < seconds:
            pass
        return time.monotonic() - t0

    before = signal.getsignal(signal.SIGTERM)
    t0 = time.monotonic()
    with stops.handled(), pytest.raises(stops.Stopped) as stopped, stops.deferred(), stops.abandonable():
        kill_and_spin()
    assert stopped.value.signum == signal.SIGTERM and time.monotonic() - t0 < 2
    with stops.handled(), pytest.raises(stops.Stopped), stops.deferred():
        assert kill_and_spin(0.3) >= 0.3  # a write: not interrupted, the stop comes at its end
    with stops.handled(), pytest.raises(stops.Stopped), stops.deferred():
        assert kill_and_spin(0.1) >= 0.1
        with stops.abandonable():
            pytest.fail("a stop already asked for ends the unit before more work starts")
    with stops.handled(), pytest.raises(stops.Stopped), stops.deferred(), stops.abandonable():
        with stops.deferred():  # a write inside the work: finished, then the stop
            assert kill_and_spin(0.3) >= 0.3
        pytest.fail("the stop comes when the write ends")
    assert signal.getsignal(signal.SIGTERM) is before


def test_sigterm_during_a_hanging_tool_call_stops_execute_at_once(tiny_model_dir, tmp_path, monkeypatch, capsys):
    from toolformer.cli.app import main
    from toolformer.config.load import load_config
    from toolformer.config.schema import PipelineConfig
    from toolformer.rundir.folder import StageFolder, write_documents
    from toolformer.stages import stage_hash
    from toolformer.tools import REGISTRY, Tool

    class Hang(Tool):
        name = "Hang"

        def run(self, tool_input, date=None):
            time.sleep(600)

    monkeypatch.setitem(REGISTRY, "Hang", Hang)
    run_dir = tmp_path / "run"
    settings = [f"run_dir={run_dir}", f"model.path={tiny_model_dir}", "tools.enabled=[Hang, Calculator]",
                "tools.timeout_s=300", "tools.concurrency=2"]
    sample = StageFolder(run_dir, "sample")
    sample.begin("x")
    write_documents(run_dir, [{"doc_id": "a", "text": "x y z", "date": None}])
    call = {"doc_id": "a", "position": 0, "char_start": 0, "p_i": None, "source": "rules"}
    sample.write_shard(0, [{**call, "tool": "Calculator", "input": "1 + 2"}])
    sample.write_shard(1, [{**call, "tool": "Hang", "input": str(i)} for i in range(8)])  # 4 rounds of 300 s
    sample.finish(stage_hash(load_config(PipelineConfig, None, settings), "sample"), 0, {})

    signalled: list[float] = []

    def signal_once_working() -> None:
        while not (run_dir / "execute" / "shard-00000.jsonl").exists():
            time.sleep(0.02)
        time.sleep(0.5)  # two calls of shard 1 hang now, six wait
        signalled.append(time.monotonic())
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=signal_once_working, daemon=True).start()
    assert main(["execute", *settings]) == 143
    assert time.monotonic() - signalled[0] < 5
    err = capsys.readouterr().err
    assert "stopped by SIGTERM; kept 1 shard(s) of execute" in err
    assert [p.name for p in sorted((run_dir / "execute").glob("shard-*"))] == ["shard-00000.jsonl"]
    assert read_jsonl(run_dir / "execute" / "shard-00000.jsonl")[0]["result"] == "3"

    class Answers(Hang):
        def run(self, tool_input, date=None):
            return f"answer {tool_input}"

    monkeypatch.setitem(REGISTRY, "Hang", Answers)
    assert main(["execute", *settings]) == 0
    assert "resuming after 1 complete shard(s)" in capsys.readouterr().out
    records = read_jsonl(run_dir / "execute" / "shard-00001.jsonl")
    assert [r["result"] for r in records] == [f"answer {i}" for i in range(8)]


@pytest.mark.slow
def test_sigterm_stops_sample_inside_a_huge_document_and_a_rerun_resumes(tiny_model_dir, tmp_path):
    """The document's first piece is sums: the sampler scores and samples at each of its 120-odd windows
    (seconds); SIGTERM 1 s into it. A stop at the end of the piece's shard would keep 2 shards."""
    huge = sums(100_000) + " " + words(900_000)
    corpus = tmp_path / "c.jsonl"
    write_jsonl(corpus, [*small(2), {"id": "huge", "text": huge}])
    run_dir = tmp_path / "run"
    args = ["sample", *cli(run_dir, tiny_model_dir, corpus, "sample.method={Calculator: sampler}")]
    stopped, seconds = stop_when(run_dir / "sample" / "shard-00000.jsonl", args, tmp_path / "logs")
    assert stopped.returncode == 143 and "Traceback" not in stopped.stderr, stopped.stderr[-2000:]
    assert seconds < 5
    assert "stopped by SIGTERM; kept 1 shard(s) of sample" in stopped.stderr.strip().splitlines()[-1]
    assert [p.name for p in (run_dir / "sample").glob("shard-*")] == ["shard-00000.jsonl"]
    kept = (run_dir / "sample" / "shard-00000.jsonl").read_bytes()
    again = run_cli(args)
    assert again.returncode == 0, again.stderr[-2000:]
    assert "resuming after 1 complete shard(s)" in again.stdout
    assert (run_dir / "sample" / "shard-00000.jsonl").read_bytes() == kept
    docs = read_jsonl(run_dir / "sample" / "documents.jsonl")
    assert "".join(d["text"] for d in docs if d["doc_id"].startswith("huge#")) == huge
    n_pieces = len(list(pieces({"doc_id": "huge", "text": huge, "date": None}, 100_000)))
    assert n_pieces >= 10 and len(list((run_dir / "sample").glob("shard-*.jsonl"))) == n_pieces + 1


@pytest.mark.slow
def test_sigterm_stops_execute_with_rules_inside_a_huge_shard_and_a_rerun_resumes(tiny_model_dir, tmp_path):
    """About 25,000 distinct Calculator calls in the huge document's shard (about 10 s); SIGTERM 1 s into it."""
    corpus = tmp_path / "c.jsonl"
    write_jsonl(corpus, [*small(4), {"id": "huge", "text": sums(40_000)}])
    run_dir = tmp_path / "run"
    done = run_cli(["sample", *cli(run_dir, tiny_model_dir, corpus)])
    assert done.returncode == 0, done.stderr[-2000:]
    candidates = sum(1 for p in (run_dir / "sample").glob("shard-*.jsonl") for _ in read_jsonl(p))
    args = ["execute", *cli(run_dir, tiny_model_dir, corpus)]
    stopped, seconds = stop_when(run_dir / "execute" / "shard-00001.jsonl", args, tmp_path / "logs")
    assert stopped.returncode == 143 and "Traceback" not in stopped.stderr, stopped.stderr[-2000:]
    assert seconds < 5
    assert "stopped by SIGTERM; kept 2 shard(s) of execute" in stopped.stderr
    assert sorted(p.name for p in (run_dir / "execute").glob("shard-*")) == ["shard-00000.jsonl",
                                                                              "shard-00001.jsonl"]
    assert all(r["result"] for p in (run_dir / "execute").glob("shard-*") for r in read_jsonl(p))
    again = run_cli(args)
    assert again.returncode == 0, again.stderr[-2000:]
    assert "resuming after 2 complete shard(s)" in again.stdout
    assert f"{candidates:,} of {candidates:,} calls returned a result" in again.stdout
