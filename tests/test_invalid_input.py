"""Input that is not usable text is refused with its reason and the rest goes on: corpus records that are not
UTF-8, hold a lone surrogate, are broken JSON or nested too deeply, have no text or repeat an id (written to the
sample stage's rejected.jsonl), and prompts or chat lines that are not text."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from helpers import ROOT, read_corpus_all, read_jsonl, run_cli
from runs import rules_args, small_docs

from toolformer.config.schema import CorpusConfig


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
    documents, rejected = read_corpus_all(CorpusConfig(path=str(tmp_path / "c.jsonl")))
    assert [(d["doc_id"], d["text"]) for d in documents] == [("ok", good["text"]),
                                                                     ("pair", "an emoji \U0001F600 is text")]
    reasons = {int(r["source"].rsplit(":", 1)[1]): r["reason"] for r in rejected}
    assert reasons == {2: "field 'text': lone surrogate U+D800 at character 7 (not valid Unicode text)",
                       3: "field 'id': lone surrogate U+DCFF at character 2 (not valid Unicode text)",
                       4: "field 'gold_calls': lone surrogate U+DFFF (not valid Unicode text)",
                       6: "not UTF-8 (invalid start byte at byte 31)"}
    for r in rejected:
        r["raw"].encode("utf-8")  # a rejected record can be written (the surrogate shown escaped)

    (tmp_path / "c.txt").write_bytes(b"first line\r\nsecond \xff line\nthird\rfourth\n\nlast")
    documents, rejected = read_corpus_all(CorpusConfig(path=str(tmp_path / "c.txt")))
    assert [(d["doc_id"], d["text"]) for d in documents] == [
        ("0", "first line"), ("2", "third"), ("3", "fourth"), ("5", "last")]  # ids: the rows as `datasets` counts
    assert [(r["source"], r["reason"]) for r in rejected] == [
        (f"{tmp_path / 'c.txt'}:2", "not UTF-8 (invalid start byte at byte 7)"),
        (f"{tmp_path / 'c.txt'}:4", "empty text")]

    (tmp_path / "c.csv").write_bytes(b"id,text\na,fine\nb,caf\xe9\n")  # Latin-1, read whole by `datasets`
    with pytest.raises(ValueError, match=r"c\.csv: cannot be read as csv \(not UTF-8 \(byte 0xe9"):
        read_corpus_all(CorpusConfig(path=str(tmp_path / "c.csv")))


DEEP = "[" * 100_000 + "]" * 100_000  # valid JSON nested past Python's recursion limit


def test_json_nested_too_deeply_is_bad_input_where_it_stands(tmp_path, capsys):
    from toolformer.cli.app import main
    from toolformer.tasks.score import read_predictions

    corpus = tmp_path / "c.jsonl"
    corpus.write_text("\n".join([json.dumps(small_docs(1)[0]), '{"id": "deep", "text": ' + DEEP + "}"]) + "\n")
    documents, rejected = read_corpus_all(CorpusConfig(path=str(corpus)))
    assert [d["doc_id"] for d in documents] == ["s0"]
    assert [(r["source"], r["reason"]) for r in rejected] == [
        (f"{corpus}:2", "invalid JSON: nested too deeply to read")]

    preds = tmp_path / "preds.jsonl"
    preds.write_text('{"id": "a", "output": "7"}\n' + DEEP + "\n")
    outputs, problems = read_predictions(preds)
    assert outputs == {"a": "7"} and problems == [f"{preds}: line 2: invalid JSON: nested too deeply to read"]

    task = tmp_path / "task.json"
    task.write_text(DEEP)
    capsys.readouterr()
    assert main(["tasks", "check", str(task)]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.strip() == (
        f"toolformer: error: {task}: line 1: invalid JSON: nested too deeply to read")


@pytest.mark.slow
def test_sample_rejects_a_lone_surrogate_and_goes_on(tiny_model_dir, tmp_path):
    corpus = tmp_path / "c.jsonl"
    lines = [json.dumps(r) for r in small_docs(2)]
    lines.insert(1, '{"id": "bad", "text": "Sold 3 and \\ud800 4, 7 in all."}')
    corpus.write_text("\n".join(lines) + "\n")
    run_dir = tmp_path / "run"
    res = run_cli(["sample", *rules_args(run_dir, tiny_model_dir, corpus)])
    assert res.returncode == 0 and "Traceback" not in res.stderr, res.stderr[-2000:]
    assert "1 records rejected" in res.stdout
    (rejected,) = read_jsonl(run_dir / "sample" / "rejected.jsonl")
    assert rejected["source"] == f"{corpus}:2" and "lone surrogate U+D800" in rejected["reason"]
    assert "\\ud800" in rejected["raw"]
    assert [d["doc_id"] for d in read_jsonl(run_dir / "sample" / "documents.jsonl")] == ["s0", "s1"]


def _generate(model: str, stdin: bytes, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "toolformer.cli", "generate", "--model", model, "--disabled",
                           "--max-new-tokens", "2", *args], input=stdin, capture_output=True, cwd=ROOT, timeout=300)


@pytest.mark.slow
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


@pytest.mark.slow
def test_chat_skips_a_line_that_is_not_text(tiny_model_dir):
    res = subprocess.run([sys.executable, "-m", "toolformer.cli", "chat", "--model", tiny_model_dir, "--disabled",
                          "--max-new-tokens", "2"], input=b"hello \xff there\nsecond try\n", capture_output=True,
                         cwd=ROOT, timeout=300)
    assert res.returncode == 0 and b"Traceback" not in res.stderr, res.stderr[-2000:]
    out = res.stdout.decode()
    assert "that line was not read: not UTF-8 (byte 0xff at character 6); type it again" in out
    assert "second try" in out  # the next line was read and answered


@pytest.mark.slow
def test_bad_corpus_records_counted_and_written_to_rejected(tiny_model_dir, tmp_path):
    corpus = tmp_path / "bad.jsonl"
    long_text = " ".join(f"The mill sold {i} sacks and {i + 1} more, {2 * i + 1} in all." for i in range(150))
    corpus.write_bytes(b"\n".join([
        json.dumps({"id": "ok1", "text": "Sold 340 and 275, 615 in all.", "date": "2020-01-01"}).encode(),
        b"", b"{broken", b"\xff\xfe not utf8", json.dumps({"id": "nt"}).encode(),
        json.dumps({"id": "long", "text": long_text}).encode(),
        json.dumps({"id": "ok1", "text": "duplicate id"}).encode(),
    ]) + b"\n")
    run_dir = tmp_path / "run"
    res = run_cli(["sample", "--config", "configs/tiny.yaml", f"run_dir={run_dir}", f"model.path={tiny_model_dir}",
                f"corpus.path={corpus}", "model.max_length=256", "tools.enabled=[Calculator]",
                "sample.method={Calculator: rules}"])
    assert res.returncode == 0, res.stderr[-2000:]
    assert "4 records rejected" in res.stdout
    rejected = read_jsonl(run_dir / "sample" / "rejected.jsonl")
    lines = sorted(int(r["source"].rsplit(":", 1)[1]) for r in rejected)
    assert lines == [3, 4, 5, 7] and all(str(corpus) in r["source"] and r["reason"] for r in rejected)
    docs = read_jsonl(run_dir / "sample" / "documents.jsonl")
    windows = [d for d in docs if d["doc_id"].startswith("long#w")]
    assert len(windows) > 1 and "".join(d["text"] for d in windows) == long_text  # split, nothing lost
