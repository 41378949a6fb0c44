"""A folder's files stay inside it. A model folder's own files (weights, config, tokenizer, toolformer.json) that
lead out of it, or are damaged, are refused with one line naming the file (exit 2); its tool data is read once,
through a descriptor checked after opening, so a file swapped for a link after loading is not read, and its
index is written only inside it. A run folder's manifest names only files inside its stage's folder, and a
file of records that is a symlink is refused whatever it leads to."""

import json
import os
import shutil
from pathlib import Path

import pytest
from helpers import ROOT

from toolformer.api import ToolformerModel
from toolformer.cli.app import main
from toolformer.config.load import load_config
from toolformer.config.schema import PipelineConfig
from toolformer.lm.folderfiles import FolderFileError, check_own_files
from toolformer.lm.foldertrust import FolderTrustError
from toolformer.lm.modelfolder import SPEC_FILE, write_spec
from toolformer.rundir.files import IntegrityError
from toolformer.rundir.folder import StageFolder

SECRET = {"subject": "Secret", "relation": "is", "object": "SECRET-7731", "title": "SECRET",
          "text": "SECRET-7731 outside the folder"}
QUESTION = "How long is the river Vell?"


def model_folder(tmp_path: Path, tiny_model_dir) -> Path:
    """A model folder as toolformer writes it: the tiny model, its tokenizer and toolformer.json, the data of
    QA and WikiSearch copied into tools/."""
    folder = tmp_path / "model"
    shutil.copytree(tiny_model_dir, folder)
    cfg = load_config(PipelineConfig, ROOT / "configs" / "tiny.yaml",
                      [f"run_dir={tmp_path / 'run'}", f"tools.knowledge={ROOT / 'data' / 'knowledge.jsonl'}",
                       f"tools.collection={ROOT / 'data' / 'collection.jsonl'}",
                       "tools.enabled=[Calculator, QA, WikiSearch]"])
    write_spec(cfg, folder, 50.0)
    return folder


def outside(tmp_path: Path) -> Path:
    """A folder beside the model folder with a file that must never be read through it."""
    secret = tmp_path / "private"
    secret.mkdir(exist_ok=True)
    (secret / "secret.jsonl").write_text(json.dumps(SECRET) + "\n")
    return secret


def one_line_error(capsys) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if line.startswith("toolformer: ")]
    assert len(lines) == 1, err
    return lines[0]


def generate(folder: Path, *args: str) -> int:
    return main(["generate", "--model", str(folder), "x", *args, "--set", "evaluate.max_new_tokens=2"])


@pytest.mark.parametrize("name", [SPEC_FILE, "model.safetensors", "config.json", "tokenizer.json",
                                  "tokenizer_config.json", "generation_config.json"])
def test_an_own_file_that_leads_out_is_refused(tmp_path, tiny_model_dir, capsys, name):
    folder = model_folder(tmp_path, tiny_model_dir)
    moved = outside(tmp_path) / name
    shutil.move(folder / name, moved)
    (folder / name).symlink_to(moved)
    with pytest.raises(FolderFileError, match=rf"{folder / name}: a symlink to {moved}, outside the model folder"):
        ToolformerModel.from_pretrained(folder)
    assert generate(folder) == 2
    assert str(folder / name) in one_line_error(capsys)


def test_a_link_inside_the_folder_or_into_the_hub_cache_is_its_own(tmp_path, tiny_model_dir, capsys):
    folder = model_folder(tmp_path, tiny_model_dir)
    shutil.move(folder / "config.json", folder / "config.real.json")
    (folder / "config.json").symlink_to("config.real.json")
    assert generate(folder) == 0
    snapshot = tmp_path / "hub" / "models--org--tiny" / "snapshots" / "abc123"
    blobs = snapshot.parent.parent / "blobs"
    blobs.mkdir(parents=True)
    snapshot.mkdir(parents=True)
    for i, f in enumerate(sorted(p for p in folder.iterdir() if p.is_file() and not p.is_symlink())):
        shutil.copy(f, blobs / f"blob{i}")
        (snapshot / f.name).symlink_to(Path("..", "..", "blobs", f"blob{i}"))
    check_own_files(snapshot)  # the hub cache's layout: every file a link into its repository's blobs


@pytest.mark.parametrize("damage", ["config", "no_weights", "cut_weights", "tokenizer_config", "deep_config",
                                    "deep_spec"])
def test_a_damaged_folder_is_one_line_naming_the_file(tmp_path, tiny_model_dir, capsys, damage):
    folder = model_folder(tmp_path, tiny_model_dir)
    weights = folder / "model.safetensors"
    name = {"config": "config.json", "no_weights": "", "cut_weights": "model.safetensors",
            "tokenizer_config": "tokenizer_config.json", "deep_config": "config.json", "deep_spec": SPEC_FILE}[damage]
    if damage == "config":
        (folder / name).write_text("{not json")
    elif damage == "no_weights":
        weights.unlink()
    elif damage == "cut_weights":
        weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    elif damage == "tokenizer_config":
        (folder / name).write_text("[1,2")
    else:  # valid JSON nested deeper than the parser goes
        (folder / name).write_text('{"format": 1, "x": ' + "[" * 200_000 + "]" * 200_000 + "}")
    assert generate(folder) == 2
    line = one_line_error(capsys)
    assert str(folder / name).rstrip("/") in line
    with pytest.raises(ValueError, match=str(folder)):
        ToolformerModel.from_pretrained(folder)


def test_a_data_path_too_long_to_look_up_is_one_line_naming_the_key(tmp_path, tiny_model_dir, capsys):
    folder = model_folder(tmp_path, tiny_model_dir)
    spec = json.loads((folder / SPEC_FILE).read_text())
    spec["tools"]["settings"]["collection"] = "a" * 5000
    (folder / SPEC_FILE).write_text(json.dumps(spec))
    assert generate(folder) == 2
    line = one_line_error(capsys)
    assert "tools.collection" in line and "(5,000 characters)" in line and len(line) < 400
    folder = model_folder(tmp_path / "2", tiny_model_dir)
    assert generate(folder, f"tools.collection={'b' * 5000}") == 2
    assert "tools.collection" in one_line_error(capsys)
    assert generate(tmp_path / ("m" * 5000)) == 2
    assert "model folder" in one_line_error(capsys)


def test_a_relative_data_path_is_the_folders_never_the_working_folders(tmp_path, tiny_model_dir, capsys,
                                                                        monkeypatch):
    folder = model_folder(tmp_path, tiny_model_dir)
    secret = outside(tmp_path) / "secret.jsonl"
    (folder / "tools" / "collection.jsonl").unlink()
    (folder / "tools" / "collection.jsonl").symlink_to(secret)
    cwd = tmp_path / "cwd"
    (cwd / "tools").mkdir(parents=True)
    (cwd / "tools" / "collection.jsonl").write_text('{"title": "DECOY", "text": "decoy"}\n')
    monkeypatch.chdir(cwd)
    assert generate(folder) == 2
    line = one_line_error(capsys)
    assert f"{folder / 'tools' / 'collection.jsonl'} is a symlink to {secret}" in line
    tf = ToolformerModel.from_pretrained(folder, trust_folder_tools=True)  # the user says so: the link's target
    assert tf.config.tools.collection == str(secret)
    data = tf.setup()["data"]["WikiSearch"]
    assert data["path"] == str(secret) and "copied" not in data["origin"] and "a symlink" in data["origin"]
    assert tf.sandbox.run("WikiSearch", "SECRET").result.startswith("SECRET")
    tf.close()


def test_data_swapped_for_a_link_after_loading_is_not_read(tmp_path, tiny_model_dir):
    folder = model_folder(tmp_path, tiny_model_dir)
    secret = outside(tmp_path) / "secret.jsonl"
    tf = ToolformerModel.from_pretrained(folder)  # checked here: regular files inside the folder
    (folder / "tools" / "collection.jsonl").unlink()
    (folder / "tools" / "collection.jsonl").symlink_to(secret)
    # The tools read their data once, when they are set up (checked then): a later swap is never read.
    res = tf.sandbox.run("WikiSearch", "SECRET")
    assert "SECRET-7731" not in json.dumps(res.as_dict())
    with pytest.raises(ValueError, match=rf"tools.collection: .* now leads to {secret}"):
        tf.save_pretrained(tmp_path / "saved")  # nor copied into another folder
    assert "SECRET-7731" not in "".join(p.read_text(errors="replace") for p in (tmp_path / "saved").rglob("*.jsonl"))
    # The folder holding the data swapped for a link to a folder outside with a file of the same name.
    tools = folder / "tools"
    shutil.move(tools, folder / "tools.old")
    shutil.copy(secret, tmp_path / "private" / "knowledge.jsonl")
    tools.symlink_to(tmp_path / "private", target_is_directory=True)
    res = tf.sandbox.run("QA", "Secret is?")
    assert "SECRET-7731" not in json.dumps(res.as_dict())
    tf.close()


def test_the_index_is_written_only_inside_the_folder(tmp_path, tiny_model_dir):
    folder = model_folder(tmp_path, tiny_model_dir)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    tf = ToolformerModel.from_pretrained(folder)
    index = folder / "tools" / "knowledge.jsonl.bm25"
    shutil.rmtree(index, ignore_errors=True)
    index.symlink_to(elsewhere, target_is_directory=True)
    os.utime(folder / "tools" / "knowledge.jsonl")  # a changed file: its index is rebuilt and saved
    assert tf.sandbox.run("QA", QUESTION).ok  # answered from an index kept in memory
    assert list(elsewhere.iterdir()) == []
    tf.close()
    index.unlink()
    tf = ToolformerModel.from_pretrained(folder)
    assert tf.sandbox.run("QA", QUESTION).ok
    assert (index / "stamp.txt").is_file() and not index.is_symlink()  # saved where it belongs
    tf.close()
    tf = ToolformerModel.from_pretrained(folder)
    assert tf.sandbox.run("QA", QUESTION).ok  # and read back from there
    tf.close()


def test_a_hard_link_is_not_the_folders_own_data(tmp_path, tiny_model_dir, capsys):
    """Decided: a data file with more than one name (a hard link) may be a file outside the folder under another
    name; it is refused like a symlink out, and read with --trust-folder-tools."""
    folder = model_folder(tmp_path, tiny_model_dir)
    secret = outside(tmp_path) / "secret.jsonl"
    data = folder / "tools" / "collection.jsonl"
    data.unlink()
    os.link(secret, data)
    with pytest.raises(FolderTrustError, match=r"tools.collection: .* a file with 2 names \(a hard link"):
        ToolformerModel.from_pretrained(folder)
    assert generate(folder) == 2 and "hard link" in one_line_error(capsys)
    tf = ToolformerModel.from_pretrained(folder, trust_folder_tools=True)
    assert tf.sandbox.run("WikiSearch", "SECRET").ok
    tf.close()
    data.unlink()  # swapped for a hard link after loading: not read
    shutil.copy(secret, data)
    tf = ToolformerModel.from_pretrained(folder)
    data.unlink()
    os.link(secret, data)
    assert tf.sandbox.run("WikiSearch", "SECRET").error["code"] == "bad_data"
    tf.close()


def finished_stage(run_dir: Path) -> StageFolder:
    stage = StageFolder(run_dir, "execute")
    stage.begin("hash")
    stage.write_shard(0, [{"doc_id": "d0", "tool": "Calculator"}])
    stage.finish("hash", 0, {})
    return stage


def test_a_manifest_names_only_files_inside_its_stage(tmp_path, monkeypatch):
    """Decided: a manifest entry with `..` or an absolute path is an IntegrityError naming the manifest, before
    any file is opened."""
    stage = finished_stage(tmp_path / "run")
    opened = []
    monkeypatch.setattr("toolformer.rundir.folder.file_digest", lambda p: opened.append(p) or {})
    for rel in ("../../private/shard-00000.jsonl", str(outside(tmp_path) / "secret.jsonl"), "notes.txt"):
        manifest = json.loads(stage.manifest_path.read_text())
        manifest["files"] = {rel: {"records": 1, "sha256": None}}
        stage.manifest_path.write_text(json.dumps(manifest))
        with pytest.raises(IntegrityError, match=rf"{stage.manifest_path}: lists {rel!r}, not a file of records"):
            stage.require()
    assert opened == []


def test_a_shard_that_is_a_symlink_is_refused(tmp_path, capsys):
    """Decided: a file of records that is a symlink is not a file the stage wrote, even to an identical copy."""
    stage = finished_stage(tmp_path / "run")
    shard = stage.shard_path(0)
    copy = tmp_path / "copy.jsonl"
    shutil.copy(shard, copy)
    shard.unlink()
    shard.symlink_to(copy)
    with pytest.raises(IntegrityError, match=rf"{shard}: a symlink \(to {copy}\), not a file the stage wrote"):
        stage.require()


def test_a_task_name_too_long_for_a_file_name_is_one_line(tmp_path, capsys):
    code = main(["tasks", "lmeval", str(ROOT / "tests" / "fixtures" / "eval" / "SVAMP.json"), "--name", "n" * 300,
                 "--out", str(tmp_path / "out")])
    assert code == 2 and "--name" in one_line_error(capsys)
    assert not (tmp_path / "out").exists() or list((tmp_path / "out").rglob("*")) == []
