"""Stage build: kept calls inline, competing calls, per-tool cap, plain documents."""

import json

import pytest
from helpers import filter_record, write_filter_run, write_jsonl

from toolformer.config.schema import PipelineConfig
from toolformer.rundir.folder import write_documents
from toolformer.stages.build import run_stage

DOCS = [
    {"doc_id": "d1", "text": "She paid 18 + 12 * 3 = 54 dollars on 2021-03-04.", "date": "2021-03-04"},
    {"doc_id": "d2", "text": "Lake Orun lies near Vell. It has 4 islands.", "date": None},
    {"doc_id": "d3", "text": "Nothing to compute here.", "date": None},
    {"doc_id": "d4", "text": "Another plain document.", "date": None},
    {"doc_id": "d5", "text": "A third plain one.", "date": None},
    {"doc_id": "d6", "text": "We had 7 - 2 = 5 apples.", "date": None},
]


rec = filter_record


def make_run(tmp_path, records, **build):
    cfg = PipelineConfig(run_dir=str(tmp_path / "run"))
    for k, v in build.items():
        setattr(cfg.build, k, v)
    write_filter_run(cfg.run_dir, DOCS, records)
    return cfg


def load(cfg):
    from datasets import load_from_disk

    return load_from_disk(f"{cfg.run_dir}/build/dataset")


RECORDS = [
    # d1: two calls of two tools at different offsets, one competitor that loses.
    rec("d1", "Calculator", "18 + 12 * 3", "54", 23, 2.0, 0.2),
    rec("d1", "Calculator", "18 + 12", "30", 23, 2.0, 1.5),
    rec("d1", "Calendar", "", "Today is Thursday, March 4, 2021.", 37, 1.8, 0.5),
    rec("d2", "QA", "How many islands has Lake Orun?", "4", 33, 3.0, 0.5),
    rec("d3", "Calculator", "1 + 1", "2", 0, 2.0, 2.5, kept=False),  # not kept: d3 stays plain
    rec("d6", "Calculator", "7 - 2", "5", 15, 1.0, 0.3),
]


def test_inserts_several_calls_and_picks_best_competitor(tmp_path, capsys):
    cfg = make_run(tmp_path, RECORDS)
    manifest = run_stage(cfg).manifest
    ds = load(cfg)
    rows = {r["doc_id"]: r for r in ds}
    assert set(rows) == {"d1", "d2", "d6"} and all(r["augmented"] for r in rows.values())
    assert rows["d1"]["text"] == (
        "She paid 18 + 12 * 3 = [Calculator(18 + 12 * 3) → 54] 54 dollars on "
        "[Calendar() → Today is Thursday, March 4, 2021.] 2021-03-04."
    )
    calls = json.loads(rows["d1"]["calls"])
    assert [(c["tool"], c["input"], c["char_start"]) for c in calls] == [
        ("Calculator", "18 + 12 * 3", 23), ("Calendar", "", 37)]
    assert calls[0]["loss_minus"] == 2.0 and calls[0]["loss_plus"] == 0.2
    assert rows["d2"]["text"] == "Lake Orun lies near Vell. It has [QA(How many islands has Lake Orun?) → 4] 4 islands."
    c = manifest["counts"]
    assert (c["documents"], c["augmented"], c["plain"], c["calls"], c["competing_dropped"]) == (3, 3, 0, 4, 1)
    assert c["per_tool"]["Calculator"] == {"kept": 3, "inserted": 2, "capped": 0}
    out = capsys.readouterr().out.strip().splitlines()[-1]
    assert out.startswith("build: 3 augmented documents with 4 calls (Calculator 2, Calendar 1, QA 1); "
                          "0 plain mixed in")
    lines = (tmp_path / "run/build/augmented.jsonl").read_text().splitlines()
    assert [json.loads(x)["doc_id"] for x in lines] == ["d1", "d2", "d6"]
    # Completed: a rerun with the same config is skipped; the manifest came last.
    again = run_stage(cfg)
    assert again.skipped and again.manifest["finished"] == manifest["finished"]


def test_cap_per_tool_keeps_highest_margins(tmp_path):
    cfg = make_run(tmp_path, RECORDS, max_per_tool=1)
    manifest = run_stage(cfg).manifest
    rows = {r["doc_id"]: r for r in load(cfg)}
    # Calculator winners: d1 (margin 1.8) and d6 (0.7); only d1 survives.
    assert "d6" not in rows
    assert [c["tool"] for c in json.loads(rows["d1"]["calls"])] == ["Calculator", "Calendar"]
    assert manifest["counts"]["per_tool"]["Calculator"]["capped"] == 1


def test_plain_documents_dropped_mixed_or_kept(tmp_path):
    records = [RECORDS[3]]  # only d2 is augmented; five documents stay plain
    cfg = make_run(tmp_path / "a", records, plain_ratio=2.0)
    run_stage(cfg)
    ds = load(cfg)
    assert sum(ds["augmented"]) == 1 and len(ds) == 3
    plain = [r for r in ds if not r["augmented"]]
    assert all(r["calls"] == "[]" and r["text"] == next(d["text"] for d in DOCS if d["doc_id"] == r["doc_id"])
               for r in plain)
    # Same seed, same choice.
    cfg_again = make_run(tmp_path / "b", records, plain_ratio=2.0)
    run_stage(cfg_again)
    assert load(cfg_again)["doc_id"] == ds["doc_id"]

    cfg_keep = make_run(tmp_path / "c", records, drop_without_calls=False)
    run_stage(cfg_keep)
    assert load(cfg_keep)["doc_id"] == [d["doc_id"] for d in DOCS]

    cfg_drop = make_run(tmp_path / "d", records)
    run_stage(cfg_drop)
    assert load(cfg_drop)["doc_id"] == ["d2"]


def test_plain_mix_may_draw_from_plain_path(tmp_path):
    extra = tmp_path / "pretraining.jsonl"
    write_jsonl(extra, ({"text": f"Old text number {n}."} for n in range(20)))
    cfg = make_run(tmp_path / "a", [RECORDS[3]], plain_ratio=6.0, plain_path=str(extra))
    m = run_stage(cfg).manifest
    ds = load(cfg)
    assert m["counts"]["augmented"] == 1 and m["counts"]["plain"] == 6 and len(ds) == 7
    from_extra = [r for r in ds if r["doc_id"].startswith("plain:")]
    assert from_extra and all(r["text"].startswith("Old text number") and not r["augmented"] for r in from_extra)
    # A line without text names the file and line; nothing is written.
    extra.write_text(json.dumps({"text": "fine"}) + "\n" + json.dumps({"body": "no text"}) + "\n")
    cfg_bad = make_run(tmp_path / "b", [RECORDS[3]], plain_ratio=1.0, plain_path=str(extra))
    with pytest.raises(ValueError, match=r"pretraining.jsonl:2: build.plain_path"):
        run_stage(cfg_bad)
    assert not (tmp_path / "b" / "run" / "build" / "manifest.json").exists()


def test_bad_records(tmp_path):
    bad = dict(RECORDS[0], doc_id="nope")
    cfg = make_run(tmp_path / "a", [bad, RECORDS[3]])
    m = run_stage(cfg).manifest
    assert m["counts"]["rejected"] == 1 and m["counts"]["augmented"] == 1
    assert "doc_id not in" in (tmp_path / "a/run/build/rejected.jsonl").read_text()

    broken = dict(RECORDS[0])
    del broken["call_text"]
    cfg = make_run(tmp_path / "b", [RECORDS[3], broken])
    with pytest.raises(ValueError, match=r"shard-00000\.jsonl:2: kept record has no 'call_text'"):
        run_stage(cfg)


def test_requires_filter_stage(tmp_path):
    cfg = PipelineConfig(run_dir=str(tmp_path / "run"))
    write_documents(cfg.run_dir, DOCS)
    with pytest.raises(FileNotFoundError, match="filter"):
        run_stage(cfg)


def test_the_design_field_table_is_the_declared_records(repo_root):
    from toolformer.corpus.records import markdown_table

    table = markdown_table()
    assert "python -m toolformer.corpus.records" in (repo_root / "README.md").read_text(encoding="utf-8")
    for doc in ("docs/design.md",):
        text = (repo_root / doc).read_text(encoding="utf-8")
        inside = text.split("<!-- records:begin -->\n", 1)[1].split("<!-- records:end -->", 1)[0]
        assert inside == table, f"{doc}: the field table differs from toolformer/corpus/records.py; paste " \
                                f"`python -m toolformer.corpus.records` between the records markers"
