"""A stage killed with SIGKILL part way, then the same command again, ends with the records (and, for build and
finetune, the weights) of an uninterrupted run; the same seed gives byte-identical records. A TOOLFORMER_FAULT
that could never fire is refused before any work.

Bit for bit holds for the same config, seed and thread count on one machine (the same CPU kernels): every run here
has one thread (``model.threads=1``), and a subprocess inherits ``ATEN_CPU_CAPABILITY``."""

import json

import pytest
from helpers import ROOT, run_cli, shard_lines

from toolformer.config.load import load_config
from toolformer.config.schema import PipelineConfig
from toolformer.pipeline import run_pipeline


def _overrides(model_dir, run_dir):
    return [f"run_dir={run_dir}", f"model.path={model_dir}", f"corpus.path={ROOT / 'data' / 'corpus.jsonl'}",
            f"tools.collection={ROOT / 'data' / 'collection.jsonl'}",
            f"tools.knowledge={ROOT / 'data' / 'knowledge.jsonl'}", "shard_size=4", "filter.tau_filter=0.0",
            "model.threads=1", "stages=[sample, execute, filter]"]


@pytest.fixture(scope="module")
def reference_run(tiny_model_dir, tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("ref") / "run"
    cfg = load_config(PipelineConfig, ROOT / "configs" / "tiny.yaml", _overrides(tiny_model_dir, run_dir))
    run_pipeline(cfg)
    return run_dir


@pytest.mark.slow
@pytest.mark.parametrize("stage", ["sample", "execute", "filter"])
def test_sigkill_then_rerun_equals_uninterrupted(stage, reference_run, tiny_model_dir, tmp_path):
    run_dir = tmp_path / "run"
    args = ["run", "--config", "configs/tiny.yaml", *_overrides(tiny_model_dir, run_dir)]
    killed = run_cli(args, {"TOOLFORMER_FAULT": f"{stage}:2"})
    assert killed.returncode == -9, killed.stderr[-2000:]  # SIGKILL after 2 shards of the stage
    assert not (run_dir / stage / "manifest.json").exists()
    assert len(list((run_dir / stage).glob("shard-*.jsonl"))) == 2
    again = run_cli(args)
    assert again.returncode == 0, again.stderr[-2000:]
    assert "resuming after 2 complete shard(s)" in again.stdout
    for s in ("sample", "execute", "filter"):
        got, want = shard_lines(run_dir, s), shard_lines(reference_run, s)
        assert got == want, s  # same records, same order, bit for bit: none lost, none duplicated
        assert len(set(got)) == len(got) or s == "sample"


@pytest.mark.slow
def test_same_seed_and_threads_give_byte_identical_records(reference_run, tiny_model_dir, tmp_path):
    """The README's promise, under its conditions: the same config, seed and thread count, one machine."""
    cfg = load_config(PipelineConfig, ROOT / "configs" / "tiny.yaml", _overrides(tiny_model_dir, tmp_path / "again"))
    run_pipeline(cfg)
    for s in ("sample", "execute", "filter"):
        a = b"".join(p.read_bytes() for p in sorted((reference_run / s).glob("shard-*.jsonl")))
        b = b"".join(p.read_bytes() for p in sorted((tmp_path / "again" / s).glob("shard-*.jsonl")))
        assert a == b and a
    m = json.loads((tmp_path / "again" / "sample" / "manifest.json").read_text())
    assert m["seed"] == 0 and m["versions"]["torch"] and m["versions"]["transformers"]


@pytest.fixture(scope="module")
def reference_tuned(tiny_model_dir, tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("ref-ft") / "run"
    # One thread in both processes (_overrides): the rerun's weights are compared bit for bit with these.
    ov = _overrides(tiny_model_dir, run_dir)[:-1] + ["stages=[sample, execute, filter, build, finetune]"]
    cfg = load_config(PipelineConfig, ROOT / "configs" / "tiny.yaml", ov)
    run_pipeline(cfg)
    return run_dir, ov


@pytest.mark.slow
@pytest.mark.parametrize("stage", ["build", "finetune"])
def test_sigkill_build_and_finetune_then_rerun(stage, reference_tuned, tmp_path):
    """The rerun's augmented data and weights equal the uninterrupted run's bit for bit: one thread, one machine."""
    import torch
    from safetensors.torch import load_file

    ref_dir, ov = reference_tuned
    run_dir = tmp_path / "run"
    ov = [o if not o.startswith("run_dir=") else f"run_dir={run_dir}" for o in ov]
    args = ["run", "--config", "configs/tiny.yaml", *ov]
    killed = run_cli(args, {"TOOLFORMER_FAULT": f"{stage}:1"})
    assert killed.returncode == -9, killed.stderr[-2000:]
    assert not (run_dir / stage / "manifest.json").exists()
    again = run_cli(args)
    assert again.returncode == 0, again.stderr[-2000:]
    assert (run_dir / "build" / "augmented.jsonl").read_bytes() == (ref_dir / "build" / "augmented.jsonl").read_bytes()
    state = json.loads((run_dir / "model" / "trainer_state.json").read_text())
    steps = [h["step"] for h in state["log_history"] if "loss" in h]
    assert steps == sorted(set(steps)) and steps[-1] == 6  # continued, no step twice
    if stage == "finetune":
        assert "resum" in again.stdout + again.stderr
    a, b = load_file(run_dir / "model" / "model.safetensors"), load_file(ref_dir / "model" / "model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@pytest.mark.parametrize("value,problem", [
    ("sample:1:SIGFOO", "unknown signal 'SIGFOO' (a name such as SIGKILL, SIGINT or SIGTERM, or its number)"),
    ("sample:abc", "'abc' is not a count of completed units of work (a whole number from 1)"),
    ("sample:0", "'0' is not a count of completed units of work"),
    ("smaple:1", "unknown stage 'smaple' (known: sample, execute,"),
    ("sample", "not <stage>:<n>[:<signal>[:<rank>]]"),
    ("sample:1:SIGKILL:first", "'first' is not a process rank (a whole number from 0)"),
])
def test_a_fault_that_could_never_fire_is_refused_before_any_work(value, problem, tmp_path, monkeypatch, capsys):
    from toolformer.cli.app import main

    monkeypatch.setenv("TOOLFORMER_FAULT", value)
    assert main(["sample", "--config", str(ROOT / "configs" / "tiny.yaml"), f"run_dir={tmp_path / 'run'}"]) == 2
    assert capsys.readouterr().err.startswith(f"toolformer: error: TOOLFORMER_FAULT={value!r}: {problem}")
    assert not (tmp_path / "run").exists()


def test_a_fault_names_its_stage_count_signal_and_rank(monkeypatch):
    from toolformer.rundir.sharding import fault_setting

    for value, expected in [("", None), ("filter:2", ("filter", 2, 9, None)), ("sample:1:9", ("sample", 1, 9, None)),
                            ("round-2:1:SIGINT:1", ("round-2", 1, 2, 1)),
                            ("finetune:3:SIGTERM", ("finetune", 3, 15, None))]:
        monkeypatch.setenv("TOOLFORMER_FAULT", value)
        assert fault_setting() == expected, value
