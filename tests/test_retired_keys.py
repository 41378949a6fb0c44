"""What 0.2.0 retired says so: a removed config key, a small-world section in a pipeline config, a moved command
and a run folder written in the older format each stop with exit status 2 and one line naming the key (or the
folder) and what to do instead, never a silent default or a silent mix of old and new results."""

import json
import shutil

import pytest
from helpers import ROOT

from toolformer.cli.app import main
from toolformer.config.load import ConfigError, load_config
from toolformer.config.schema import PipelineConfig
from toolformer.smallworld.config import load_smallworld

# Key -> a value it took in 0.1 configs (each at the value that changed nothing, as the shipped demo set it).
RETIRED = {"finetune.freeze": "[]", "finetune.call_input_weight": "1.0", "finetune.merge": "1.0",
           "filter.share_prefixes": "false", "filter.skip_blank": "false", "sample.word_starts": "false"}
RETIRED_WORLD = {"world.cue_number_first": "0.0", "world.noisy_docs": "0", "world.problem_docs": "0"}


def nested(key: str, value: str) -> str:
    section, name = key.split(".")
    return f"run_dir: runs/x\n{section}:\n  {name}: {value}\n"


@pytest.mark.parametrize("key", sorted(RETIRED))
def test_a_retired_pipeline_key_names_itself_and_what_to_do(tmp_path, capsys, key):
    path = tmp_path / "old.yaml"
    path.write_text(nested(key, RETIRED[key]))
    with pytest.raises(ConfigError, match=rf"^{path}: {key}: removed in 0\.2\.0: .*delete the key$"):
        load_config(PipelineConfig, path)
    with pytest.raises(ConfigError, match=rf"^override `{key}=.*`: {key}: removed in 0\.2\.0"):
        load_config(PipelineConfig, None, [f"{key}={RETIRED[key]}"])
    assert main(["run", "--config", str(path)]) == 2
    err = capsys.readouterr().err
    assert f"config error: {path}: {key}: removed in 0.2.0" in err and "Traceback" not in err
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("key", sorted(RETIRED_WORLD))
def test_a_retired_world_key_names_itself(tmp_path, key):
    path = tmp_path / "old.yaml"
    path.write_text(nested(key, RETIRED_WORLD[key]))
    with pytest.raises(ConfigError, match=rf"^{path}: {key}: removed in 0\.2\.0: .*delete the key$"):
        load_smallworld(path)


@pytest.mark.parametrize("section", ["world", "pretrain", "demo"])
def test_a_small_world_section_in_a_pipeline_config_names_the_commands_that_read_it(tmp_path, capsys, section):
    path = tmp_path / "with-world.yaml"
    path.write_text(f"run_dir: {tmp_path / 'run'}\n{section}:\n  seed: 1\n" if section == "world"
                    else f"run_dir: {tmp_path / 'run'}\n{section}: {{}}\n")
    for argv in (["run", "--config", str(path)], ["sample", "--config", str(path)]):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert f"{path}: {section}: a section of the small world's config" in err, err
        assert "toolformer demo" in err and "toolformer world generate|pretrain|probe" in err
    assert not (tmp_path / "run").exists()


def test_the_0_1_demo_config_is_refused_with_its_retired_key_named(tmp_path, capsys):
    """A copy of configs/demo.yaml as 0.1 shipped it (finetune.merge: 1.0 and world settings now the defaults)
    stops before any work, naming finetune.merge; without that key it loads as the shipped world."""
    old = (ROOT / "configs" / "demo.yaml").read_text().replace(
        "  save_every: 50\n", "  save_every: 50\n  merge: 1.0\n") + "world:\n  seed: 0\n  noise_share: 0.5\n"
    path = tmp_path / "demo-0.1.yaml"
    path.write_text(old)
    assert main(["demo", "--config", str(path), f"run_dir={tmp_path / 'run'}"]) == 2
    assert f"config error: {path}: finetune.merge: removed in 0.2.0" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()
    path.write_text(old.replace("  merge: 1.0\n", ""))
    assert load_smallworld(path).as_file() == load_smallworld(ROOT / "configs" / "demo.yaml").as_file()


@pytest.mark.parametrize("old, new", [("pretrain", "world pretrain"), ("probe", "world probe")])
def test_a_moved_command_names_its_new_name(capsys, old, new):
    assert main([old, "--config", "configs/demo.yaml"]) == 2
    assert f"`toolformer {old}` is now `toolformer {new}`" in capsys.readouterr().err


def test_a_stage_written_in_the_older_format_is_refused_until_force(tiny_model_dir, tmp_path, capsys):
    """A finished stage whose manifest has no format (every version before 0.2.0), or a stage interrupted under
    it, is an error naming the file and --force, for the stage itself and for the stage that reads it; --force
    makes it again in this format."""
    run_dir = tmp_path / "run"
    argv = ["--config", str(ROOT / "configs" / "tiny.yaml"), f"run_dir={run_dir}", f"model.path={tiny_model_dir}",
            "tools.enabled=[Calculator]", "sample.method={Calculator: rules}", "corpus.max_docs=6"]
    assert main(["sample", *argv]) == 0
    manifest = run_dir / "sample" / "manifest.json"
    record = json.loads(manifest.read_text())
    assert record["format"] == 2
    del record["format"]
    manifest.write_text(json.dumps(record))
    capsys.readouterr()
    for stage in ("sample", "execute"):
        assert main([stage, *argv]) == 2
        err = capsys.readouterr().err
        assert f"{manifest}: written by an older toolformer (format 1; this version reads format 2)" in err, err
        assert "--force" in err and "Traceback" not in err
    assert not (run_dir / "execute").exists()
    shutil.copytree(run_dir, tmp_path / "partial")  # an interrupted stage: its started.json, no manifest
    partial = tmp_path / "partial" / "sample"
    (partial / "manifest.json").unlink()
    (partial / "started.json").write_text(json.dumps({"config_hash": "x", "time": 0}))
    assert main(["sample", *argv[:2], f"run_dir={tmp_path / 'partial'}", *argv[3:]]) == 2
    assert f"{partial / 'started.json'}: written by an older toolformer" in capsys.readouterr().err
    assert main(["sample", "--force", *argv]) == 0
    assert json.loads(manifest.read_text())["format"] == 2
    assert main(["execute", *argv]) == 0
