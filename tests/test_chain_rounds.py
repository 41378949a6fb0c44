"""What a chain round scores: only the candidates whose input uses the result of a call inline before them (round 1
judged every other candidate on the plain text), and the counts a round reports (not_chained, seconds,
candidates/s, kept per 1,000)."""

import json

import pytest
from helpers import filter_record, shard_records, write_filter_run

from toolformer.config.load import from_dict
from toolformer.config.schema import PipelineConfig

TEXT = "Had 24 jars at 37 coins and a fee of 150. The answer is 888 + 150 = 1038."
TEXT2 = "A crate of 12 boxes at 15 pens and 7 more. The answer is 180 + 7 = 187."


@pytest.mark.parametrize(("call_input", "result", "uses"), [
    ("1800 + 192", "1800", True),
    ("5 - 1800", "1800", True),
    ("1,800 / 3", "1800", True),  # thousands separators are not part of the number
    ("18000 + 192", "1800", False),  # a number inside a longer number
    ("1800.5 * 2", "1800", False),
    ("21800 - 1", "1800", False),
    ("37 + 150", "888", False),
    ("Who is the mayor of paris?", "Paris", True),  # names case-insensitive
    ("Who founded Parisian Foods?", "Paris", False),  # whole words only
    ("Where was Eiffel born?", "Gustave Eiffel", True),  # a capitalised word of the result
    ("Where was Gustave Eiffel born?", "It was built by Gustave Eiffel.", True),
    ("The year it opened?", "The Eiffel Tower", False),  # a lone word at a sentence start is no name
    ("How old is the Eiffel Tower?", "The Eiffel Tower", True),
    ("Who wrote blue?", "blue", True),  # the result itself
    ("anything", "", False),
])
def test_an_input_uses_a_result_as_a_whole_token_span(call_input, result, uses):
    from toolformer.stages.chain import uses_result

    assert uses_result(call_input, result) is uses


def test_only_results_inline_before_the_position_count():
    from toolformer.stages.chain import chained, inline

    doc = inline({"doc_id": "d", "text": TEXT}, [
        filter_record("d", "Calculator", "24 * 37", "888", TEXT.index("888"), 3.0, 1.0)], " ")
    assert doc["results"] == [(*doc["spans"][0], "888")]
    at = doc["text"].index("1038")
    assert chained(doc, at, "888 + 150") and chained(doc, at, "150 - 888")
    assert not chained(doc, at, "37 + 150") and not chained(doc, at, "8880 + 150")
    assert not chained(doc, doc["spans"][0][0], "888 + 150")  # the call is not inline before this position


def chain_cfg(run_dir, model_dir, shard_size: int = 1) -> PipelineConfig:
    return from_dict(PipelineConfig, {
        "run_dir": str(run_dir), "model": {"path": model_dir, "device": "cpu"}, "shard_size": shard_size,
        "tools": {"enabled": ["Calculator"]}, "sample": {"method": {"Calculator": "rules"}},
        "chain": {"rounds": 2}}, "<test>")


def chain_run(run_dir, model_dir):
    """A finished filter stage of two documents with a kept first step each (results 888 and 180)."""
    docs = [{"doc_id": "d1", "text": TEXT}, {"doc_id": "d2", "text": TEXT2}]
    write_filter_run(run_dir, docs, [
        filter_record("d1", "Calculator", "24 * 37", "888", TEXT.index("888"), 3.0, 1.0),
        filter_record("d2", "Calculator", "12 * 15", "180", TEXT2.index("180"), 3.0, 1.0)])
    return chain_cfg(run_dir, model_dir)


def test_a_round_scores_the_candidates_that_use_an_earlier_result(tmp_path, tiny_model_dir, monkeypatch, capsys):
    """At `1038` the rules propose the 18 calls over 37, 888 and 150: the 6 without 888 are dropped before
    execution (not_chained), of the 12 with it only `888 + 150` gives the 1038 the text states next and is scored
    with the first call inline, the 11 others are dropped after execution (not_stated); the same round without
    the two rules scores all 18."""
    from toolformer.stages import run_stage
    from toolformer.stages.chain import uses_result

    counts = run_stage("chain", chain_run(tmp_path / "run", tiny_model_dir)).manifest["counts"]["rounds"]["2"]
    records = shard_records(tmp_path / "run" / "chain", "round-2")
    d1 = [r for r in records if r["doc_id"] == "d1"]
    assert [r["input"] for r in d1] == ["888 + 150"] and d1[0]["char_start"] == TEXT.index("1038")  # original
    assert all(r["loss_plus"] is not None and r["call_text"] for r in records)  # executed and scored
    assert all(uses_result(r["input"], "180") for r in records if r["doc_id"] == "d2")
    calc = counts["per_tool"]["Calculator"]
    assert calc["candidates"] == calc["scored"] == len(records) and calc["kept"] == sum(r["kept"] for r in records)
    assert calc["not_chained"] >= 6 and calc["not_stated"] >= 11 and counts["documents"] == 2
    out = capsys.readouterr().out
    assert f"{calc['not_chained']:,} not chained, {calc['not_stated']:,} result not stated" in out
    assert "scored candidates/s" in out

    monkeypatch.setattr("toolformer.stages.chain.chained", lambda doc, char, call_input: True)
    monkeypatch.setattr("toolformer.stages.chain.states_result", lambda text, char, result: True)
    every = run_stage("chain", chain_run(tmp_path / "all", tiny_model_dir)).manifest["counts"]["rounds"]["2"]
    assert every["per_tool"]["Calculator"]["candidates"] == (calc["candidates"] + calc["not_chained"]
                                                             + calc["not_stated"])
    assert len([r for r in shard_records(tmp_path / "all" / "chain", "round-2") if r["doc_id"] == "d1"]) == 18


def test_round_counts_rates_and_resume(tmp_path, tiny_model_dir, capsys):
    """The round's manifest carries seconds, scored candidates per second and kept per 1,000 candidates; a round
    interrupted after its first shard resumes to the same records (the losses to 1e-5) and counts (the dropped
    candidates of the done shard included); a complete round is skipped with its counts."""
    from helpers import approx_floats

    from toolformer.stages import run_stage

    cfg = chain_run(tmp_path / "run", tiny_model_dir)
    counts = run_stage("chain", cfg).manifest["counts"]["rounds"]["2"]
    calc = counts["per_tool"]["Calculator"]
    assert counts["seconds"] > 0
    assert counts["candidates_per_s"] == round(calc["scored"] / counts["seconds"], 2)
    assert calc["kept_per_1000"] == round(1000 * calc["kept"] / calc["candidates"], 2)
    round_dir = tmp_path / "run" / "chain" / "round-2"
    assert json.loads((round_dir / "manifest.json").read_text())["counts"] == counts
    before = shard_records(tmp_path / "run" / "chain", "round-2")
    shards = sorted(round_dir.glob("shard-*.jsonl"))
    assert len(shards) == 2  # one document a shard
    for f in (shards[-1], round_dir / "manifest.json", tmp_path / "run" / "chain" / "manifest.json"):
        f.unlink()
    capsys.readouterr()
    again = run_stage("chain", cfg).manifest["counts"]["rounds"]["2"]
    assert "round 2: resuming after 1 complete shard(s)" in capsys.readouterr().out
    assert shard_records(tmp_path / "run" / "chain", "round-2") == approx_floats(before)

    def same(c: dict) -> dict:
        return {k: v for k, v in c.items() if k not in ("seconds", "candidates_per_s")}

    assert same(again) == same(counts) and again["seconds"] > 0
    (tmp_path / "run" / "chain" / "manifest.json").unlink()
    skipped = run_stage("chain", cfg).manifest["counts"]["rounds"]["2"]
    assert "round 2 already complete" in capsys.readouterr().out and skipped == again


def test_a_result_counts_as_stated_only_soon_after_the_position():
    from toolformer.stages.chain import STATED_WITHIN, states_result

    text = "The answer is 1800 + 192, which is 1992 crowns."
    at = text.index("1992")
    assert states_result(text, at, "1992")
    assert not states_result(text, at, "1993") and not states_result(text, at, "199")
    far = "x" * STATED_WITHIN + " 1992"
    assert not states_result(far, 0, "1992") and states_result(far, 5, "1992")


def test_chain_tau_filter_judges_every_chained_call(tmp_path, tiny_model_dir, monkeypatch):
    """chain.tau_filter replaces the filter's tau_f (and its per-tool ones) for chained calls: at −100 every scored
    one is kept, at 100 none; the records carry the tau_f they were judged with."""
    from toolformer.stages import run_stage

    monkeypatch.setattr("toolformer.stages.chain.chained", lambda doc, char, call_input: True)
    monkeypatch.setattr("toolformer.stages.chain.states_result", lambda text, char, result: True)
    for name, tau in (("low", -100.0), ("high", 100.0)):
        cfg = chain_run(tmp_path / name, tiny_model_dir)
        cfg.chain.tau_filter = tau
        run_stage("chain", cfg)
        scored = [r for r in shard_records(tmp_path / name / "chain", "round-2") if r["loss_plus"] is not None]
        assert len(scored) >= 18 and {r["tau_filter"] for r in scored} == {tau}
        assert all(r["kept"] == (tau < 0 and not r["read_ahead"]) for r in scored)
