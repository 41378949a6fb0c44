"""Tool use against model size (toolformer/published/scale.py, scaleplot.py) and the demo's wall-time record."""

from __future__ import annotations

import json
import os
import struct
import time
from pathlib import Path

import pytest

from toolformer.published import scale, scaleplot
from toolformer.worlds.demo import Timer

ROOT = Path(__file__).resolve().parent.parent


def test_wilson_intervals_match_the_textbook_values():
    # 5 of 10: 0.2366-0.7634; 0 of 10: 0-0.2775; 10 of 10: 0.7225-1 (Wilson 1927, z = 1.96)
    for (k, n), want in {(5, 10): (0.2366, 0.7634), (0, 10): (0.0, 0.2775), (10, 10): (0.7225, 1.0)}.items():
        lo, hi = scaleplot.wilson(k, n)
        assert abs(lo - want[0]) < 1e-4 and abs(hi - want[1]) < 1e-4
    assert scaleplot.wilson(0, 0) == [0.0, 1.0]


def _record(label: str, parameters: int, correct: dict[str, dict[str, int]], kept: int, right: int | None) -> dict:
    rows = {row: {"sets": {s: {"accuracy": k / 60, "n": 60, "correct": k, "ci95": scaleplot.wilson(k, 60)}
                           for s, k in sets.items()}, "perplexity": None, "call_rate": 0.1}
            for row, sets in correct.items()}
    calls = {"Calculator": {"candidates": 1000, "scored": 1000, "kept": kept, "kept_per_1000_candidates": kept,
                            "kept_right": right, "precision": None if right is None else right / kept,
                            "precision_ci95": None if right is None else scaleplot.wilson(right, kept), "gold": 50,
                            "recall": 0 if right is None else right / 50, "needed_recall": None}}
    return {"label": label, "model": {"spec": label, "name": label, "parameters": parameters}, "rows": rows,
            "calls": calls, "command": "…", "wall_seconds": {"total": 1.0}}


def _points(tmp_path: Path) -> list[str]:
    sets = ("lama", "asdiv", "mawps", "gsm8k")
    small = _record("small", 3_000_000, {r: dict.fromkeys(sets, 1) for r in scaleplot.ROWS}, kept=0, right=None)
    big = _record("big", 300_000_000, {"base": dict.fromkeys(sets, 3), "toolformer_disabled": dict.fromkeys(sets, 4),
                                       "toolformer": {"lama": 20, "asdiv": 30, "mawps": 24, "gsm8k": 2}},
                  kept=20, right=15)
    paths = []
    for rec in (big, small):  # written largest first: read back smallest first
        paths.append(str(tmp_path / f"{rec['label']}.json"))
        Path(paths[-1]).write_text(json.dumps(rec))
    return paths


def test_points_pool_each_family_and_sort_by_size(tmp_path):
    records = scale.read_records(_points(tmp_path))
    assert [r["label"] for r in records] == ["small", "big"]
    acc, (lo, hi), n = scaleplot.pooled(records[1], "toolformer", scaleplot.FAMILIES["ASDiv + MAWPS"])
    assert n == 120 and abs(acc - 54 / 120) < 1e-12 and lo < acc < hi
    assert scaleplot.pooled(records[1], "control", ("lama",)) is None  # a row the point did not run
    table = scale.table(records)
    row = next(line for line in table.splitlines() if line.startswith("| big"))
    assert " 5.0 / 6.7 / 33.3 (23–46, n=60) " in row and "Calculator 20 (15)" in row
    assert "Calculator 0 |" in next(line for line in table.splitlines() if line.startswith("| small"))
    pinned = {"model": {"spec": "smollm2", "name": "SmolLM2-135M-Instruct (Llama architecture), Q4_1"}}
    assert scaleplot.display_name(pinned) == "SmolLM2-135M-Instruct"
    assert scaleplot.display_name({"model": {"spec": "data/published-base", "name": "published-base"}}) == \
        "data/published-base"


def test_the_figure_is_a_png_of_the_points(tmp_path):
    from toolformer.published.scaleplot import figure

    out = figure(scale.read_records(_points(tmp_path)), tmp_path / "fig" / "scale.png")
    head = out.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", head[16:24])
    assert width > 800 and height > 500
    with pytest.raises(ValueError, match="no point"):
        figure([], tmp_path / "none.png")


def test_a_file_that_is_not_a_point_names_itself(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"model": {}}))
    assert scale.main(["table", str(bad)]) == 2
    assert f"{bad}: not a point of `scale run`" in capsys.readouterr().err


def test_a_point_runs_beside_the_config_on_its_world(tmp_path):
    from toolformer.published.config import load_published

    cfg = load_published(ROOT / "configs" / "published.yaml", [f"run_dir={tmp_path / 'run'}"])
    assert scale.point_config(cfg, cfg.pretrain.weights).run_dir == cfg.run_dir
    other = scale.point_config(cfg, "gemma3-270m")
    assert other.run_dir == f"{tmp_path / 'run'}-gemma3-270m" and other.pretrain.weights == "gemma3-270m"
    assert other.world_dir() == cfg.world_dir()
    folder = tmp_path / "models" / "tiny"
    folder.mkdir(parents=True)
    mine = scale.point_config(cfg, str(folder))
    assert (mine.run_dir, mine.pipeline.model.path, mine.pretrain.weights) == (
        f"{tmp_path / 'run'}-tiny", str(folder), "")
    assert cfg.pretrain.weights == "smollm2" and cfg.run_dir == str(tmp_path / "run")  # the config is not changed


def test_parameters_are_counted_from_the_safetensors_headers(tmp_path):
    import torch
    from safetensors.torch import save_file

    save_file({"a": torch.zeros(3, 4), "b": torch.zeros(5)}, str(tmp_path / "model-1.safetensors"))
    save_file({"c": torch.zeros(2, 2, 2)}, str(tmp_path / "model-2.safetensors"))
    assert scale.count_parameters(tmp_path) == 12 + 5 + 8
    with pytest.raises(ValueError, match="no \\*.safetensors"):
        scale.count_parameters(tmp_path / "empty")


def test_the_wall_time_of_a_run_adds_up_over_its_invocations(tmp_path):
    record = tmp_path / "walls.json"
    first = Timer(record)
    first("sample", lambda: time.sleep(0.2))
    assert 0.15 < first.spent()["sample"] < 5
    # an invocation killed in the filter: its part counts up to the last file the filter wrote
    stage = tmp_path / "filter"
    stage.mkdir()
    since = time.time() - 100
    (stage / "shard-00000.jsonl").write_text("{}\n")
    os.utime(stage / "shard-00000.jsonl", (since + 40, since + 40))
    saved = json.loads(record.read_text())
    record.write_text(json.dumps(saved | {"running": {"filter": since}}))
    again = Timer(record)
    assert abs(again.spent()["filter"] - 40) < 0.5
    again("filter", lambda: None)
    spent = again.spent()
    assert abs(spent["filter"] - 40) < 0.5 and spent["total"] == pytest.approx(spent["sample"] + spent["filter"])
    assert json.loads(record.read_text())["running"] == {}
    again.reset()
    assert Timer(record).spent() == {"total": 0}
    for damaged in ('{"spent": ', '{"spent": {"filter": "x"}, "running": {}}', '[]'):  # the times start over
        record.write_text(damaged)
        assert Timer(record).spent() == {"total": 0}


@pytest.mark.slow
def test_the_filter_cost_is_measured_per_group_of_positions(quick_run, capsys):
    from toolformer.published.lab import main

    assert main(["cost", str(quick_run), "--bins", "2", "--per-bin", "4"]) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| ") and "–" in line]
    assert len(rows) == 2
    from toolformer.published.cost import filter_cost

    first, last = filter_cost(str(quick_run), bins=2, per_bin=4)
    assert first["calls"] == last["calls"] == 4 and first["positions"][1] <= last["positions"][0]
    assert 0 < first["tokens_per_candidate"] < last["tokens_per_candidate"]  # the text before the call is reread
    assert first["seconds_per_candidate"] > 0
    with pytest.raises(ValueError, match="no config.yaml"):
        filter_cost(str(quick_run / "sample"))
