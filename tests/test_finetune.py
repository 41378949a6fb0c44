"""Stage finetune: trains on a saved data set, writes a model that reloads, resumes."""

import json

import pytest
import torch
from datasets import Dataset
from huggingface_hub import ModelCard
from runs import write_sums_with_calls
from transformers import AutoModelForCausalLM, AutoTokenizer

from toolformer.config.load import load_config
from toolformer.config.schema import PipelineConfig
from toolformer.lm.modelfolder import card_front_matter
from toolformer.stages.finetune import run_stage, split_dev


def config(tmp_path, tiny_model_dir, *overrides):
    path = tmp_path / "ft.yaml"
    path.write_text(
        f"run_dir: {tmp_path / 'run'}\n"
        f"model: {{path: {tiny_model_dir}}}\n"
        "finetune: {learning_rate: 0.003, batch_size: 4, micro_batch_size: 2, max_steps: 4, max_length: 32,\n"
        "           eval_every: 2, save_every: 2, dev_ratio: 0.25, log_every: 1}\n"
    )
    return load_config(PipelineConfig, path, list(overrides))


@pytest.mark.slow
def test_finetune_writes_a_reloadable_tuned_model(tmp_path, tiny_model_dir, capsys):
    write_sums_with_calls(tmp_path / "run")
    cfg = config(tmp_path, tiny_model_dir)
    manifest = run_stage(cfg).manifest
    out = tmp_path / "run" / "model"
    line = capsys.readouterr().out.strip().splitlines()[-1]
    assert line.startswith("finetune: 4 steps, dev perplexity ") and line.endswith(f"model in {out}")

    tuned = AutoModelForCausalLM.from_pretrained(out)
    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    assert any(not torch.equal(p, q) for p, q in zip(tuned.parameters(), base.parameters()))
    assert len(AutoTokenizer.from_pretrained(out)) == len(AutoTokenizer.from_pretrained(tiny_model_dir))
    c = manifest["counts"]
    assert (c["documents"], c["augmented"], c["dev_documents"], c["steps"]) == (24, 12, 6, 4)
    assert c["best_step"] in (2, 4) and c["best_dev_perplexity"] > 1
    card = (out / "README.md").read_text()
    assert "12 with calls" in card and "best at step" in card and "learning_rate: 0.003" in card
    meta = ModelCard(card).data.to_dict()  # the hub's parser of the YAML header
    assert meta == {"library_name": "transformers", "tags": ["toolformer", "tool-use", "text-generation"]}
    state = json.loads((out / "trainer_state.json").read_text())
    assert state["global_step"] == 4 and state["best_step"] == c["best_step"]

    # Unchanged config: skipped. More steps: continues from the step-4 checkpoint.
    again = run_stage(cfg)
    assert again.skipped and again.manifest["finished"] == manifest["finished"]
    more = run_stage(config(tmp_path, tiny_model_dir, "finetune.max_steps=6")).manifest
    assert more["counts"]["resumed_from"] == 4 and more["counts"]["steps"] == 6
    state = json.loads((out / "trainer_state.json").read_text())
    assert [h["step"] for h in state["log_history"] if "loss" in h] == [1, 2, 3, 4, 5, 6]


def test_tuned_weights_saved_in_the_asked_dtype(tmp_path, tiny_model_dir, repo_root, monkeypatch):
    from safetensors import safe_open

    monkeypatch.chdir(repo_root)  # the default tools' data: data/collection.jsonl, data/knowledge.jsonl
    write_sums_with_calls(tmp_path / "run")
    run_stage(config(tmp_path, tiny_model_dir, "finetune.save_dtype=bfloat16", "finetune.max_steps=2"))
    out = tmp_path / "run" / "model"
    # The folder records its tools; their small data is copied into it.
    spec = json.loads((out / "toolformer.json").read_text())
    assert spec["tools"]["enabled"] == ["Calculator", "Calendar", "WikiSearch", "QA"]
    assert spec["tools"]["settings"]["knowledge"] == "tools/knowledge.jsonl" and spec["base_model"] == tiny_model_dir
    assert (out / "tools" / "knowledge.jsonl").read_bytes() == (repo_root / "data" / "knowledge.jsonl").read_bytes()
    assert "## Tools" in (out / "README.md").read_text()
    assert json.loads((out / "config.json").read_text())["dtype"] == "bfloat16"
    with safe_open(str(out / "model.safetensors"), "pt") as f:
        names = list(f.keys())  # a safetensors file is not iterable
        assert {f.get_tensor(k).dtype for k in names} == {torch.bfloat16}
    tuned = AutoModelForCausalLM.from_pretrained(out)
    assert next(tuned.parameters()).dtype == torch.bfloat16
    with pytest.raises(ValueError, match="save_dtype: 'int8' is not one of"):
        config(tmp_path, tiny_model_dir, "finetune.save_dtype=int8")


def test_control_data_set_and_special_call_tokens(tmp_path, tiny_model_dir):
    """Any saved data set (e.g. plain documents for a control model), another
    output folder, and the special-token call style whose tokens are added."""
    texts = write_sums_with_calls(tmp_path / "run")
    plain = tmp_path / "plain"
    Dataset.from_dict({"text": [t.split(", ")[0] + "." for t in texts]}).save_to_disk(str(plain))
    cfg = config(tmp_path, tiny_model_dir, f"finetune.dataset={plain}", f"finetune.output_dir={tmp_path / 'control'}",
                 "calls.style=special", "finetune.dev_ratio=0")
    m = run_stage(cfg).manifest
    assert m["counts"]["augmented"] == 0 and m["counts"]["best_dev_perplexity"] is None
    tok = AutoTokenizer.from_pretrained(tmp_path / "control")
    assert tok.convert_tokens_to_ids("<API>") != tok.unk_token_id
    model = AutoModelForCausalLM.from_pretrained(tmp_path / "control")
    assert model.get_input_embeddings().weight.shape[0] == len(tok)


def test_bad_data_set(tmp_path, tiny_model_dir):
    Dataset.from_dict({"body": ["x"]}).save_to_disk(str(tmp_path / "nobody"))
    cfg = config(tmp_path, tiny_model_dir, f"finetune.dataset={tmp_path / 'nobody'}")
    with pytest.raises(ValueError, match="no 'text' column"):
        run_stage(cfg)
    cfg = config(tmp_path, tiny_model_dir)
    with pytest.raises(FileNotFoundError, match="build"):
        run_stage(cfg)


def test_model_card_names_only_hub_ids(tmp_path):
    """base_model and datasets name a hub repository or nothing: a local path is no metadata a reader can follow."""
    hub = ModelCard(card_front_matter("Qwen/Qwen2.5-0.5B", "allenai/c4") + "# card\n").data.to_dict()
    assert hub == {"library_name": "transformers", "tags": ["toolformer", "tool-use", "text-generation"],
                   "base_model": "Qwen/Qwen2.5-0.5B", "datasets": ["allenai/c4"]}
    (tmp_path / "model").mkdir()
    local = ModelCard(card_front_matter(str(tmp_path / "model"), "data/corpus.jsonl") + "# card\n").data.to_dict()
    assert "base_model" not in local and "datasets" not in local
    assert ModelCard(card_front_matter("runs/tiny-model") + "x").data.to_dict().get("base_model") is None


def test_split_dev():
    train, dev = split_dev(20, 0.1, seed=0)
    assert len(dev) == 2 and sorted(train + dev) == list(range(20))
    assert split_dev(20, 0.1, seed=0) == (train, dev)
    assert split_dev(3, 0.01, seed=0)[1] != [] and split_dev(5, 0.0, seed=0)[1] == []


@pytest.mark.slow
def test_report_to_tensorboard_writes_the_loss_and_dev_perplexity(tmp_path, tiny_model_dir):
    """``finetune.report_to: tensorboard``: the event file read back holds every logged step."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    write_sums_with_calls(tmp_path / "run")
    run_stage(config(tmp_path, tiny_model_dir, "finetune.report_to=tensorboard"))
    logs = tmp_path / "run" / "model" / "logs"
    folders = sorted({f.parent for f in logs.rglob("events.out.tfevents.*")})  # the run's, and its settings'
    events = next(a for a in (EventAccumulator(str(f)).Reload() for f in folders) if a.Tags()["scalars"])
    steps = {tag: [e.step for e in events.Scalars(tag)] for tag in events.Tags()["scalars"]}
    assert steps["train/loss"] == steps["train/learning_rate"] == steps["train/tokens_per_s"] == [1, 2, 3, 4]
    assert steps["dev/perplexity"] == [2, 4] and steps["train/grad_norm"] == [1, 2, 3, 4]
    state = json.loads((tmp_path / "run" / "model" / "trainer_state.json").read_text())
    losses = [h["loss"] for h in state["log_history"] if "loss" in h]
    assert [e.value for e in events.Scalars("train/loss")] == pytest.approx(losses, rel=1e-5)
    assert all(e.value > 0 for e in events.Scalars("train/tokens_per_s"))


def test_an_unknown_tracker_or_one_not_installed_is_one_line(tmp_path, tiny_model_dir, monkeypatch):
    with pytest.raises(ValueError, match="report_to: 'mlflow' is not one of none, tensorboard, wandb"):
        config(tmp_path, tiny_model_dir, "finetune.report_to=mlflow")
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "wandb" else real(name, *a))
    with pytest.raises(ValueError, match=r"report_to: wandb needs the package wandb.*toolformer\[track\]"):
        config(tmp_path, tiny_model_dir, "finetune.report_to=wandb")
