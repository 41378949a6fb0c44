"""scripts/bench.py runs end to end and prints its JSON line (speed itself is
not asserted: it is measured, see README "Performance")."""

import json

import pytest
import torch

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
    assert gpu_check(["--cpu", "--weights", ""]) == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert "real_weights" not in out  # --weights '': the part on a pretrained model left out
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


@pytest.mark.slow
def test_the_bench_on_a_model_folder_measures_the_filter_finetuning_and_generation(tiny_model_dir, tmp_path,
                                                                                   capsys, monkeypatch, repo_root):
    """``--weights FOLDER`` (a pretrained model; here the tiny one) with ``--run``: every ratio and speed."""
    from toolformer.config.load import load_config
    from toolformer.config.schema import PipelineConfig
    from toolformer.pipeline import save_resolved_config

    monkeypatch.chdir(repo_root)
    overrides = [f"run_dir={tmp_path / 'run'}", f"model.path={tiny_model_dir}", f"finetune.output_dir={tiny_model_dir}"]
    cfg = load_config(PipelineConfig, "configs/tiny.yaml", overrides)
    save_resolved_config(cfg)
    from toolformer.cli.app import main as cli

    assert cli(["bench", "--weights", tiny_model_dir, "-n", "20", "--naive-n", "2", "--sample-docs", "1", "--rows", "2",
                 "--row-tokens", "32", "--steps", "1", "--threads", "1", "--run", str(tmp_path / "run"),
                 "--generate-items", "2"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    out = json.loads(lines[-1])
    assert out["folder"] == tiny_model_dir and out["N"] == 20 and out["vocabulary"] > 0
    for key in ("filter_over_limit", "filter_over_naive", "filter_over_reference", "sample_cache_speedup"):
        assert out[key] > 0, key
    full, adapters = out["finetune"]["full"], out["finetune"]["lora"]  # each measured in a process of its own
    assert full["rows"] == adapters["rows"] == "2x32" and full["tokens_per_s"] > 0 and adapters["tokens_per_s"] > 0
    assert full["trained"] == full["parameters"] and 0 < adapters["trained"] < adapters["parameters"] / 2
    assert full["peak_mib"] > 0 and full["memory_over_full"] == 1 and adapters["memory_over_full"] > 0
    assert "lora: " in lines[-2] and "of full's peak memory" in lines[-2]
    gen = out["generate"]
    assert {"math", "qa"} <= set(gen) and gen["math"]["items"] == 2
    assert gen["math"]["tools"]["tokens_per_s"] > 0 and gen["math"]["no_tools"]["calls"] == 0
    assert "of the forward limit" in lines[-2] and "generate math:" in lines[-2]


def test_the_bench_names_a_run_folder_without_its_config(tmp_path):
    from toolformer.bench.realmodel import generation_speed

    with pytest.raises(ValueError, match="no config.yaml there"):
        generation_speed(str(tmp_path), 2)


@pytest.mark.slow
def test_gpu_check_on_the_cpu_runs_the_pretrained_part(smollm2_dir, capsys, monkeypatch, repo_root):
    """``--cpu --weights FOLDER`` (the pinned SmolLM2): filter, bf16 margins, full and LoRA steps, small sizes."""
    from toolformer.bench.gpucheck import main as gpu_check

    monkeypatch.chdir(repo_root)
    assert gpu_check(["--cpu", "--weights", str(smollm2_dir)]) == 0
    real = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["real_weights"]
    assert real["folder"] == str(smollm2_dir) and real["bench"]["params"] > 100e6
    assert real["bench"]["filter_over_limit"] > 0 and real["bench"]["filter_over_naive"] > 0
    p = real["precision"]
    assert p["candidates"] == 12 and p["tau_filter"] == 1.0 and p["max_abs_margin_diff"] > 0  # bf16 moves them
    assert p["max_diff_over_tau"] == pytest.approx(p["max_abs_margin_diff"], rel=1e-3)
    assert set(real["finetune"]) == {"full", "lora"} and real["finetune"]["lora"]["trained"] < 10e6
    assert real["generate"] == {"skipped": "no --run RUN_DIR (a finished run of these weights)"}


def test_gpu_check_says_why_the_pretrained_part_is_missing(tmp_path):
    from toolformer.bench.gpucheck import real_weights

    out = real_weights("no-such-model", torch.device("cpu"), torch.float32, {}, "")
    assert out["weights"] == "no-such-model" and "no-such-model" in out["skipped"]


@pytest.mark.parametrize("method", ["full", "lora"])
def test_a_method_measured_with_gradient_checkpointing_trains_what_it_should(tiny_model_dir, method):
    from toolformer.bench.methods import measure_one

    out = measure_one(tiny_model_dir, method, 2, 16, 1, torch.device("cpu"), torch.float32, checkpointing=True)
    assert out["gradient_checkpointing"] and out["rows"] == "2x16" and out["tokens_per_s"] > 0
    assert (out["trained"] == out["parameters"]) == (method == "full") and out["peak_mib"] > 0
