"""A run never destroys what it did not make: a folder with someone else's files survives every command, a new or
empty folder is marked as the run's, --force deletes only a stage's own files, and finetune never writes over the
base model."""

from pathlib import Path

import pytest
from helpers import ROOT
from runs import quick_overrides, snapshot

from toolformer.cli.app import main
from toolformer.rundir.guard import LOCK, MARKER, RunFolderError


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
    ov = quick_overrides(tiny_model_dir, user)
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
        assert main(["sample", "--config", "configs/tiny.yaml", *quick_overrides(tiny_model_dir, run_dir)]) == 0
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
        args = ["finetune", "--config", "configs/tiny.yaml", *quick_overrides(tiny_model_dir, tmp_path / "run"),
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
