"""The corpus formats the corpus reader takes (toolformer.corpus.reader): JSON Lines plain, gzip- or zstd-compressed and
in a folder of shards, text, CSV, Parquet and saved data sets; a compressed file is never read as text and an
unknown suffix is refused."""

import gzip
import sys

import pytest
from helpers import jsonl, read_corpus_all

from toolformer.config.schema import CorpusConfig

ROWS = [{"id": "a1", "text": "She paid 18 + 12 = 30 dollars.", "date": "2021-03-04"},
        {"id": "a2", "text": "Lake Orun has 4 islands.", "date": None}]


def _docs(path, **cfg):
    return [(d["doc_id"], d["text"], d["date"]) for d in read_corpus_all(CorpusConfig(path=str(path), **cfg))[0]]


WANT = [("a1", ROWS[0]["text"], "2021-03-04"), ("a2", ROWS[1]["text"], None)]


def test_compressed_jsonl(tmp_path):
    (tmp_path / "c.jsonl.gz").write_bytes(gzip.compress(jsonl(ROWS).encode()))
    assert _docs(tmp_path / "c.jsonl.gz") == WANT
    zstandard = pytest.importorskip("zstandard")
    (tmp_path / "c.jsonl.zst").write_bytes(zstandard.ZstdCompressor().compress(jsonl(ROWS).encode()))
    assert _docs(tmp_path / "c.jsonl.zst") == WANT
    folder = tmp_path / "shards"
    folder.mkdir()
    (folder / "part-0.jsonl.gz").write_bytes(gzip.compress(jsonl(ROWS[:1]).encode()))
    (folder / "part-1.jsonl").write_bytes(jsonl(ROWS[1:]).encode())
    assert _docs(folder) == WANT


def test_zst_without_zstandard_names_the_package(tmp_path, monkeypatch):
    (tmp_path / "c.jsonl.zst").write_bytes(b"\x28\xb5\x2f\xfd....")
    monkeypatch.setitem(sys.modules, "zstandard", None)  # import fails
    with pytest.raises(ValueError, match="needs the `zstandard` package"):
        read_corpus_all(CorpusConfig(path=str(tmp_path / "c.jsonl.zst")))


def test_text_csv_parquet_and_saved_datasets(tmp_path):
    import datasets

    (tmp_path / "c.txt").write_text("first line\nsecond line\n")
    assert [(i, t) for i, t, _ in _docs(tmp_path / "c.txt")] == [("0", "first line"), ("1", "second line")]
    (tmp_path / "c.csv").write_text('id,text,date\na1,"She paid 18 + 12 = 30 dollars.",2021-03-04\na2,'
                                    "Lake Orun has 4 islands.,\n")
    assert _docs(tmp_path / "c.csv") == WANT
    datasets.Dataset.from_list(ROWS).to_parquet(str(tmp_path / "c.parquet"))
    assert _docs(tmp_path / "c.parquet") == WANT
    datasets.Dataset.from_list(ROWS).save_to_disk(str(tmp_path / "saved"))
    assert _docs(tmp_path / "saved") == WANT
    datasets.DatasetDict({"train": datasets.Dataset.from_list(ROWS)}).save_to_disk(str(tmp_path / "dict"))
    assert _docs(tmp_path / "dict") == WANT
    with pytest.raises(ValueError, match="no split 'test'.*splits: train"):
        _docs(tmp_path / "dict", split="test")


def test_compressed_never_read_as_text_and_unknown_suffix_refused(tmp_path):
    packed = gzip.compress(jsonl(ROWS).encode())
    for name in ("c.txt", "c.jsonl", "c.csv"):
        (tmp_path / name).write_bytes(packed)
        with pytest.raises(ValueError, match=f"{name}: the file is gzip-compressed but its name says plain"):
            read_corpus_all(CorpusConfig(path=str(tmp_path / name)))
    with pytest.raises(ValueError, match="gzip-compressed"):
        read_corpus_all(CorpusConfig(path=str(tmp_path / "c.txt"), format="text"))
    for name in ("c.jsonl.bz2", "c.xml", "c.txt.gz"):
        (tmp_path / name).write_bytes(b"x")
        with pytest.raises(ValueError, match=r"supported: \.jsonl, \.jsonl\.gz, \.jsonl\.zst, \.json, \.parquet"):
            read_corpus_all(CorpusConfig(path=str(tmp_path / name)))
