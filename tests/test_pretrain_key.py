"""The base model's key (toolformer.smallworld.pretrain.pretrain_key): it hashes what pre-training reads and
nothing else, and the shipped demo base models (data/world-base-start, data/world-base) carry the key the demo
config gives today."""

import json

import pytest
from helpers import ROOT
from worlds import SMALL, TINY, small_cfg

from toolformer.smallworld.probe import probe_items
from toolformer.worlds.config import PretrainConfig

# The demo's base model comes in two phases: data/world-base-start from scratch on the corpus without the extra
# forms and half the cue documents, then data/world-base continued from it on the corpus with them (configs/demo.yaml,
# docs/small-world.md, "The base model").
START_OVERRIDES = ["world.extra_train_forms=false", "world.cuecall_share=0.15", "pretrain.init_from=",
                   "pretrain.max_steps=5000", "pretrain.learning_rate=3e-3", "pretrain.prefix_space=false",
                   "world.scene_forms=false"]


@pytest.mark.slow
@pytest.mark.parametrize("phase", ["start", "demo"])
def test_shipped_demo_base_model_matches_the_demo_config(phase, tmp_path, monkeypatch):
    """data/world-base is what `toolformer world pretrain --config configs/demo.yaml` records for today's code,
    format and config, and data/world-base-start what the same command with START_OVERRIDES records: same key,
    steps and weights hash."""
    from toolformer.rundir.folder import FORMAT
    from toolformer.smallworld.config import load_smallworld
    from toolformer.smallworld.generator import world_paths
    from toolformer.smallworld.pretrain import pretrain_key
    from toolformer.worlds.files import sha256_file

    monkeypatch.chdir(ROOT)  # the config's folders are relative to the repository
    cfg = load_smallworld(ROOT / "configs" / "demo.yaml",
                          [*(START_OVERRIDES if phase == "start" else []), f"run_dir={tmp_path}"])
    shipped = ROOT / (cfg.pretrain.shipped + ("-start" if phase == "start" else ""))
    record = json.loads((shipped / "pretrain.json").read_text())
    assert record["format"] == FORMAT
    assert record["key"] == pretrain_key(cfg), \
        f"the demo config or the world generator changed: retrain {shipped.name} (see docs/small-world.md)"
    assert record["steps"] == cfg.pretrain.max_steps
    assert record["model_sha256"] == sha256_file(shipped / "model.safetensors")
    if phase == "demo":
        assert record["init_from"]["model_sha256"] == sha256_file(ROOT / cfg.pretrain.init_from / "model.safetensors")
    assert record["pretrain_corpus_sha256"] == sha256_file(world_paths(cfg)["pretrain"])


def test_pretrain_key_follows_the_texts_not_the_settings_that_leave_them(tmp_path):
    """The base model's key hashes what pre-training reads: the two-step documents (after the corpus_docs others)
    and the evaluation sets leave it as it is; a setting that changes the pre-training text or the tokenizer's
    texts changes it; so does the format."""
    from unittest import mock

    from toolformer.smallworld.pretrain import pretrain_key

    def key(name: str, **world) -> str:
        cfg = small_cfg(tmp_path / name, **world)
        cfg.pretrain = PretrainConfig(**TINY)
        return pretrain_key(cfg)

    base = key("base")
    assert key("no-twostep", twostep_docs=0, eval_twostep=0, eval_math=5, eval_qa=4) == base
    assert key("cues", cuecall_share=0.2) != base  # the pre-training text
    assert key("corpus", corpus_docs=SMALL["corpus_docs"] - 1) != base  # the tokenizer's texts
    with mock.patch("toolformer.smallworld.pretrain.FORMAT", 99):
        assert key("base") != base


def test_tokenizer_and_probe_texts_leave_the_twostep_documents_out(tmp_path):
    """The tokenizer and the copy probe read the same texts with and without the two-step documents, so the
    base model does not depend on them (hence pretrain_key may leave them out)."""
    from toolformer.smallworld import generate_world
    from toolformer.smallworld.pretrain import tokenizer_texts

    with_two = generate_world(small_cfg(tmp_path / "a"))
    without = generate_world(small_cfg(tmp_path / "b", twostep_docs=0, eval_twostep=0))
    assert SMALL["twostep_docs"]
    assert with_two["corpus"].read_bytes() != without["corpus"].read_bytes()
    n = SMALL["corpus_docs"]
    assert tokenizer_texts(with_two, n) == tokenizer_texts(without, n) == tokenizer_texts(without)
    for tool in ("Calculator", "QA"):
        assert probe_items(with_two["corpus"], tool, 50, 0, n) == probe_items(without["corpus"], tool, 50, 0)
