"""A full disk while writing a shard, a checkpoint (torch.save, which does not say ENOSPC) or the model: exit
status 1 with one line naming the file, nothing partial left behind, and the same command resumes once there is
room."""

import errno
import os
from pathlib import Path

import pytest
from helpers import ROOT, shard_lines
from runs import FINETUNE, quick_overrides, write_plain_sums

from toolformer.cli.app import main


@pytest.mark.slow
def test_full_disk_while_writing_a_shard(tiny_model_dir, tmp_path, quick_run, capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    run_dir = tmp_path / "run"
    args = ["run", "--config", "configs/tiny.yaml", *quick_overrides(tiny_model_dir, run_dir), "stages=[sample]"]
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
    assert shard_lines(run_dir, "sample") == shard_lines(quick_run, "sample")


@pytest.mark.slow
def test_full_disk_while_saving_the_model(tiny_model_dir, tmp_path, capsys, monkeypatch):
    import safetensors
    import transformers.modeling_utils as mu

    monkeypatch.chdir(ROOT)
    run_dir = tmp_path / "run"
    write_plain_sums(run_dir)
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


def test_a_write_error_that_hides_its_cause_counts_as_a_full_disk_only_when_the_disk_is(tmp_path, monkeypatch):
    from toolformer.rundir import files

    hidden = RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 506432 vs 506320")
    monkeypatch.setattr(files, "free_bytes", lambda path: 4096)
    assert files.disk_full(hidden, tmp_path / "step-0000002") and not files.disk_full(hidden)
    assert not files.disk_full(ValueError("unexpected pos"), tmp_path)  # not a write error of a library
    monkeypatch.setattr(files, "free_bytes", lambda path: 10 << 30)
    assert not files.disk_full(hidden, tmp_path)  # room left: some other failure, reported as it is
    monkeypatch.undo()
    assert files.free_bytes(tmp_path / "not" / "made" / "yet") > 0  # the nearest folder that exists is asked


@pytest.mark.slow
def test_full_disk_inside_torch_save_of_a_checkpoint(tiny_model_dir, tmp_path, capsys, monkeypatch):
    """torch.save reports a full disk as RuntimeError("basic_ios::clear: iostream error" or "unexpected pos"),
    not ENOSPC: with the disk full it is the same one line, and the partial checkpoint is gone."""
    import torch

    from toolformer.rundir import files

    monkeypatch.chdir(ROOT)
    run_dir = tmp_path / "run"
    write_plain_sums(run_dir)
    real_save = torch.save

    def full(obj, f, *a, **k):
        Path(f).write_bytes(b"partial")
        raise RuntimeError("basic_ios::clear: iostream error")

    monkeypatch.setattr(torch, "save", full)
    monkeypatch.setattr(files, "free_bytes", lambda path: 0)
    args = ["finetune", f"run_dir={run_dir}", f"model.path={tiny_model_dir}", *FINETUNE]
    assert main(args) == 1
    err = capsys.readouterr().err
    checkpoint = run_dir / "model" / "checkpoints" / "step-0000002"
    assert "Traceback" not in err
    assert err.strip().splitlines()[-1].startswith(f"toolformer: no space left on device writing {checkpoint}")
    assert not checkpoint.exists()  # nothing partial a rerun could resume from
    monkeypatch.setattr(torch, "save", real_save)
    monkeypatch.setattr(files, "free_bytes", lambda path: 10 << 30)
    assert main(args) == 0
    assert (run_dir / "model" / "model.safetensors").exists()
