"""toolformer.bench.spread (``python scripts/spread.py``): a job rerun under each CPU kernel and thread count,
each figure given as the reference run's value with its min–max."""

import json

import pytest

from toolformer.bench import spread


def test_kernels_up_to_the_cpus_own():
    assert spread.kernels_here("avx2") == ["default", "avx2"]
    assert spread.kernels_here("avx512") == ["default", "avx2", "avx512"]
    assert spread.kernels_here("default") == ["default"]


def test_a_figure_is_the_reference_value_with_its_min_and_max():
    figs = spread.summarise({"avx2-t2": {"a": 0.977, "b": 3.0}, "avx2-t1": {"a": 0.98, "b": 3.0},
                             "default-t1": {"a": 0.973, "b": None}}, "avx2-t2")
    assert figs["a"]["value"] == 0.977 and figs["a"]["min"] == 0.973 and figs["a"]["max"] == 0.98
    assert spread.cell(figs["a"], 100) == "97.7 (97.3–98.0)"
    assert figs["b"]["min"] == figs["b"]["max"] == 3.0 and spread.cell(figs["b"], 1, 2) == "3.00"
    assert spread.cell({"value": None, "min": None, "max": None}) == "–"


def results(acc: float, kept: int) -> dict:
    rows = {"base": {"math_seen": 0.003, "qa_seen": 0.02, "perplexity": 3.14, "call_rate": 0.0},
            "toolformer": {"math_seen": acc, "qa_seen": 0.997, "perplexity": None, "call_rate": 1.0}}
    return {"rows": rows, "tasks": {"math_seen": "x", "qa_seen": "y"}, "kept_calls": {"Calculator": kept},
            "filter_gold": {"Calculator": {"precision": 0.974}}}


def test_demo_figures_and_table_from_results_json(tmp_path):
    for name, acc, kept in (("avx2-t2", 0.99, 2305), ("default-t1", 0.987, 2301)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "results.json").write_text(json.dumps(results(acc, kept)))
    runs = {n: spread.demo_figures(tmp_path / n) for n in ("avx2-t2", "default-t1")}
    assert runs["avx2-t2"]["toolformer.math_seen"] == 0.99 and runs["avx2-t2"]["kept.Calculator"] == 2305
    table = spread.demo_table(spread.summarise(runs, "avx2-t2"))
    assert "| toolformer | 99.0 (98.7–99.0) | 99.7 | – | 100 |" in table
    assert "| base | 0.3 | 2.0 | 3.14 | 0 |" in table
    assert "Calculator 2,305 (2,301–2,305) (97.4 % right)" in table


@pytest.mark.slow
def test_bench_under_two_kernels_and_two_thread_counts(tmp_path, capsys):
    out = tmp_path / "spread"
    args = ["bench", "--out", str(out), "--kernels", "default", "--threads", "1", "2", "--",
            "--model", "tiny", "-n", "8", "--naive-n", "1", "--sample-docs", "1"]
    assert spread.main(args) == 0
    summary = json.loads((out / "spread.json").read_text())
    assert sorted(summary["wall_seconds"]) == ["default-t1", "default-t2"]
    for name in summary["wall_seconds"]:  # each run under the kernel and threads its name says
        result = json.loads((out / name / "stdout.txt").read_text().splitlines()[-1])
        assert (result["cpu_kernel"], f"t{result['threads']}") == tuple(name.split("-"))
    assert summary["figures"]["threads"]["min"] == 1 and summary["figures"]["threads"]["max"] == 2
    assert "| filter / limit |" in (out / "spread.md").read_text()
    assert spread.main(args) == 0  # a rerun keeps the runs done
    assert "already done" in capsys.readouterr().out


def test_copy_figures_from_the_lab_line(tmp_path):
    (tmp_path / "stdout.txt").write_text("data/published-base: loss per token of a held-out sentence 4.30, the same "
                                         "sentence said again 4.32\n")
    assert spread.copy_figures(tmp_path) == {"copy_first": 4.30, "copy_again": 4.32}
    figs = spread.summarise({"a": spread.copy_figures(tmp_path)}, "a")
    assert "| 4.30 | 4.32 |" in spread.copy_table(figs)


def test_only_some_runs_of_the_grid_are_run_and_summarised(tmp_path, capsys):
    out = tmp_path / "spread"
    (out / "default-t1").mkdir(parents=True)
    line = {"filter_over_limit": 0.9, "filter_over_naive": 5.0, "sample_cache_speedup": 1.4, "threads": 1}
    (out / "default-t1" / "stdout.txt").write_text("limit ...\n" + json.dumps(line) + "\n")
    args = ["bench", "--out", str(out), "--kernels", "default", "--threads", "1", "2"]
    assert spread.main([*args, "--only", "default-t1"]) == 0  # done already: nothing is run
    summary = json.loads((out / "spread.json").read_text())
    assert list(summary["wall_seconds"]) == ["default-t1"] and summary["reference"] == "default-t1"
    assert "| 0.90 | 5.0× | 1.40× |" in (out / "spread.md").read_text()
    with pytest.raises(SystemExit) as e:
        spread.main([*args, "--only", "default-t3"])
    assert e.value.code == 2 and "not in the grid" in capsys.readouterr().err
