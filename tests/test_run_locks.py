"""One command per run folder (toolformer.rundir.guard): a folder another process holds refuses every other
command, even with --force, and touches nothing; of two runs started together one wins and the other says who
holds the folder; the processes of one launch share the lock."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import ROOT, shard_lines
from runs import quick_overrides, snapshot

from toolformer.cli.app import main
from toolformer.rundir.guard import LOCK, RunFolderError, claim

pytestmark = pytest.mark.slow  # every test here starts a Python process

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
            argv = [args[0], "--config", "configs/tiny.yaml", *args[1:], *quick_overrides(tiny_model_dir, run_dir)]
            assert main(argv) == 2
            assert time.perf_counter() - t0 < 5
            err = capsys.readouterr().err
            assert f"in use by process {holder.pid} (started {info['started']}" in err, err
        assert snapshot(run_dir) == before  # the refused commands touched nothing
    finally:
        holder.kill()
        holder.wait()
    # The kernel released the lock of the killed holder: the folder can be used again.
    assert main(["sample", "--config", "configs/tiny.yaml", *quick_overrides(tiny_model_dir, run_dir)]) == 0
    assert (run_dir / "sample" / "manifest.json").exists()


@pytest.mark.slow
def test_two_runs_started_together_leave_one_winner(tiny_model_dir, tmp_path, quick_run):
    run_dir = tmp_path / "run"
    args = ["run", "--config", "configs/tiny.yaml", *quick_overrides(tiny_model_dir, run_dir),
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
        assert shard_lines(run_dir, stage) == shard_lines(quick_run, stage), stage  # nothing mixed, nothing lost
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
