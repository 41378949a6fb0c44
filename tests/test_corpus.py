import json

import pytest
from helpers import write_jsonl
from transformers import AutoTokenizer

from toolformer.config.schema import CorpusConfig
from toolformer.corpus.reader import iter_corpus
from toolformer.corpus.windows import split_windows


def test_bad_jsonl_lines_are_rejected_with_file_and_line(tmp_path):
    p = tmp_path / "c.jsonl"
    good = json.dumps({"id": "a", "text": "fine", "date": "2020-01-01"})
    p.write_bytes(b"\n".join([
        good.encode(), b"", b"{not json", b'{"id": "b"}', b'{"id": "c", "text": "caf\xe9"}',
        json.dumps({"id": "a", "text": "dup"}).encode(), json.dumps({"text": "no id"}).encode(), b"[1, 2]",
    ]) + b"\n")
    rejected: list[dict] = []
    assert [d["doc_id"] for d in iter_corpus(CorpusConfig(path=str(p)), rejected)] == ["a", "c-7"]
    reasons = {r["source"].rsplit(":", 1)[1]: r["reason"] for r in rejected}
    assert reasons["3"].startswith("invalid JSON") and "missing text" in reasons["4"]
    assert "not UTF-8" in reasons["5"] and "duplicate id" in reasons["6"] and reasons["8"] == "not a JSON object"
    assert all(r["source"].startswith(str(p)) for r in rejected)


def test_parquet_through_datasets(tmp_path):
    import datasets

    datasets.Dataset.from_list([{"doc": "x1", "body": "one two"}, {"doc": "x2", "body": "three"}]).to_parquet(
        str(tmp_path / "c.parquet"))
    cfg = CorpusConfig(path=str(tmp_path / "c.parquet"), id_field="doc", text_field="body")
    assert [d["doc_id"] for d in iter_corpus(cfg, [])] == ["x1", "x2"]
    with pytest.raises(ValueError, match="no column 'text'"):
        iter_corpus(CorpusConfig(path=str(tmp_path / "c.parquet")), [])  # checked at the call, before any row


def test_long_documents_split_into_windows_losing_nothing(tiny_model_dir):
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    text = " ".join(f"word{i} {i}" for i in range(200))
    docs = split_windows([{"doc_id": "long", "text": text, "date": "2021-01-01"},
                          {"doc_id": "s", "text": "hi", "date": None}], tok, 50)
    windows = [d for d in docs if d["doc_id"].startswith("long#w")]
    assert len(windows) > 3 and "".join(d["text"] for d in windows) == text
    assert all(len(tok(d["text"], add_special_tokens=False)["input_ids"]) <= 51 for d in windows)
    assert docs[-1]["doc_id"] == "s"


def test_gold_calls_survive_into_windows_and_the_run_folder(tmp_path, tiny_model_dir):
    from toolformer.rundir.folder import read_documents, write_documents

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    text = " ".join(f"word{i} {i}" for i in range(200))
    gold = [{"tool": "Calculator", "input": f"{i} + 0", "result": str(i), "char_start": text.index(f" {i} ") + 1}
            for i in (3, 150)]
    p = tmp_path / "c.jsonl"
    write_jsonl(p, [{"id": "long", "text": text, "gold_calls": gold}, {"id": "plain", "text": "no gold here"}])
    docs = split_windows(list(iter_corpus(CorpusConfig(path=str(p)), [])), tok, 50)
    assert "gold_calls" not in docs[-1]
    windows = [d for d in docs if d["doc_id"].startswith("long#w")]
    found = [(w["text"][g["char_start"]:].split(" ")[0], g["result"]) for w in windows for g in w["gold_calls"]]
    assert found == [("3", "3"), ("150", "150")]
    write_documents(tmp_path / "run", docs)
    assert list(read_documents(tmp_path / "run").values()) == docs
    # The index written beside documents.jsonl, and rebuilt for a folder that has none (an older run).
    from toolformer.rundir.folder import DOCUMENT_INDEX, DocumentStore

    store = DocumentStore(tmp_path / "run")
    assert [store[d["doc_id"]] for d in docs] == docs
    store.close()
    (tmp_path / "run" / "sample" / DOCUMENT_INDEX).unlink()
    store = DocumentStore(tmp_path / "run")
    assert store[docs[-1]["doc_id"]] == docs[-1]
    with pytest.raises(ValueError, match="no document 'nope', which a record of this run names"):  # exit 2
        store["nope"]
    store.close()
