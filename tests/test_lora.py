"""finetune.method: lora (toolformer/lm/lora.py): adapters found from the model, trained, merged into a plain
model folder with the adapter beside it, resumed like full fine-tuning; bad settings are one line."""

import json

import pytest
import torch
from runs import write_build, write_sums_with_calls
from test_finetune import config as finetune_config
from transformers import AutoModelForCausalLM
from transformers.pytorch_utils import Conv1D

from toolformer.lm import lora
from toolformer.stages.finetune import run_stage


def config(tmp_path, tiny_model_dir, *overrides):
    """test_finetune's fine-tune config with LoRA of rank 4 and a larger learning rate (adapters start at 0)."""
    return finetune_config(tmp_path, tiny_model_dir, "finetune.method=lora", "finetune.lora_rank=4",
                           "finetune.learning_rate=0.01", *overrides)


def test_the_targets_are_found_from_the_model(tiny_model_dir, family):
    gpt2 = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    assert lora.find_targets(gpt2) == ["c_attn", "c_fc", "c_proj"]  # GPT-2's Conv1D layers; not lm_head
    assert any(isinstance(m, Conv1D) for m in gpt2.modules())
    fam, _tok, model = family
    targets = set(lora.find_targets(model))
    assert "lm_head" not in targets  # every family's linear layers, its output layer left out
    want = ({"query_key_value", "dense", "dense_h_to_4h", "dense_4h_to_h"} if fam.name == "gpt" else
            {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"})
    assert targets == want
    with pytest.raises(ValueError, match="finetune.lora_targets: qkv match no linear layer of the model"):
        lora.check_targets(gpt2, ["c_attn", "qkv"])


@pytest.mark.slow
def test_lora_trains_adapters_and_writes_a_plain_merged_model(tmp_path, tiny_model_dir, capsys):
    write_sums_with_calls(tmp_path / "run")
    manifest = run_stage(config(tmp_path, tiny_model_dir)).manifest
    out = tmp_path / "run" / "model"
    printed = capsys.readouterr().out
    assert "finetune: LoRA rank 4 on c_attn, c_fc, c_proj: " in printed
    tuned = AutoModelForCausalLM.from_pretrained(out)  # a plain folder: no adapter layers in it
    assert not any("lora" in k or "base_layer" in k for k in tuned.state_dict())
    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    tb, bb = tuned.state_dict(), base.state_dict()
    changed = {k for k in bb if not torch.allclose(tb[k], bb[k])}
    assert changed and all(k.split(".")[-2] in ("c_attn", "c_fc", "c_proj") for k in changed)  # frozen elsewhere
    adapter = json.loads((out / lora.ADAPTER / "adapter_config.json").read_text())
    assert adapter["r"] == 4 and sorted(adapter["target_modules"]) == ["c_attn", "c_fc", "c_proj"]
    spec = json.loads((out / "toolformer.json").read_text())
    assert spec["training"]["method"] == "lora" and spec["training"]["adapter"] == lora.ADAPTER
    more = run_stage(config(tmp_path, tiny_model_dir, "finetune.max_steps=6")).manifest
    assert manifest["counts"]["steps"] == 4 and more["counts"]["resumed_from"] == 4 and more["counts"]["steps"] == 6


@pytest.mark.slow
def test_lora_trains_the_rows_of_special_call_tokens(tmp_path, tiny_model_dir):
    from toolformer.lm.modeling import load_tokenizer
    from toolformer.tools.calls import get_style

    special = get_style("special")
    texts = [f"Vell had {a} boats and bought 3 more, {a} + 3 = {special.render('Calculator', f'{a} + 3', str(a + 3))} "
             f"{a + 3}." for a in range(10, 34)]
    write_build(tmp_path / "run", texts, doc_id=[str(i) for i in range(24)], augmented=[True] * 24, calls=["[]"] * 24)
    run_stage(config(tmp_path, tiny_model_dir, "calls.style=special"))
    out = tmp_path / "run" / "model"
    tok = load_tokenizer(str(out), get_style("special"))
    ids = lora.call_token_ids(tok, get_style("special"))
    emb = AutoModelForCausalLM.from_pretrained(out).get_input_embeddings().weight
    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir).get_input_embeddings().weight
    new = [i for i in ids if i >= base.shape[0]]  # "→" is in the tiny vocabulary already; its row is trained too
    assert len(ids) == 3 and len(new) == 2
    assert not torch.allclose(emb[new[0]], emb[new[1]])  # trained apart from their common start (the mean row)
    others = [i for i in range(base.shape[0]) if i not in ids]
    assert torch.equal(emb[others], base[others])  # every other row frozen


@pytest.mark.parametrize("override, message", [
    ("finetune.lora_rank=0", "lora_rank: must be at least 1"),
    ("finetune.method=adapters", "method: 'adapters' is not one of full, lora, qlora"),
    ("finetune.lora_dropout=1.0", r"lora_dropout: 1.0 is not in \[0, 1\)"),
])
def test_bad_lora_settings_are_one_line(tmp_path, tiny_model_dir, override, message):
    with pytest.raises(ValueError, match=message):
        config(tmp_path, tiny_model_dir, override)


def test_lora_without_peft_names_the_extra(tmp_path, tiny_model_dir, monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "peft" else real(name, *a))
    with pytest.raises(ValueError, match=r"method: lora needs the package peft.*toolformer\[lora\]"):
        config(tmp_path, tiny_model_dir)


def test_qlora_where_it_cannot_run_is_one_line_before_any_model_is_loaded(tmp_path, tiny_model_dir, monkeypatch):
    import toolformer.lm.modeling as modeling
    from toolformer.cli.app import main

    def no_load(*a, **k):
        raise AssertionError("a model was loaded")

    monkeypatch.setattr(modeling, "load_model", no_load)
    monkeypatch.setattr(modeling, "load_tokenizer", no_load)
    write_sums_with_calls(tmp_path / "run")
    cfg = config(tmp_path, tiny_model_dir, "finetune.method=qlora")
    why = lora.qlora_unavailable() or "method: qlora needs a CUDA GPU and this run trains on cpu"
    if torch.cuda.is_available() and not lora.qlora_unavailable():
        pytest.skip("QLoRA can run here (a CUDA GPU and bitsandbytes): test_qlora_on_a_gpu runs it")
    with pytest.raises(ValueError, match="^finetune.method: qlora ") as err:
        run_stage(cfg)
    assert str(err.value) == f"finetune.{why}" and "\n" not in why
    yaml = tmp_path / "ft.yaml"
    assert main(["finetune", "--config", str(yaml), "finetune.method=qlora"]) == 2  # the command: exit 2


def test_qlora_says_what_is_missing(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda n, *a: None if n == "bitsandbytes" else real(n, *a))
    assert "bitsandbytes, which is not installed here (pip install 'toolformer[qlora]'" in lora.qlora_unavailable()
    monkeypatch.setattr(importlib.util, "find_spec", lambda n, *a: object() if n == "bitsandbytes" else real(n, *a))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert lora.qlora_unavailable().startswith("method: qlora needs a CUDA GPU")
    q = lora.quantization_config()
    assert q.load_in_4bit and q.bnb_4bit_quant_type == "nf4" and q.bnb_4bit_compute_dtype == torch.bfloat16


def test_an_adapter_merged_into_the_base_read_again_is_the_merged_model(tiny_model_dir, tmp_path):
    """QLoRA's plain model (merge_into_base) is the LoRA model merged in place, here on a float32 base."""
    from toolformer.config.finetune import FinetuneConfig
    from toolformer.lm.modeling import load_model, load_tokenizer
    from toolformer.tools.calls import get_style

    torch.manual_seed(0)
    tok = load_tokenizer(str(tiny_model_dir), get_style("special"))
    model = lora.wrap(load_model(str(tiny_model_dir), torch.device("cpu"), torch.float32, tok),
                      FinetuneConfig(method="lora", lora_rank=4), tok, get_style("special"))
    with torch.no_grad():
        for p in model.parameters():
            if p.requires_grad:  # as if trained: adapters and call-token rows away from their start
                p.add_(0.05 * torch.randn_like(p))
    merged = lora.save_merged(model, tmp_path, True, tok)
    again = lora.merge_into_base(str(tiny_model_dir), tmp_path / lora.ADAPTER, tok)
    ids = torch.tensor([[1, 5, 9, *lora.call_token_ids(tok, get_style("special")), 7]])
    want, got = merged(input_ids=ids).logits, again(input_ids=ids).logits
    assert not torch.allclose(want, load_model(str(tiny_model_dir), torch.device("cpu"), torch.float32,
                                               tok)(input_ids=ids).logits, atol=1e-3)  # the adapter changed it
    assert torch.allclose(want, got, atol=1e-5)  # float32 sums in another order: a last-digit tolerance


@pytest.mark.slow
@pytest.mark.skipif(not torch.cuda.is_available() or bool(lora.qlora_unavailable()),
                    reason="QLoRA needs a CUDA GPU and bitsandbytes (the device check runs it)")
def test_qlora_on_a_gpu(tmp_path, tiny_model_dir):
    write_sums_with_calls(tmp_path / "run")
    run_stage(config(tmp_path, tiny_model_dir, "finetune.method=qlora", "model.device=cuda"))
    out = tmp_path / "run" / "model"
    tuned = AutoModelForCausalLM.from_pretrained(out)
    assert not any("lora" in k or "base_layer" in k or "quant" in k for k in tuned.state_dict())
    assert json.loads((out / "toolformer.json").read_text())["training"]["method"] == "qlora"
