"""finetune.merge: the saved model is base + alpha * (tuned - base), the trained weights kept beside it."""

import json
import shutil

import pytest
import torch
from test_finetune import config, write_sums
from transformers import AutoModelForCausalLM

from toolformer.lm import merge as merge_mod
from toolformer.lm.merge import MERGE_FILE, TUNED_DIR, merge_folder, weights_digest
from toolformer.stages.finetune import run_stage


def params(folder) -> dict[str, torch.Tensor]:
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    return {k: v.detach().clone() for k, v in model.named_parameters()}


def write_tuned(base_dir, out, seed: int):
    """A copy of the base model with every parameter moved: stands for a fine-tuned folder."""
    model = AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=g) * 0.1)
    model.save_pretrained(out)
    return params(out)


def assert_merge(folder, base: dict, tuned: dict, alpha: float):
    got = params(folder)
    assert got.keys() == tuned.keys()
    for k, v in got.items():
        torch.testing.assert_close(v, base[k] + alpha * (tuned[k] - base[k]), rtol=1e-5, atol=1e-6)


def test_merge_is_base_plus_alpha_times_the_change_and_reruns_from_the_trained_weights(tmp_path, tiny_model_dir):
    out = tmp_path / "model"
    tuned = write_tuned(tiny_model_dir, out, seed=1)
    base = params(tiny_model_dir)

    record = merge_folder(out, tiny_model_dir, 0.25)
    assert_merge(out, base, tuned, 0.25)
    assert record["alpha"] == 0.25 and record["base"] == tiny_model_dir
    assert json.loads((out / MERGE_FILE).read_text()) == record
    assert record["merged_sha256"] == weights_digest(out) and record["tuned_sha256"] == weights_digest(out / TUNED_DIR)
    for k, v in params(out / TUNED_DIR).items():
        assert torch.equal(v, tuned[k])

    # The same merge again writes nothing; another alpha starts from the trained weights, not the merged ones.
    digest = weights_digest(out)
    assert merge_folder(out, tiny_model_dir, 0.25) == record and weights_digest(out) == digest
    merge_folder(out, tiny_model_dir, 0.5)
    assert_merge(out, base, tuned, 0.5)
    merge_folder(out, tiny_model_dir, 0.0)
    assert_merge(out, base, tuned, 0.0)

    # Alpha 1 puts the trained weights back and removes the record and the copy.
    assert merge_folder(out, tiny_model_dir, 1.0) is None
    for k, v in params(out).items():
        assert torch.equal(v, tuned[k])
    assert not (out / MERGE_FILE).exists() and not (out / TUNED_DIR).exists()


def test_newly_trained_weights_become_the_tuned_ones(tmp_path, tiny_model_dir):
    out = tmp_path / "model"
    write_tuned(tiny_model_dir, out, seed=1)
    merge_folder(out, tiny_model_dir, 0.5)
    # Training again saves a new best model over the merged one (as the trainer does).
    retrained = write_tuned(tiny_model_dir, tmp_path / "again", seed=2)
    for f in merge_mod.weight_files(tmp_path / "again"):
        shutil.copy2(f, out / f.name)
    merge_folder(out, tiny_model_dir, 0.5)
    assert_merge(out, params(tiny_model_dir), retrained, 0.5)
    for k, v in params(out / TUNED_DIR).items():
        assert torch.equal(v, retrained[k])


def test_a_stop_between_the_record_and_the_weights_loses_nothing(tmp_path, tiny_model_dir, monkeypatch):
    out = tmp_path / "model"
    tuned = write_tuned(tiny_model_dir, out, seed=1)
    base = params(tiny_model_dir)
    merge_folder(out, tiny_model_dir, 0.5)

    real = merge_mod._replace_weights

    def stopped(src, dest):
        if dest == out:
            raise KeyboardInterrupt
        real(src, dest)

    monkeypatch.setattr(merge_mod, "_replace_weights", stopped)
    with pytest.raises(KeyboardInterrupt):
        merge_folder(out, tiny_model_dir, 0.25)  # the record says 0.25, the folder still holds the 0.5 merge
    monkeypatch.setattr(merge_mod, "_replace_weights", real)
    assert_merge(out, base, tuned, 0.5)

    merge_folder(out, tiny_model_dir, 0.25)
    assert_merge(out, base, tuned, 0.25)
    for k, v in params(out / TUNED_DIR).items():
        assert torch.equal(v, tuned[k])


def test_merge_errors_name_the_problem(tmp_path, tiny_model_dir):
    out = tmp_path / "model"
    write_tuned(tiny_model_dir, out, seed=1)
    with pytest.raises(ValueError, match=r"finetune.merge: 1.5 is not in \[0, 1\]"):
        merge_folder(out, tiny_model_dir, 1.5)
    other = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    other.resize_token_embeddings(other.get_input_embeddings().weight.shape[0] + 8)
    other.save_pretrained(tmp_path / "wider")
    with pytest.raises(ValueError, match=r"parameter .*wte.weight has shape"):
        merge_folder(out, str(tmp_path / "wider"), 0.5)
    assert not (out / MERGE_FILE).exists()  # nothing recorded for a merge that was not made

    merge_folder(out, tiny_model_dir, 0.5)
    shutil.rmtree(out / TUNED_DIR)
    with pytest.raises(FileNotFoundError, match="the trained weights are lost"):
        merge_folder(out, tiny_model_dir, 0.25)
    (out / MERGE_FILE).write_text("{")
    with pytest.raises(ValueError, match=f"{MERGE_FILE}: not valid JSON"):
        merge_folder(out, tiny_model_dir, 0.25)
    with pytest.raises(ValueError, match=r"merge: -0.1 is not in \[0, 1\]"):
        config(tmp_path, tiny_model_dir, "finetune.merge=-0.1")


@pytest.mark.slow
def test_finetune_stage_merges_and_a_new_alpha_needs_no_training(tmp_path, tiny_model_dir, capsys):
    write_sums(tmp_path / "run")
    out = tmp_path / "run" / "model"
    manifest = run_stage(config(tmp_path, tiny_model_dir, "finetune.merge=0.5")).manifest
    assert manifest["counts"]["merge"] == 0.5 and manifest["counts"]["steps"] == 4
    assert "saved base + 0.5 × (tuned − base)" in capsys.readouterr().out
    tuned, base = params(out / TUNED_DIR), params(tiny_model_dir)
    assert_merge(out, base, tuned, 0.5)
    assert "base + 0.5 × (tuned − base)" in (out / "README.md").read_text()

    again = run_stage(config(tmp_path, tiny_model_dir, "finetune.merge=1.0")).manifest
    assert again["counts"]["resumed_from"] == 4 and again["counts"]["steps"] == 4  # no step trained
    for k, v in params(out).items():
        assert torch.equal(v, tuned[k])
    assert not (out / TUNED_DIR).exists() and again["counts"]["merge"] == 1.0
