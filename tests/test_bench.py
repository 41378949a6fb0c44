"""scripts/bench.py runs end to end and prints its JSON line (speed itself is
not asserted: it is measured, see README "Performance")."""

import json

import pytest

from toolformer.bench.speed import main


@pytest.mark.slow
def test_bench_prints_the_ratios(capsys):
    assert main(["--model", "tiny", "-n", "40", "--naive-n", "2", "--sample-docs", "1", "--threads", "1"]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    for key in ("filter_over_limit", "filter_over_naive", "sample_cache_speedup", "params", "device", "dtype"):
        assert key in result, key
    assert result["N"] == 40 and result["share_rows"] and not result["share_prefixes"]
    assert result["filter_tokens"] > 0 and 0 <= result["filter_padding"] < 1
    assert result["filter_over_limit"] > 0 and result["filter_over_naive"] > 0 and result["sample_cache_speedup"] > 0


@pytest.mark.slow
def test_bench_without_sharing_scores_more_tokens(capsys):
    args = ["--model", "tiny", "-n", "40", "--naive-n", "1", "--sample-docs", "1", "--threads", "1"]
    main(args)
    shared = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    main([*args, "--no-share"])
    plain = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    main([*args, "--share-prefixes"])
    heads = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert plain["filter_tokens"] > shared["filter_tokens"] > heads["filter_tokens"]


@pytest.mark.slow
def test_gpu_check_runs_on_the_cpu(capsys, monkeypatch, repo_root):
    from toolformer.bench.gpucheck import main as gpu_check

    monkeypatch.chdir(repo_root)
    assert gpu_check(["--cpu"]) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert out["device"] == "cpu" and out["bench"]["filter_over_naive"] > 1
    p = out["precision"]
    assert p["candidates"] == 100 and 0 <= p["flipped_share_at_median_margin"] <= 1 and p["max_abs_margin_diff"] > 0
    assert out["finetune"]["seconds_per_step"] > 0 and out["finetune"]["parameters"] > 100_000
    assert out["peak_memory_mib"] > 0
    with pytest.raises(SystemExit, match="no CUDA device"):
        gpu_check([])


def test_tool_workers_bench(capsys, monkeypatch, repo_root):
    monkeypatch.chdir(repo_root)
    main(["--tool-workers", "1", "4", "--tool-calls", "40"])
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert out["ok_1_workers"] == out["ok_4_workers"] == 40 and out["calls_per_s_4_workers"] > 0


@pytest.mark.slow
def test_constrained_bench_times_the_masking(capsys, monkeypatch, repo_root):
    from toolformer.bench.decoding import bench_constrained

    monkeypatch.chdir(repo_root)
    out = bench_constrained([300], n_prompts=4, new_tokens=8)
    (row,) = [v for k, v in out.items() if k.startswith("vocab_")]
    assert row["rows_masked"] > 0 and row["masks"] > 0
    assert 0 < row["masking_seconds_warm"] <= row["seconds_warm"] and row["masking_share_cold"] < 1
