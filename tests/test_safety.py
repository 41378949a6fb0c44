"""A run never destroys what it did not make: locks, owned folders, corpus formats,
missing paths, clean stops (issue 13)."""

import errno
import gzip
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import jsonl, run_cli, shard_lines, write_build

from toolformer.cli.app import main
from toolformer.config.schema import CorpusConfig
from toolformer.corpus.reader import read_corpus
from toolformer.rundir.guard import LOCK, MARKER, RunFolderError, claim

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "data" / "corpus.jsonl"


def overrides(model_dir, run_dir, *more):
    """A quick pipeline: the Calculator's rule-based proposer, shards of 4 documents."""
    return [f"run_dir={run_dir}", f"model.path={model_dir}", f"corpus.path={CORPUS}", "shard_size=4",
            "tools.enabled=[Calculator]", "sample.method={Calculator: rules}", "filter.tau_filter=0.0", *more]


def snapshot(folder: Path) -> dict:
    """Every file's bytes and every folder, by relative path."""
    return {str(p.relative_to(folder)): p.read_bytes() if p.is_file() else None for p in sorted(folder.rglob("*"))}


HOLDER = """
import sys, time
from toolformer.rundir.guard import claim
with claim(sys.argv[1]):
    print("held", flush=True)
    time.sleep(120)
"""


def hold(folder: Path, env=None) -> subprocess.Popen:
    """Another process holding ``folder`` (as a running command does) until killed."""
    p = subprocess.Popen([sys.executable, "-c", HOLDER, str(folder)], stdout=subprocess.PIPE, text=True, cwd=ROOT,
                         env={**os.environ, **(env or {})})
    assert p.stdout.readline().strip() == "held"
    return p


@pytest.fixture(scope="module")
def reference(tiny_model_dir, tmp_path_factory):
    """An uninterrupted run of sample, execute, filter with the quick settings."""
    run_dir = tmp_path_factory.mktemp("reference") / "run"
    res = run_cli(["run", "--config", "configs/tiny.yaml", *overrides(tiny_model_dir, run_dir),
               "stages=[sample, execute, filter]"])
    assert res.returncode == 0, res.stderr[-2000:]
    return run_dir


# -- 1. one command per run folder -------------------------------------------------------

def test_a_held_run_folder_refuses_other_commands_even_with_force(tiny_model_dir, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    run_dir = tmp_path / "run"
    holder = hold(run_dir)
    try:
        before = snapshot(run_dir)
        info = json.loads((run_dir / LOCK).read_text())
        assert info["pid"] == holder.pid and info["started"]
        for args in (["run", "--force"], ["sample", "--force"], ["filter"]):
            t0 = time.perf_counter()
            assert main([args[0], "--config", "configs/tiny.yaml", *args[1:], *overrides(tiny_model_dir, run_dir)]) == 2
            assert time.perf_counter() - t0 < 5
            err = capsys.readouterr().err
            assert f"in use by process {holder.pid} (started {info['started']}" in err, err
        assert snapshot(run_dir) == before  # the refused commands touched nothing
    finally:
        holder.kill()
        holder.wait()
    # The kernel released the lock of the killed holder: the folder can be used again.
    assert main(["sample", "--config", "configs/tiny.yaml", *overrides(tiny_model_dir, run_dir)]) == 0
    assert (run_dir / "sample" / "manifest.json").exists()


@pytest.mark.slow
def test_two_runs_started_together_leave_one_winner(tiny_model_dir, tmp_path, reference):
    run_dir = tmp_path / "run"
    args = ["run", "--config", "configs/tiny.yaml", *overrides(tiny_model_dir, run_dir),
            "stages=[sample, execute, filter]"]
    procs = [subprocess.Popen([sys.executable, "-m", "toolformer.cli", *args], cwd=ROOT, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(2)]
    results = [(p, *p.communicate(timeout=300)) for p in procs]
    codes = sorted(p.returncode for p, _, _ in results)
    assert codes == [0, 2], [e[-1500:] for _, _, e in results]
    winner = next(p for p, _, _ in results if p.returncode == 0)
    loser_err = next(e for p, _, e in results if p.returncode == 2)
    assert f"in use by process {winner.pid}" in loser_err and "Traceback" not in loser_err
    for stage in ("sample", "execute", "filter"):
        assert shard_lines(run_dir, stage) == shard_lines(reference, stage), stage  # nothing mixed, nothing lost
    assert not list(run_dir.rglob("*.tmp-*"))


def test_processes_of_one_launch_share_the_lock(tmp_path, monkeypatch):
    launch = {"WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29411"}
    holder = hold(tmp_path / "run", {**launch, "RANK": "0"})
    try:
        for k, v in {**launch, "RANK": "1"}.items():
            monkeypatch.setenv(k, v)
        with claim(tmp_path / "run"):  # rank 1 of the same launch: joins the holder
            pass
        monkeypatch.setenv("MASTER_PORT", "29412")  # another launch's rank 1: refused
        with pytest.raises(RunFolderError, match=f"in use by process {holder.pid}"), claim(tmp_path / "run"):
            pass
    finally:
        holder.kill()
        holder.wait()


# -- 2. owned folders ------------------------------------------------------------------------

def test_a_user_folder_survives_every_command(tiny_model_dir, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    user = tmp_path / "mine"
    for rel, text in {"config.yaml": "my: config\n", "notes.txt": "do not delete\n",
                      "sample/shard-00000.jsonl": "my own shard\n", "sample/manifest.json": "{}",
                      "execute/keep.txt": "x", "filter/manifest.json": "{}", "build/dataset/data.arrow": "y",
                      "finetune/z.txt": "z", "evaluate/w.txt": "w", "model/config.json": "{}"}.items():
        (user / rel).parent.mkdir(parents=True, exist_ok=True)
        (user / rel).write_text(text)
    before = snapshot(user)
    ov = overrides(tiny_model_dir, user)
    fresh = [o if not o.startswith("run_dir=") else f"run_dir={tmp_path / 'fresh'}" for o in ov]
    commands = [["run", *ov], ["run", "--force", *ov],
                *([s, *ov] for s in ("sample", "execute", "filter", "chain", "build", "finetune", "evaluate")),
                ["world", "generate", f"run_dir={user}"],
                ["world", "pretrain", f"run_dir={user}"], ["demo", "--config", "configs/demo.yaml", f"run_dir={user}"],
                ["inspect", str(user)], ["tiny-model", "--out", str(user)],
                ["finetune", *fresh, f"finetune.output_dir={user}"],
                ["evaluate", *fresh, f"evaluate.output_dir={user}"]]
    for args in commands:
        if args[0] not in ("world", "demo", "inspect", "tiny-model"):
            args = [args[0], "--config", "configs/tiny.yaml", *args[1:]]
        assert main(args) == 2, args
        err = capsys.readouterr().err
        assert "Traceback" not in err
        if args[0] not in ("inspect", "tiny-model"):
            assert "not empty" in err and f"touch {user}" in err, (args, err)  # the fix is in the message
        assert snapshot(user) == before, args


def test_new_and_empty_folders_are_marked_and_used(tiny_model_dir, tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    (tmp_path / "empty").mkdir()
    for run_dir in (tmp_path / "new" / "run", tmp_path / "empty"):
        assert main(["sample", "--config", "configs/tiny.yaml", *overrides(tiny_model_dir, run_dir)]) == 0
        assert (run_dir / MARKER).exists() and (run_dir / "sample" / "manifest.json").exists()
        assert (run_dir / LOCK).read_text() == ""  # released: no holder recorded


def test_force_deletes_only_the_stages_own_files(tmp_path):
    from toolformer.rundir.folder import StageFolder

    stage = StageFolder(tmp_path / "run", "sample")
    stage.begin("a")
    stage.write_shard(0, [{"x": 1}])
    stage.write_rejected([{"r": 1}])
    stage.finish("a", 0, {})
    (stage.dir / "my-notes.txt").write_text("mine")
    (stage.dir / "keep").mkdir()
    assert stage.begin("a", force=True) == 0
    assert sorted(p.name for p in stage.dir.iterdir()) == ["keep", "my-notes.txt", "started.json"]
    stage.write_shard(0, [{"x": 2}])
    assert stage.begin("b") == 0  # another config: the same, never the whole folder
    assert (stage.dir / "my-notes.txt").read_text() == "mine" and not stage.shards()


def test_finetune_output_over_the_base_model_is_refused(tiny_model_dir, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    before = snapshot(Path(tiny_model_dir))
    for out in (tiny_model_dir, f"{tiny_model_dir}/tuned"):
        args = ["finetune", "--config", "configs/tiny.yaml", *overrides(tiny_model_dir, tmp_path / "run"),
                f"finetune.output_dir={out}"]
        assert main(args) == 2
        err = capsys.readouterr().err
        assert "finetune.output_dir" in err and "model.path" in err and "overwrite" in err, err
    assert snapshot(Path(tiny_model_dir)) == before
    assert not (tmp_path / "run").exists()  # refused before the run folder was made
    from toolformer.config.load import load_config
    from toolformer.config.schema import PipelineConfig
    from toolformer.stages.finetune import run_stage

    cfg = load_config(PipelineConfig, None, [f"run_dir={tmp_path / 'run'}", f"model.path={tmp_path / 'run' / 'model'}"])
    (tmp_path / "run" / "model").mkdir(parents=True)
    with pytest.raises(RunFolderError, match="same folder as model.path"):
        run_stage(cfg)  # the default output folder RUN_DIR/model is the base model here


# -- 3. corpus formats -----------------------------------------------------------------------

ROWS = [{"id": "a1", "text": "She paid 18 + 12 = 30 dollars.", "date": "2021-03-04"},
        {"id": "a2", "text": "Lake Orun has 4 islands.", "date": None}]


def _docs(path, **cfg):
    return [(d["doc_id"], d["text"], d["date"]) for d in read_corpus(CorpusConfig(path=str(path), **cfg)).documents]


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
        read_corpus(CorpusConfig(path=str(tmp_path / "c.jsonl.zst")))


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
            read_corpus(CorpusConfig(path=str(tmp_path / name)))
    with pytest.raises(ValueError, match="gzip-compressed"):
        read_corpus(CorpusConfig(path=str(tmp_path / "c.txt"), format="text"))
    for name in ("c.jsonl.bz2", "c.xml", "c.txt.gz"):
        (tmp_path / name).write_bytes(b"x")
        with pytest.raises(ValueError, match=r"supported: \.jsonl, \.jsonl\.gz, \.jsonl\.zst, \.json, \.parquet"):
            read_corpus(CorpusConfig(path=str(tmp_path / name)))


# -- 4. paths that do not exist ------------------------------------------------------------------

def test_looks_local():
    from toolformer.rundir.inputs import looks_local

    assert all(looks_local(p) for p in ("./m", "/m", "~/m", "runs/none", "data/none", "a/b/c", "corpus.jsonl"))
    assert not any(looks_local(p) for p in ("gpt2", "EleutherAI/pythia-1.4b", "someorg/somemodel"))


@pytest.mark.parametrize("override, message", [
    ("model.path=runs/no-such-model", "model.path: model folder runs/no-such-model does not exist"),
    ("corpus.path=runs/no-such-corpus.jsonl", "corpus.path: path runs/no-such-corpus.jsonl does not exist"),
    ("model.tokenizer=./no-tokenizer", "model.tokenizer: model folder ./no-tokenizer does not exist"),
])
def test_missing_local_paths_fail_at_once(override, message, tiny_model_dir, tmp_path):
    t0 = time.perf_counter()
    res = run_cli(["sample", "--config", "configs/tiny.yaml", *overrides(tiny_model_dir, tmp_path / "run"), override])
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
    args = ["sample", "--config", "configs/tiny.yaml", *overrides(tiny_model_dir, tmp_path / "run"),
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


# -- 5. clean stops ---------------------------------------------------------------------------

@pytest.mark.slow
def test_sigint_stops_at_a_shard_boundary_and_resumes(tiny_model_dir, tmp_path, reference):
    run_dir = tmp_path / "run"
    args = ["run", "--config", "configs/tiny.yaml", *overrides(tiny_model_dir, run_dir),
            "stages=[sample, execute, filter]"]
    stopped = run_cli(args, {"TOOLFORMER_FAULT": "sample:2:SIGINT"})
    assert stopped.returncode == 130, stopped.stderr[-2000:]
    last = stopped.stderr.strip().splitlines()[-1]
    assert last.startswith("toolformer: stopped by SIGINT; kept 2 shard(s) of sample in ")
    assert "rerun the same command" in last
    assert "Traceback" not in stopped.stderr
    assert len(list((run_dir / "sample").glob("shard-*.jsonl"))) == 2
    again = run_cli(args)
    assert again.returncode == 0, again.stderr[-2000:]
    assert "resuming after 2 complete shard(s)" in again.stdout
    for stage in ("sample", "execute", "filter"):
        assert shard_lines(run_dir, stage) == shard_lines(reference, stage), stage


def write_sums(run_dir: Path, n: int = 16) -> None:
    """A build stage of ``n`` sums written out, no calls."""
    write_build(run_dir, [f"Vell had {10 + i} boats and bought {i} more, {10 + i} + {i} = {10 + 2 * i}."
                          for i in range(n)])


FINETUNE = ["finetune.batch_size=4", "finetune.micro_batch_size=2", "finetune.max_steps=4", "finetune.max_length=32",
            "finetune.eval_every=2", "finetune.save_every=2", "finetune.dev_ratio=0.25", "finetune.learning_rate=0.003"]


@pytest.mark.slow
def test_sigterm_stops_finetune_at_a_checkpoint(tiny_model_dir, tmp_path):
    run_dir = tmp_path / "run"
    write_sums(run_dir)
    args = ["finetune", f"run_dir={run_dir}", f"model.path={tiny_model_dir}", *FINETUNE]
    stopped = run_cli(args, {"TOOLFORMER_FAULT": "finetune:1:SIGTERM"})
    assert stopped.returncode == 143, stopped.stderr[-2000:]
    last = stopped.stderr.strip().splitlines()[-1]
    assert "stopped by SIGTERM; kept the checkpoint of step 2 in" in last and "Traceback" not in stopped.stderr
    again = run_cli(args)
    assert again.returncode == 0, again.stderr[-2000:]
    assert "resuming from" in again.stdout + again.stderr and "(step 2)" in again.stdout + again.stderr


@pytest.mark.slow
def test_full_disk_while_writing_a_shard(tiny_model_dir, tmp_path, reference, capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    run_dir = tmp_path / "run"
    args = ["run", "--config", "configs/tiny.yaml", *overrides(tiny_model_dir, run_dir), "stages=[sample]"]
    real_replace = os.replace

    def full(src, dst, *a, **k):
        if str(dst).endswith("shard-00001.jsonl"):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_replace(src, dst, *a, **k)

    monkeypatch.setattr(os, "replace", full)
    assert main(args) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith(f"toolformer: no space left on device writing {run_dir / 'sample' / 'shard-00001.jsonl'}")
    assert not list(run_dir.rglob("*.tmp-*")) and len(list((run_dir / "sample").glob("shard-*"))) == 1
    monkeypatch.setattr(os, "replace", real_replace)
    assert main(args) == 0
    assert "resuming after 1 complete shard(s)" in capsys.readouterr().out
    assert shard_lines(run_dir, "sample") == shard_lines(reference, "sample")


@pytest.mark.slow
def test_full_disk_while_saving_the_model(tiny_model_dir, tmp_path, capsys, monkeypatch):
    import safetensors
    import transformers.modeling_utils as mu

    monkeypatch.chdir(ROOT)
    run_dir = tmp_path / "run"
    write_sums(run_dir)
    real_save = mu.safe_save_file

    def full(tensors, filename, *a, **k):  # a full disk half way through the model's file
        Path(filename).write_bytes(b"partial")
        raise safetensors.SafetensorError('Error while serializing: IoError(Os { code: 28, kind: StorageFull, '
                                          'message: "No space left on device" })')

    monkeypatch.setattr(mu, "safe_save_file", full)
    # No dev set: the model is saved once, after the last step (its checkpoint is written before).
    args = ["finetune", f"run_dir={run_dir}", f"model.path={tiny_model_dir}", *FINETUNE, "finetune.dev_ratio=0"]
    assert main(args) == 1
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith(f"toolformer: no space left on device writing {run_dir / 'model'}"), err
    model = run_dir / "model"
    assert not (model / "model.safetensors").exists() and not (model / ".model-tmp").exists()  # nothing partial
    monkeypatch.setattr(mu, "safe_save_file", real_save)
    assert main(args) == 0
    assert "resuming from" in capsys.readouterr().out and (model / "model.safetensors").exists()
    from transformers import AutoModelForCausalLM

    AutoModelForCausalLM.from_pretrained(model)


def test_tool_inputs_that_start_with_a_dash(capsys):
    assert main(["tool", "Calculator", "-(-(-1))"]) == 0
    assert capsys.readouterr().out.strip() == "-1"
    for args in (["tool", "Calculator", "--", "-(-(-1))", "--json"], ["tool", "--json", "Calculator", "-(-(-1))"],
                 ["tool", "Calculator", "-(-(-1))", "--json"]):
        assert main(args) == 0, args
        assert json.loads(capsys.readouterr().out) == {"tool": "Calculator", "input": "-(-(-1))", "result": "-1",
                                                       "error": None}


def test_calendar_says_invalid_date(capsys):
    assert main(["tool", "Calendar", "", "--date", "2023-02-30", "--json"]) == 1
    error = json.loads(capsys.readouterr().out)["error"]
    assert error["code"] == "bad_date" and "invalid date" in error["message"] and "YYYY" not in error["message"]
    assert main(["tool", "Calendar", "", "--date", "30.02.2023"]) == 1
    assert "is not YYYY-MM-DD" in capsys.readouterr().err


def test_generate_reports_a_cut_prompt(tiny_model_dir, capsys):
    long = " ".join(f"word{i}" for i in range(1200))
    assert main(["generate", "--model", tiny_model_dir, "--json", "--max-new-tokens", "2", "--disabled", long,
                 "short"]) == 0
    out = capsys.readouterr()
    cut, whole = [json.loads(x) for x in out.out.splitlines()]
    assert cut["prompt_tokens_cut"] > 0 and whole["prompt_tokens_cut"] == 0
    assert f"generate: prompt 1: its first {cut['prompt_tokens_cut']} token(s) were cut" in out.err
    assert "prompt 2" not in out.err
