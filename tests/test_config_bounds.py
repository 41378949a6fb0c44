"""Settings are checked when they are loaded: what cannot be a config file, YAML whose aliases expand without
bound or that gives a key twice, and numbers that mean nothing (NaN, infinity, a negative size, a zero timeout)
are refused with exit status 2 and a message naming the key and where its value came from."""

import json
import os
import resource
import shutil
import time
from pathlib import Path

import pytest
from helpers import ROOT, run_cli

from toolformer.cli.app import main
from toolformer.config.load import ConfigError, config_hash, dump_yaml, load_config, to_dict
from toolformer.config.safeyaml import MAX_NODES
from toolformer.config.schema import PipelineConfig
from toolformer.lm.modelfolder import SPEC_FILE, write_spec

# (dotted key, YAML value): each makes no sense as a setting.
BAD = [
    ("filter.tau_filter", ".nan"), ("filter.tau_filter", ".inf"), ("filter.tau_filter", "-.inf"),
    ("filter.tau_filter", "1e400"), ("filter.per_tool_tau.MT", ".nan"), ("filter.horizon", "0"),
    ("shard_size", "-1"), ("shard_size", "0"), ("seed", "-1"),
    ("tools.timeout_s", "0"), ("tools.timeout_s", ".nan"), ("tools.concurrency", "0"),
    ("tools.per_tool_concurrency.QA", "0"), ("tools.max_result_chars", "-5"),
    ("sample.tau_sample", ".nan"), ("sample.tau_sample", "1.5"), ("sample.top_k", "0"), ("sample.num_calls", "-2"),
    ("sample.per_tool.Calculator.tau_sample", ".inf"), ("sample.per_tool.Calculator.top_k", "0"),
    ("sample.batch_tokens", "0"), ("sample.temperature", "-1.0"),
    ("finetune.learning_rate", "0"), ("finetune.learning_rate", ".nan"), ("finetune.max_steps", "-1"),
    ("finetune.learning_rate", "1e308"), ("finetune.learning_rate", "1.5"), ("finetune.weight_decay", "1e308"),
    ("finetune.weight_decay", "-0.1"),
    ("finetune.warmup_ratio", "2.0"), ("finetune.micro_batch_size", "0"), ("finetune.log_every", "0"),
    ("finetune.tool_data_max_mb", ".inf"), ("build.plain_ratio", ".nan"),
    ("evaluate.top_k_trigger", "0"), ("evaluate.batch_size", "0"), ("evaluate.max_calls", "-1"),
    ("corpus.max_docs", "-3"), ("model.threads", "-1"), ("inspect.bins", "0"),
]
# The small world's sections (toolformer.smallworld.config), read by `toolformer demo` and `toolformer world ...`.
WORLD_BOUNDS = [
    ("world.pretrain_fact_share", ".nan"), ("world.corpus_docs", "0"), ("world.towns", "1"),
    ("pretrain.heads", "0"), ("pretrain.learning_rate", "-.inf"), ("pretrain.eval_every", "0"),
    ("pretrain.learning_rate", "1e308"), ("pretrain.weight_decay", "1e308"), ("pretrain.weight_decay", "10.5"),
    ("demo.max_calls_row", "-1"),
]


def names_key(err: str, key: str) -> bool:
    """``err`` names dotted ``key``: as `a.b.c:`, or as `a: b.c:` or `a.b: c:` (a section's check)."""
    parts = ["PipelineConfig", *key.split(".")] if "." not in key else key.split(".")
    return f" {key}:" in err or any(f"{'.'.join(parts[:i])}: {'.'.join(parts[i:])}:" in err
                                    for i in range(1, len(parts)))


def nested_yaml(key: str, value: str) -> str:
    """A YAML file setting dotted ``key`` to ``value``, one indented line per level, as a person writes it."""
    *sections, last = key.split(".")
    lines = [f"{'  ' * i}{p}:" for i, p in enumerate(sections)] + [f"{'  ' * len(sections)}{last}: {value}"]
    return "\n".join(lines) + "\n"


def run_config(tmp_path: Path, text: str = "") -> Path:
    """A config like configs/tiny.yaml writing into ``tmp_path``, with ``text`` after it (a section ``text`` sets
    replaces the one here: a key given twice is refused)."""
    path = tmp_path / "run.yaml"
    base = [f"run_dir: {tmp_path / 'run'}", "shard_size: 8", f"model: {{path: {tmp_path / 'model'}}}"]
    top = {line.split(":")[0] for line in text.splitlines() if line and not line.startswith(" ")}
    path.write_text("".join(f"{line}\n" for line in base if line.split(":")[0] not in top) + text)
    return path


def billion_laughs(levels: int = 9, width: int = 10) -> str:
    """The classic alias bomb: each level a list of `width` aliases of the level before (width ** levels lols)."""
    lines = [f"a0: &a0 [{', '.join(['lol'] * width)}]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * width)}]" for i in range(1, levels)]
    return "\n".join(lines) + "\n"


def limit_memory() -> None:
    """In the child: at most 4 GiB of address space, so that an unbounded expansion fails instead of swapping."""
    resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))


def test_a_folder_as_config_exits_2_naming_it(tmp_path, capsys):
    assert main(["run", "--config", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert f"{tmp_path}: is a folder, not a config file" in err and "Traceback" not in err


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads a file whatever its mode")
def test_an_unreadable_config_exits_2_naming_it(tmp_path, capsys):
    path = run_config(tmp_path)
    path.chmod(0)
    assert main(["run", "--config", str(path)]) == 2
    assert f"{path}: cannot read the config file" in capsys.readouterr().err


@pytest.mark.skipif(not Path("/dev/zero").exists(), reason="needs /dev/zero")
def test_an_endless_config_is_refused_after_a_bounded_read(capsys):
    assert main(["run", "--config", "/dev/zero"]) == 2
    assert "/dev/zero: refused: larger than 16,000,000 bytes" in capsys.readouterr().err


def test_invalid_utf8_config_names_the_file(tmp_path, capsys):
    path = tmp_path / "latin1.yaml"
    path.write_bytes("run_dir: runs/caf\u00e9\n".encode("latin-1"))
    assert main(["run", "--config", str(path)]) == 2
    err = capsys.readouterr().err
    assert f"{path}: not UTF-8 text (byte 17)" in err and "Traceback" not in err


@pytest.mark.slow
def test_alias_bomb_with_an_override_exits_2_fast_in_bounded_memory(tmp_path):
    bomb = tmp_path / "lol.yaml"
    bomb.write_text(f"run_dir: {tmp_path / 'run'}\n" + billion_laughs())
    start = time.monotonic()
    res = run_cli(["run", "--config", str(bomb), "seed=1"], timeout=120, preexec_fn=limit_memory)
    assert res.returncode == 2, res.stderr[-2000:]
    assert time.monotonic() - start < 10
    assert f"{bomb}: refused: more than {MAX_NODES:,} values with its aliases expanded" in res.stderr


def test_aliases_within_the_bound_still_load_and_are_copied_apart(tmp_path):
    path = run_config(tmp_path, "sample:\n  per_tool:\n    Calculator: &o {top_k: 4}\n    MT: *o\n")
    cfg = load_config(PipelineConfig, path, ["sample.per_tool.MT.top_k=7"])
    assert cfg.sample.per_tool["Calculator"].top_k == 4 and cfg.sample.per_tool["MT"].top_k == 7


@pytest.mark.parametrize("text, message", [
    ("a: &a [1, *a]\n", "refused: an alias refers to a value that contains it, line 1"),
    ("a: " + "[" * 3000 + "]" * 3000 + "\n", "refused: nested too deeply"),
    (billion_laughs(levels=6), "refused: more than 100,000 values"),
])
def test_self_containing_deep_and_large_documents_are_refused(tmp_path, capsys, text, message):
    path = tmp_path / "c.yaml"
    path.write_text(text)
    assert main(["run", "--config", str(path)]) == 2
    assert f"{path}: {message}" in capsys.readouterr().err


def test_a_key_given_twice_is_refused_naming_it_and_both_lines(tmp_path, capsys):
    path = run_config(tmp_path, "filter:\n  tau_filter: 0.5\n  horizon: 5\n  tau_filter: 1.0\n")
    assert main(["run", "--config", str(path)]) == 2
    assert capsys.readouterr().err.strip() == (f"toolformer: config error: {path}: refused: key 'tau_filter' given "
                                               "twice in one mapping (lines 5 and 7); keep the one meant")
    # One key in two mappings is no repeat, nor is a value a merge key (`<<`) brings in and the mapping sets.
    path = run_config(tmp_path, "sample:\n  per_tool:\n    Calculator: &o {top_k: 4}\n    MT:\n      <<: *o\n"
                                "      top_k: 2\nfilter: {horizon: 4}\n")
    cfg = load_config(PipelineConfig, path)
    assert cfg.sample.per_tool["Calculator"].top_k == 4 and cfg.sample.per_tool["MT"].top_k == 2


def test_an_alias_bomb_as_an_override_value_stays_text(tmp_path, capsys):
    bomb = "{" + billion_laughs().replace("\n", ", ").rstrip(", ") + "}"
    assert main(["run", "--config", str(run_config(tmp_path)), f"tools.per_tool_concurrency={bomb}"]) == 2
    assert "tools.per_tool_concurrency: expected a mapping" in capsys.readouterr().err


# (key, value, the commands that read it: one given the value as an override, one in its config file)
CASES = [(k, v, ["run"], ["run"]) for k, v in BAD] + [(k, v, ["world", "generate"], ["demo"]) for k, v in WORLD_BOUNDS]


@pytest.mark.parametrize("key, value, by_override, by_file", CASES, ids=[f"{c[0]}={c[1]}" for c in CASES])
def test_bad_value_exits_2_naming_key_and_source(tmp_path, capsys, key, value, by_override, by_file):
    config = run_config(tmp_path)
    assert main([*by_override, "--config", str(config), f"{key}={value}"]) == 2
    err = capsys.readouterr().err
    assert f"config error: override `{key}={value}`: " in err and names_key(err, key), err
    in_file = run_config(tmp_path, nested_yaml(key, value))
    assert main([*by_file, "--config", str(in_file)]) == 2
    err = capsys.readouterr().err
    assert f"config error: {in_file}: " in err and names_key(err, key), err
    assert not (tmp_path / "run").exists()


def test_override_blamed_over_the_file_and_file_over_defaults(tmp_path):
    path = run_config(tmp_path, "filter:\n  horizon: 0\n  tau_filter: 0.5\n")
    with pytest.raises(ConfigError, match=rf"^{path}: filter: horizon: must be at least 1, got 0$"):
        load_config(PipelineConfig, path)
    with pytest.raises(ConfigError, match=r"^override `filter.horizon=-2`: filter: horizon: must be at least 1"):
        load_config(PipelineConfig, path, ["filter.horizon=-2"])
    assert load_config(PipelineConfig, path, ["filter.horizon=3"]).filter.horizon == 3
    # a section's check that names no one key names every source of the section's values
    from toolformer.smallworld.config import load_smallworld

    with pytest.raises(ConfigError, match=rf"^{path}, override `world.earlier_share=0.8`: world: note_share \+"):
        load_smallworld(run_config(tmp_path, "world:\n  note_share: 0.5\n"), ["world.earlier_share=0.8"])


def test_base_values_are_blamed_on_base_source(tmp_path):
    record = str(tmp_path / "model" / SPEC_FILE)
    base = {"evaluate": {"top_k_trigger": 0, "max_calls": 1}, "tools": {"timeout_s": 5.0}}
    with pytest.raises(ConfigError, match=rf"^{record}: evaluate: top_k_trigger: must be at least 1, got 0$"):
        load_config(PipelineConfig, None, [], base=base, base_source=record)
    with pytest.raises(ConfigError, match=r"^<defaults>: evaluate: top_k_trigger"):
        load_config(PipelineConfig, None, [], base=base)
    # the file and the overrides over the base take the blame for what they set
    path = run_config(tmp_path, "evaluate:\n  top_k_trigger: 5\n")
    cfg = load_config(PipelineConfig, path, [], base=base, base_source=record)
    assert cfg.evaluate.top_k_trigger == 5 and cfg.evaluate.max_calls == 1
    with pytest.raises(ConfigError, match=r"^override `tools.timeout_s=.nan`: tools.timeout_s: must be a finite"):
        load_config(PipelineConfig, path, ["tools.timeout_s=.nan"], base=base, base_source=record)


@pytest.fixture
def model_folder(tmp_path, tiny_model_dir) -> Path:
    """The tiny model in a folder of its own with the toolformer.json that fine-tuning writes."""
    folder = tmp_path / "model"
    shutil.copytree(tiny_model_dir, folder)
    cfg = load_config(PipelineConfig, ROOT / "configs" / "tiny.yaml",
                      [f"run_dir={tmp_path / 'run'}", f"tools.collection={ROOT / 'data' / 'collection.jsonl'}",
                       f"tools.knowledge={ROOT / 'data' / 'knowledge.jsonl'}"])
    write_spec(cfg, folder, 0.0)
    return folder


def edit_record(folder: Path, section: str, key: str, value) -> Path:
    """Change one value of the folder's toolformer.json by hand (Python's json writes NaN for a float nan)."""
    path = folder / SPEC_FILE
    spec = json.loads(path.read_text())
    spec[section][key] = value
    path.write_text(json.dumps(spec))
    return path


def test_bad_decoding_value_in_a_model_folder_names_its_record(model_folder, capsys):
    record = edit_record(model_folder, "decoding", "top_k_trigger", -3)
    assert main(["generate", "--model", str(model_folder), "one", "--json"]) == 2
    err = capsys.readouterr().err
    assert f"{record}: evaluate: top_k_trigger: must be at least 1, got -3" in err, err


def test_nan_tool_setting_in_a_model_folder_names_its_record(model_folder, capsys):
    record = model_folder / SPEC_FILE
    spec = json.loads(record.read_text())
    spec["tools"].setdefault("settings", {})["timeout_s"] = float("nan")
    record.write_text(json.dumps(spec))
    assert "NaN" in record.read_text()
    assert main(["generate", "--model", str(model_folder), "one", "--json"]) == 2
    assert f"{record}: tools.timeout_s: must be a finite number, got nan" in capsys.readouterr().err


@pytest.mark.parametrize("path", sorted((ROOT / "configs").glob("*.yaml")), ids=lambda p: p.name)
def test_shipped_configs_load_and_write_json_without_nan(tmp_path, path):
    from toolformer.published.config import is_published_config, load_published

    # a world's config (a `published` section) holds a pipeline config: that is what the stages get
    cfg = load_published(path).pipeline if is_published_config(path) else load_config(PipelineConfig, path)
    json.dumps(to_dict(cfg), allow_nan=False)
    config_hash(cfg)
    again = tmp_path / "config.yaml"  # what a run folder records loads again to the same config
    again.write_text(dump_yaml(cfg))
    assert to_dict(load_config(PipelineConfig, again)) == to_dict(cfg)
