"""filter.lookahead: a candidate whose input holds a number or a name that the text states only after the call's
position is dropped (drop), kept and marked (flag) or not checked (off); counted per tool in the manifest and in
inspect's funnel. The filter stage runs on a sample stage in the shape a model's sampler writes it."""

import json
from pathlib import Path

import pytest
from helpers import ROOT

from toolformer.cli.app import main
from toolformer.config.load import ConfigError, load_config
from toolformer.config.schema import PipelineConfig
from toolformer.tools.lookahead import reads_ahead

TEXT = "Anna had 1,250 pens and bought 40 more. She has 1,290 pens now. Kessford was founded in 1201 by Oster."


def test_reads_ahead_names_what_the_text_states_only_later():
    answer = TEXT.index("1,290")
    assert reads_ahead(TEXT, answer, "1250 + 40") == []  # both numbers stated before: a right call
    assert reads_ahead(TEXT, TEXT.index("bought"), "1250 + 40") == ["40"]  # 40 comes later
    assert reads_ahead(TEXT, 0, "1,250 + 40") == ["1250", "40"]  # separators do not matter
    assert reads_ahead(TEXT, answer, "60 * 60") == []  # a number the text never states is not read ahead
    assert reads_ahead(TEXT, answer, "12 + 5") == []  # whole numbers only: 1201 holds no 12
    founded = TEXT.index("Kessford")
    assert reads_ahead(TEXT, founded, "Who founded Kessford?") == ["Kessford"]
    assert reads_ahead(TEXT, founded + len("Kessford"), "Who founded Kessford?") == []
    assert reads_ahead(TEXT, founded, "founder of Oster") == ["Oster"]
    assert reads_ahead(TEXT, founded, "kessford") == []  # a word in lower case is no name
    born = "Roly Mosby was born in the town of Halbrook. The town grew."
    at = born.index("Halbrook")  # a first word capitalised as a sentence starts: stated before in lower case
    assert reads_ahead(born, at, "The birthplace of Roly Mosby is?") == []
    assert reads_ahead(born, at, "Was The Town big?") == ["The"]  # inside the input: a name, with its case
    assert reads_ahead(born, 0, "Mosby, the town?") == ["Mosby"]  # a first word is still a name when not stated


def test_lookahead_mode_is_checked():
    assert load_config(PipelineConfig, None).filter.lookahead == "drop"
    with pytest.raises(ConfigError, match="filter: lookahead: 'maybe' is not one of drop, flag, off"):
        load_config(PipelineConfig, None, ["filter.lookahead=maybe"])


# What a model's sampler may write in the text below: the right call at the answer, and the same call at
# "bought", before 40 is stated (it reads 40 ahead), and a query at "Kessford" naming Kessford before the text does.
SAMPLED = [("1250 + 40", "1,290"), ("1250 + 40", "bought"), ("1250 * 40", "40 more"), ("Kessford", "Kessford")]


def _sampled_run(run_dir: Path, model_dir) -> None:
    """A finished sample stage in the shape the sampler writes it (records, documents, manifest)."""
    from transformers import AutoTokenizer

    from toolformer.lm.textpos import tokenize_text
    from toolformer.rundir.folder import StageFolder, write_documents
    from toolformer.rundir.guard import mark

    mark(run_dir)
    starts = tokenize_text(AutoTokenizer.from_pretrained(model_dir), TEXT).char_starts
    stage = StageFolder(run_dir, "sample")
    stage.begin("sampled")
    write_documents(run_dir, [{"doc_id": "d0", "text": TEXT, "date": None}])
    records = []
    for call_input, anchor in SAMPLED:
        tool = "Calculator" if "+" in call_input or "*" in call_input else "WikiSearch"
        char = TEXT.index(anchor)
        position = max(i for i, s in enumerate(starts) if s <= char)
        records.append({"doc_id": "d0", "tool": tool, "input": call_input, "position": position,
                        "char_start": starts[position], "p_i": 0.5, "source": "sampler"})
    stage.write_shard(0, records)
    stage.finish("sampled", 0, {"documents": 1, "per_tool": {t: {
        "documents": 1, "positions": sum(r["tool"] == t for r in records),
        "candidates": sum(r["tool"] == t for r in records)} for t in ("Calculator", "WikiSearch")}})


def _run(tmp_path: Path, model_dir, mode: str, capsys) -> tuple[list[dict], dict, str]:
    """execute → filter on the sampled calls, tau_f low enough that every scored call passes it."""
    run_dir = tmp_path / mode
    _sampled_run(run_dir, model_dir)
    argv = ["--config", str(ROOT / "configs" / "tiny.yaml"), f"run_dir={run_dir}", f"model.path={model_dir}",
            "tools.enabled=[Calculator, WikiSearch]", "filter.tau_filter=-1000", "filter.per_tool_tau={}",
            f"tools.collection={ROOT / 'data' / 'collection.jsonl'}", f"filter.lookahead={mode}"]
    for stage in ("execute", "filter"):
        assert main([stage, *argv]) == 0
    out = capsys.readouterr().out
    records = [json.loads(line) for f in sorted((run_dir / "filter").glob("shard-*.jsonl")) for line in f.open()]
    return records, json.loads((run_dir / "filter" / "manifest.json").read_text()), out


def test_filter_drops_flags_or_ignores_calls_that_read_ahead(tiny_model_dir, tmp_path, capsys):
    by_mode = {mode: _run(tmp_path, tiny_model_dir, mode, capsys) for mode in ("drop", "flag", "off")}
    records, manifest, out = by_mode["drop"]
    ahead = [r for r in records if r["read_ahead"]]
    assert [r["read_ahead"] for r in records] == [[], ["40"], ["40"], ["Kessford"]]
    assert all(r["loss_plus"] is not None for r in records)
    for r in records:
        assert r["kept"] == (not r["read_ahead"])
    assert manifest["lookahead"] == "drop"
    assert manifest["counts"]["per_tool"]["Calculator"] == {"candidates": 3, "scored": 3, "kept": 1, "read_ahead": 2}
    assert manifest["counts"]["per_tool"]["WikiSearch"]["read_ahead"] == 1
    assert "dropped for reading ahead of their position: Calculator 2, WikiSearch 1" in out

    flagged, manifest, out = by_mode["flag"]
    assert [r["read_ahead"] for r in flagged] == [r["read_ahead"] for r in records]
    assert all(r["kept"] for r in flagged) and manifest["counts"]["per_tool"]["Calculator"]["read_ahead"] == 2
    assert "kept and flagged for reading ahead" in out

    off, manifest, _ = by_mode["off"]
    assert all(r["kept"] and r["read_ahead"] == [] for r in off)
    assert manifest["counts"]["per_tool"]["Calculator"]["read_ahead"] == 0
    # The losses do not depend on the mode (another run: to 1e-5, as a rerun of the filter).
    assert [r["loss_plus"] for r in off] == pytest.approx([r["loss_plus"] for r in records], abs=1e-5)

    # inspect: the count, the mode and examples, and no warning about `kept` disagreeing with the margin.
    assert main(["inspect", str(tmp_path / "drop")]) == 0
    shown = capsys.readouterr().out
    assert "Calculator: 2 calls passed tau_f but read ahead of their position (dropped" in shown
    assert "Calculator(1250 + 40) reads 40 from later in the text" in shown and "disagrees" not in shown
    funnel = json.loads((tmp_path / "drop" / "inspect" / "funnel.json").read_text())
    calc = funnel["per_tool"]["Calculator"]
    assert calc["counts"]["read_ahead"] == 2 and calc["read_ahead"]["mode"] == "drop"
    assert [e["read_ahead"] for e in calc["read_ahead"]["examples"]] == [["40"], ["40"]]
    assert ahead[0]["char_start"] == calc["read_ahead"]["examples"][0]["char_start"]
    report = (tmp_path / "drop" / "inspect" / "report.html").read_text()
    assert "<h2>Calls that read ahead</h2>" in report and "Calculator 2, WikiSearch 1" in report
    assert "<td>1250 + 40</td><td>40</td><td>Anna had 1,250 pens and <b>▸</b>bought 40 more." in report
