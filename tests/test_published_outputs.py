"""The published world's output folders and records (toolformer.published): the world's folder and the base
model's are the project's own (marked, locked) or refused before anything in them is touched; a path that is a
file or a symlink is one line, exit 2; the records (``world.json``, the base model's ``pretrain.json``) are checked
before use, the weights against their sha256; a forced training stopped part-way resumes when rerun.

Small files written here stand in for the published ones (``fixture`` below), and the base models are tiny."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from worlds import write_published_math

from toolformer.cli.app import main
from toolformer.config.load import ConfigError
from toolformer.published import sources, world
from toolformer.published.config import load_published
from toolformer.rundir.files import IntegrityError

ROOT = Path(__file__).resolve().parents[1]
CONFIG = str(ROOT / "configs" / "published-scratch.yaml")  # the base model trained here
TINY = {"vocab_size": 300, "hidden": 32, "layers": 1, "heads": 2, "positions": 64, "seq_len": 32, "batch_size": 4,
        "max_steps": 4, "eval_every": 1, "dev_docs": 2, "shipped": "", "threads": 1}


def write_data(folder: Path) -> Path:
    """The least of the published layout the world reads: GSM8K, MAWPS, ASDiv and one T-REx relation."""
    for sub in ("math/gsm8k", "math/mawps", "lama/trex"):
        (folder / sub).mkdir(parents=True)
    problems = [{"question": f"Ann has {k + 40} pens and gives away {k}. How many are left?",
                 "answer": f"She keeps {k + 40}-{k} = <<{k + 40}-{k}=40>>40 pens.\n#### 40"} for k in range(12)]
    (folder / "math/gsm8k/train.jsonl").write_text("".join(json.dumps(p) + "\n" for p in problems[:10]))
    (folder / "math/gsm8k/test.jsonl").write_text("".join(json.dumps(p) + "\n" for p in problems[10:]))
    write_published_math(folder)
    towns = ["Paris", "Lyon", "Rome", "Oslo"]
    facts = [{"uuid": f"u{k}", "predicate_id": "P19", "sub_label": f"Person Number{k}", "obj_label": towns[k % 4],
              "evidences": [{"masked_sentence": f"Person Number{k} was born in [MASK] ."},
                            {"masked_sentence": f"Person Number{k} (born in [MASK]) wrote books ."}]}
             for k in range(40)]
    (folder / "lama/trex/P19.jsonl").write_text("".join(json.dumps(f) + "\n" for f in facts))
    return folder


@pytest.fixture
def fixture(tmp_path, monkeypatch) -> list[str]:
    """The overrides of a published config on the stand-in files, writing under ``tmp_path``."""
    monkeypatch.setattr(world, "check_data", sources.read_data)  # the stand-in files have other sha256
    data = write_data(tmp_path / "data")
    return [f"run_dir={tmp_path / 'run'}", f"published.data_dir={data}", "published.eval_lama=6",
            "pretrain.shipped=''", f"pretrain.output_dir={tmp_path / 'base'}"]


def cli(capsys, command: str, overrides: list[str], *extra: str) -> tuple[int, str]:
    """``toolformer published COMMAND`` in this process: its exit status and stderr."""
    code = main(["published", *command.split(), "--config", CONFIG, *overrides, *extra])
    return code, capsys.readouterr().err


def tiny_cfg(overrides: list[str], **pretrain):
    cfg = load_published(CONFIG, overrides)
    for key, value in {**TINY, **pretrain}.items():
        setattr(cfg.pretrain, key, value)
    return cfg


@pytest.mark.parametrize("command, key", [("build", "published.output_dir"), ("pretrain", "pretrain.output_dir")])
def test_a_users_folder_a_file_or_a_symlink_as_an_output_folder_is_refused_untouched(
        tmp_path, capsys, fixture, command, key):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "corpus.jsonl").write_text("my corpus\n")
    (mine / "config.json").write_text('{"mine": true}\n')
    afile = tmp_path / "afile"
    afile.write_text("precious\n")
    (tmp_path / "empty").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "empty")
    for path, says in ((mine, f"{key}: {mine} is not empty (config.json, corpus.jsonl) and toolformer did not "
                              "create it (no .toolformer-run in it)"),
                       (afile, f"{key}: {afile} is a file, not a folder"),
                       (tmp_path / "link", f"{key}: {tmp_path / 'link'} is a symlink (to {tmp_path / 'empty'})")):
        code, err = cli(capsys, command, fixture, f"{key}={path}", *(["--force"] if command == "pretrain" else []))
        assert code == 2 and err.count("\n") == 1 and says in err, err
    assert (mine / "corpus.jsonl").read_text() == "my corpus\n" and sorted(os.listdir(mine)) == [
        "config.json", "corpus.jsonl"]
    assert afile.read_text() == "precious\n" and not os.listdir(tmp_path / "empty")
    assert not (tmp_path / "run").exists()  # refused before the run folder was made


def test_a_new_world_folder_is_marked_and_the_command_runs_again(tmp_path, capsys, fixture):
    out = tmp_path / "worlds" / "w1"
    assert main(["published", "build", "--config", CONFIG, *fixture, f"published.output_dir={out}"]) == 0
    assert (out / ".toolformer-run").is_file() and (out / "world.json").is_file()
    assert main(["published", "build", "--config", CONFIG, *fixture, f"published.output_dir={out}"]) == 0
    assert f"world: already written ({out / 'world.json'}), kept" in capsys.readouterr().out


def test_a_second_command_on_a_held_base_folder_is_refused_naming_the_holder(tmp_path, capsys, fixture):
    from toolformer.rundir.guard import claim

    base = tmp_path / "base"
    with claim(base, "pretrain.output_dir"):  # a first `published pretrain --force`, still training
        code, err = cli(capsys, "pretrain", fixture, "--force")
        assert code == 2 and err.count("\n") == 1, err
        assert f"pretrain.output_dir: {base} is in use by process {os.getpid()}" in err
    assert sorted(os.listdir(base)) == [".toolformer-lock", ".toolformer-run"]  # nothing trained into it


def fake_base(folder: Path, key: str, steps: int) -> dict:
    """A finished base model's folder as far as its record goes: files, and the record listing their sha256."""
    from toolformer.worlds.files import sha256_file

    folder.mkdir(parents=True, exist_ok=True)
    (folder / ".toolformer-run").write_text("{}\n")
    for name, text in (("model.safetensors", "weights"), ("config.json", "{}"), ("tokenizer.json", "{}")):
        (folder / name).write_text(text)
    record = {"format": 2, "key": key, "steps": steps, "model_sha256": sha256_file(folder / "model.safetensors"),
              "files": {n: sha256_file(folder / n) for n in ("config.json", "tokenizer.json")}}
    (folder / "pretrain.json").write_text(json.dumps(record))
    return record


BROKEN = {  # a change to a finished base model's folder -> what the refusal says
    "weights": ("model.safetensors", "other weights", "model.safetensors: sha256 "),
    "config": ("config.json", '{"vocab_size": 5}', "config.json: sha256 "),
    "sha": ("pretrain.json", {"model_sha256": "0" * 64}, "is not the 000000000000… recorded in"),
    "format": ("pretrain.json", {"format": None}, "pretrain.json: written by another toolformer (format None"),
    "no format": ("pretrain.json", None, "pretrain.json: written by an older toolformer (format 1"),
    "garbled": ("pretrain.json", '{"format": 2, "key": ', "pretrain.json: unreadable (invalid JSON"),
    "list": ("pretrain.json", "[1, 2]", "pretrain.json: unreadable (not a JSON object)"),
    "folder": ("pretrain.json", "folder", "pretrain.json: not a file, so not a base model's record"),
}


@pytest.mark.parametrize("case", list(BROKEN))
def test_a_base_model_record_is_checked_before_the_model_is_used(tmp_path, monkeypatch, capsys, fixture, case):
    from toolformer.published import pretrain

    monkeypatch.setattr(pretrain, "pretrain_key", lambda cfg, root: "k1")
    base = tmp_path / "base"
    record = fake_base(base, "k1", TINY["max_steps"])
    assert main(["published", "pretrain", "--config", CONFIG, *fixture, f"pretrain.max_steps={TINY['max_steps']}"]) == 0
    assert "pretrain: already complete" in capsys.readouterr().out  # intact: used as it is
    name, change, says = BROKEN[case]
    if name == "pretrain.json" and not isinstance(change, str):  # an edited record
        (base / name).write_text(json.dumps({k: v for k, v in {**record, **(change or {})}.items()
                                             if change is not None or k != "format"}))
    elif change == "folder":
        (base / name).unlink()
        (base / name).mkdir()
    else:
        (base / name).write_text(change)
    before = {p.name: p.read_bytes() for p in base.iterdir() if p.is_file()}
    code, err = cli(capsys, "pretrain", fixture, f"pretrain.max_steps={TINY['max_steps']}")
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err, err
    assert says in err and str(base) in err and "--force" in err, err
    assert {p.name: p.read_bytes() for p in base.iterdir() if p.is_file()} == before  # nothing replaced


def test_the_shipped_base_model_is_checked_before_it_is_copied(tmp_path, monkeypatch, fixture):
    from toolformer.published import pretrain

    monkeypatch.setattr(pretrain, "pretrain_key", lambda cfg, root: "k1")
    shipped = tmp_path / "shipped"
    fake_base(shipped, "k1", TINY["max_steps"])
    cfg = tiny_cfg(fixture, shipped=str(shipped))
    (shipped / "model.safetensors").write_text("swapped")
    with pytest.raises(IntegrityError, match=r"shipped/model.safetensors: sha256 .*\(git checkout"):
        pretrain.pretrain_base_model(cfg)
    (shipped / "pretrain.json").write_text("[1]")
    with pytest.raises(IntegrityError, match=r"shipped/pretrain.json: unreadable \(not a JSON object\)"):
        pretrain.pretrain_base_model(cfg)
    assert not (tmp_path / "base").exists()  # nothing copied


@pytest.mark.parametrize("body, says", [('{"key": ', "unreadable (invalid JSON"),
                                        ("[1]", "unreadable (not a JSON object)"), (None, "not a file")])
def test_a_damaged_world_json_is_named_with_the_command_that_rebuilds_it(tmp_path, capsys, fixture, body, says):
    assert cli(capsys, "build", fixture) == (0, "")
    summary = tmp_path / "run" / "world" / "world.json"
    if body is None:
        summary.unlink()
        summary.mkdir()
    else:
        summary.write_text(body)
    code, err = cli(capsys, "build", fixture)
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err, err
    assert f"{summary}: {says}" in err and "toolformer published build --force" in err, err
    if body is not None:  # --force writes it again
        assert cli(capsys, "build", fixture, "--force") == (0, "")
        assert json.loads(summary.read_text())["format"] == world.FORMAT


@pytest.mark.slow
def test_a_forced_training_stopped_part_way_resumes_when_rerun(tmp_path, monkeypatch, fixture):
    """The record is written last and removed when training starts: a folder without one holds an unfinished
    training, which a rerun (with --force or without) continues from its last checkpoint; --force on a finished
    model trains from step 0."""
    from toolformer.lm.training import Trainer
    from toolformer.published.pretrain import pretrain_base_model

    cfg = tiny_cfg(fixture)
    base = pretrain_base_model(cfg)
    record = base / "pretrain.json"
    assert json.loads(record.read_text())["train"]["resumed_from"] == 0
    checkpoint = Trainer.checkpoint

    class Stop(Exception):
        pass

    def stop_after_step_2(self):
        checkpoint(self)
        if self.step == 2:
            raise Stop

    monkeypatch.setattr(Trainer, "checkpoint", stop_after_step_2)
    with pytest.raises(Stop):
        pretrain_base_model(cfg, force=True)
    assert not record.exists() and (base / "checkpoints" / "step-0000002").is_dir()
    monkeypatch.setattr(Trainer, "checkpoint", checkpoint)
    pretrain_base_model(cfg, force=True)  # the same command again
    done = json.loads(record.read_text())
    assert done["train"]["resumed_from"] == 2 and done["steps"] == TINY["max_steps"]
    pretrain_base_model(cfg, force=True)  # a finished model: trained again from step 0
    assert json.loads(record.read_text())["train"]["resumed_from"] == 0


def test_the_shipped_base_model_folder_is_the_projects_own_and_its_weights_check(tmp_path, monkeypatch):
    """data/published-base, the default pretrain.output_dir, carries the marker and its record checks out."""
    from toolformer.published.config import check_outputs
    from toolformer.worlds.basemodel import check_weights, read_record

    monkeypatch.chdir(ROOT)  # the config's paths are relative to the repository's root
    cfg = load_published(CONFIG, [f"run_dir={tmp_path / 'run'}"])
    assert cfg.output_folders() == [("pretrain.output_dir", Path("data/published-base"))]
    shipped = ROOT / "data" / "published-base"
    assert (shipped / ".toolformer-run").is_file()
    record = read_record(shipped / "pretrain.json", "")
    assert check_weights(shipped, record, shipped / "pretrain.json", "") == record["model_sha256"]
    check_outputs(cfg)


@pytest.mark.parametrize("key", ["pretrain.learning_rate", "pretrain.weight_decay"])
def test_the_published_pretrain_settings_are_bounded(key):
    with pytest.raises(ConfigError, match=rf"{key.split('.')[1]}: 1e\+308 is not between 0"):
        load_published(CONFIG, [f"{key}=1e308"])


def test_begin_training_keeps_an_interrupted_trainings_checkpoints(tmp_path):
    from toolformer.worlds.basemodel import begin_training

    def folder(record: bool) -> Path:
        out = tmp_path / f"m{len(os.listdir(tmp_path))}"
        (out / "checkpoints" / "step-0000002").mkdir(parents=True)
        if record:
            (out / "pretrain.json").write_text("{}")
        return out

    for force, record, kept in ((True, True, False), (True, False, True), (False, True, True), (False, False, True)):
        out = folder(record)
        begin_training(out, force)
        assert not (out / "pretrain.json").exists()
        assert (out / "checkpoints").exists() == kept, (force, record)


def test_pretrain_on_a_config_whose_base_model_is_pretrained_says_so(tmp_path, capsys):
    """configs/published.yaml annotates SmolLM2 (pretrain.weights): `published pretrain` has nothing to train and
    names the config of the model trained here."""
    code = main(["published", "pretrain", "--config", str(ROOT / "configs" / "published.yaml"),
                 f"run_dir={tmp_path / 'run'}"])
    err = capsys.readouterr().err
    assert code == 2 and "pretrained smollm2 (pretrain.weights), nothing to train" in err
    assert "configs/published-scratch.yaml" in err and not (tmp_path / "run").exists()
