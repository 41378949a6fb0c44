"""Documents longer than corpus.max_doc_chars: cut into pieces at whitespace, each piece ending its shard, gold
calls moved with their text; a 5 MB single-line document goes through ``sample`` in bounded memory."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest
from helpers import ROOT, read_jsonl, write_jsonl
from runs import rules_args, small_docs, words

from toolformer.corpus.windows import PIECE, pieces, shard_groups
from toolformer.rundir.sharding import chunked


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
    write_jsonl(corpus, [*small_docs(1), {"id": "huge", "text": huge}, *small_docs(3)[2:]])
    run_dir = tmp_path / "run"
    t0 = time.monotonic()
    res = subprocess.run([sys.executable, "-c", RSS, "sample", *rules_args(run_dir, tiny_model_dir, corpus)], cwd=ROOT,
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
