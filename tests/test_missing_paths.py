"""Paths that do not exist: a local model, corpus or tokenizer path that is missing fails at once naming its key,
and a hub id fails fast when the hub does not answer or HF_HUB_OFFLINE is set."""

import socket
import time

import pytest
from helpers import run_cli
from runs import quick_overrides


def test_looks_local():
    from toolformer.rundir.inputs import looks_local

    assert all(looks_local(p) for p in ("./m", "/m", "~/m", "runs/none", "data/none", "a/b/c", "corpus.jsonl"))
    assert not any(looks_local(p) for p in ("gpt2", "EleutherAI/pythia-1.4b", "someorg/somemodel"))


@pytest.mark.slow
@pytest.mark.parametrize("override, message", [
    ("model.path=runs/no-such-model", "model.path: model folder runs/no-such-model does not exist"),
    ("corpus.path=runs/no-such-corpus.jsonl", "corpus.path: path runs/no-such-corpus.jsonl does not exist"),
    ("model.tokenizer=./no-tokenizer", "model.tokenizer: model folder ./no-tokenizer does not exist"),
])
def test_missing_local_paths_fail_at_once(override, message, tiny_model_dir, tmp_path):
    t0 = time.perf_counter()
    res = run_cli(["sample", "--config", "configs/tiny.yaml", *quick_overrides(tiny_model_dir, tmp_path / "run"),
                   override])
    assert res.returncode == 2 and message in res.stderr and "Traceback" not in res.stderr, res.stderr[-2000:]
    assert time.perf_counter() - t0 < 5 and not (tmp_path / "run").exists()


@pytest.mark.slow
def test_hub_id_with_the_hub_unreachable_fails_fast(tiny_model_dir, tmp_path):
    # One request of HUB_TIMEOUT_S (3 s), not the client's retries; the bound is loose for a loaded machine
    # (process start and imports included): what it catches is a command that waits on the hub for minutes.
    silent = socket.socket()  # accepts connections, never answers
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)
    env = {"HF_ENDPOINT": f"http://127.0.0.1:{silent.getsockname()[1]}", "HF_HUB_CACHE": str(tmp_path / "cache"),
           "HF_HUB_OFFLINE": "0"}
    args = ["sample", "--config", "configs/tiny.yaml", *quick_overrides(tiny_model_dir, tmp_path / "run"),
            "model.path=someorg/somemodel"]
    try:
        for extra in ({}, {"HF_HUB_OFFLINE": "1"}):
            t0 = time.perf_counter()
            res = run_cli(args, {**env, **extra})
            assert time.perf_counter() - t0 < 20, extra
            assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr[-2000:]
            assert "model.path: someorg/somemodel is not a local path" in res.stderr
            assert ("HF_HUB_OFFLINE is set" if extra else "the hub did not answer") in res.stderr
    finally:
        silent.close()
    assert not (tmp_path / "run").exists()


def test_evaluate_needs_the_configs_tool_data_only_for_rows_that_use_it(tmp_path, monkeypatch):
    """A tuned folder that records its tools (toolformer.json) brings its own QA data: evaluate does not ask for
    the config's tools.knowledge, which the working folder lacks; a row that uses the config's tools does."""
    from toolformer.config.schema import PipelineConfig
    from toolformer.rundir.inputs import MODEL_RECORD, check_reads

    monkeypatch.chdir(tmp_path)  # no data/knowledge.jsonl here
    tuned = tmp_path / "tuned"
    tuned.mkdir()
    (tmp_path / "base").mkdir()
    cfg = PipelineConfig(run_dir=str(tmp_path / "run"))
    cfg.model.path, cfg.finetune.output_dir = str(tmp_path / "base"), str(tuned)
    cfg.evaluate.tasks, cfg.evaluate.perplexity_path = [], ""
    cfg.tools.enabled = ["Calculator", "QA"]
    with pytest.raises(FileNotFoundError, match="tools.knowledge"):  # no record yet: the config's tools
        check_reads(cfg, ["evaluate"])
    (tuned / MODEL_RECORD).write_text("{}")
    check_reads(cfg, ["evaluate"])  # the row reads what its folder records
    cfg.evaluate.tools_from = "config"
    with pytest.raises(FileNotFoundError, match="tools.knowledge"):
        check_reads(cfg, ["evaluate"])
    cfg.evaluate.tools_from, cfg.evaluate.rows = "model", ["base", "toolformer_disabled"]
    (tuned / MODEL_RECORD).unlink()
    check_reads(cfg, ["evaluate"])  # no row calls tools
