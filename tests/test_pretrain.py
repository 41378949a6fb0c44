"""The small world's base model (toolformer.smallworld.pretrain): one trained with TINY settings on the SMALL
world, once for the module, loads with its record and probe; its tokenizer keeps the markers, digits and tool names
whole; rows start with BOS; the probes (copy and call items, ``toolformer world probe``); a shipped base model
copied when it matches, continued with ``init_from``, refused when an older format. (Its tokenizer's settings:
test_pretrain_tokenizer.py; its key and the shipped demo base models: test_pretrain_key.py.)"""

import json
import math

import pytest
from worlds import SMALL, TINY, small_cfg

from toolformer.smallworld.probe import QA_PROMPT, _wrong_result, copy_probe, first_number, probe_items
from toolformer.worlds.config import PretrainConfig


@pytest.fixture(scope="module")
def pretrained(tmp_path_factory):
    from toolformer.smallworld.pretrain import pretrain_base_model

    cfg = small_cfg(tmp_path_factory.mktemp("pre"))
    cfg.pretrain = PretrainConfig(**TINY)
    return cfg, pretrain_base_model(cfg)


def test_pretrain_writes_a_loadable_model_and_its_record(pretrained, capsys):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from toolformer.smallworld.pretrain import pretrain_base_model

    cfg, out = pretrained
    model = AutoModelForCausalLM.from_pretrained(out)
    tok = AutoTokenizer.from_pretrained(out)
    assert model.config.hidden_size == 16 and model.config.max_position_embeddings == 64 and len(tok) <= 700
    record = json.loads((out / "pretrain.json").read_text())
    assert record["steps"] == 3 and record["parameters"] == sum(p.numel() for p in model.parameters())
    assert record["train"]["best_dev_perplexity"] > 1 and len(record["model_sha256"]) == 64
    assert (out / "pipeline_config.yaml").read_text().startswith("# The config")
    probe = json.loads((out / "probe.json").read_text())
    for tool in ("Calculator", "QA"):
        assert probe[tool]["items"] > 0
        assert all(math.isfinite(probe[tool][k]) for k in ("loss_none", "loss_correct", "loss_wrong"))
    for name in ("seen", "unseen"):
        assert 0.0 <= probe[f"math_{name}"]["accuracy"] <= 1.0
    assert set(probe["call"]) == {"math_seen", "math_unseen", "qa_seen", "qa_unseen"}
    for name, r in probe["call"].items():
        assert r["items"] > 0, name
        assert math.isfinite(r["loss_right"]) and math.isfinite(r["loss_wrong"])
        assert 0.0 <= r["greedy_exact"] <= r["greedy_ok"] <= 1.0  # an exact argument is always usable
        forms = r["by_form"].values()  # each math item counted under its form; QA items have none
        assert sum(c["items"] for c in forms) == (r["items"] if name.startswith("math") else 0), name
        assert sum(c["usable"] for c in forms) == (round(r["greedy_ok"] * r["items"]) if forms else 0), name
    # The same config again: nothing to do.
    assert pretrain_base_model(cfg) == out
    assert "already complete" in capsys.readouterr().out


def test_weakest_forms_lists_the_forms_with_unusable_calls_lowest_share_first():
    from toolformer.smallworld.probe import weakest_forms

    by_form = {"add-sum": {"items": 10, "usable": 10}, "mul-price": {"items": 14, "usable": 0},
               "div-trips": {"items": 20, "usable": 15}, "sub-stock": {"items": 4, "usable": 1}}
    assert weakest_forms(by_form) == "mul-price 0/14, sub-stock 1/4, div-trips 15/20"
    assert weakest_forms(by_form, limit=1) == "mul-price 0/14"
    assert weakest_forms({"add-sum": {"items": 3, "usable": 3}}) == ""


def test_tokenizer_keeps_markers_digits_and_tool_names_whole(pretrained):
    from transformers import AutoTokenizer

    from toolformer.worlds.basemodel import check_tokenizer

    _cfg, out = pretrained
    tok = AutoTokenizer.from_pretrained(out)
    check_tokenizer(tok)
    pieces = [tok.decode([i]) for i in tok("The mill sold 1245 [Calculator(1245 + 2318) → 3563] 3563",
                                           add_special_tokens=False)["input_ids"]]
    want = [" 1", "2", "4", "5", " [", "Calculator"]
    assert any(pieces[k : k + len(want)] == want for k in range(len(pieces))), pieces
    with pytest.raises(ValueError, match="not one"):
        from toolformer.lm.tokenizer import train_tokenizer

        check_tokenizer(train_tokenizer(["plain words only"], vocab_size=120))


@pytest.mark.parametrize("arch", ["gpt2", "llama"])
def test_build_model_shapes(pretrained, arch):
    from transformers import AutoTokenizer

    from toolformer.worlds.basemodel import build_model

    _cfg, out = pretrained
    tok = AutoTokenizer.from_pretrained(out)
    model = build_model(tok, PretrainConfig(**{**TINY, "arch": arch}))
    assert model.config.hidden_size == 16 and model.config.num_hidden_layers == 1
    assert model.get_input_embeddings().weight.shape[0] == len(tok)


def test_rows_start_with_bos(pretrained):
    from transformers import AutoTokenizer

    from toolformer.worlds.basemodel import pack_with_bos

    _cfg, out = pretrained
    tok = AutoTokenizer.from_pretrained(out)
    doc = "The mill sold 12 sacks."
    n = len(tok(doc, add_special_tokens=False)["input_ids"])
    rows = pack_with_bos(tok, [doc] * 20, 16, "whole")  # (N, 16)
    assert rows.shape[1] == 16 and bool((rows[:, 0] == tok.bos_token_id).all())
    assert int((rows == tok.bos_token_id).sum()) == 20  # one per document: no document is split across rows
    long_doc = " ".join([doc] * 8)  # longer than a row: split, starting a fresh row
    rows = pack_with_bos(tok, [doc, long_doc], 16, "whole")
    assert bool((rows[:, 0] == tok.bos_token_id).any()) and int((rows == tok.bos_token_id).sum()) == 2
    # stream: no padding inside, every row starts with BOS, every document is preceded by one
    rows = pack_with_bos(tok, [doc] * 20, 16)
    assert bool((rows[:, 0] == tok.bos_token_id).all())
    body = rows[:, 1:].reshape(-1)
    real = body[body >= 0]
    assert len(real) == 20 * (n + 1) and int((real == tok.bos_token_id).sum()) == 20
    assert bool((body[: len(real)] >= 0).all())  # padding only at the very end


def test_copy_probe_items_and_losses(pretrained):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    cfg, out = pretrained
    corpus = out.parent / "world" / "corpus.jsonl"
    items = probe_items(corpus, "Calculator", 5, seed=0)
    assert len(items) == 5 and all(it["wrong"] != it["result"] and len(it["wrong"]) == len(it["result"])
                                   for it in items)
    model, tok = AutoModelForCausalLM.from_pretrained(out).eval(), AutoTokenizer.from_pretrained(out)
    r = copy_probe(model, tok, items)
    assert r["items"] == 5 and r["loss_none"] > 0 and 0.0 <= r["helps_0.5"] <= 1.0
    # A different prefix changes the loss at the answer: the prefix really is put before the text.
    assert r["loss_correct"] != pytest.approx(r["loss_none"], abs=1e-6)


def test_wrong_result_and_first_number():
    import random

    rng = random.Random(0)
    for value in ("615", "1040", "12"):
        wrong = _wrong_result(rng, "Calculator", value, [])
        assert wrong != value and len(wrong) == len(value)
    assert _wrong_result(rng, "QA", "Oster", ["Oster", "Vell"]) == "Vell"
    assert first_number(" 3,563 sacks, not 12") == 3563.0 and first_number(" none") is None
    assert QA_PROMPT.format(question="Who?") == "Question: Who? Answer:"


def test_call_items_corrupt_the_argument_the_tool_needs(pretrained):
    """Right and corrupted call arguments: one digit altered (or − / ÷ operands
    swapped) for arithmetic, another entity for QA; unseen prompts use held-out forms."""
    import random

    from toolformer.smallworld.generator import world_paths
    from toolformer.smallworld.probe import _altered, call_items
    from toolformer.tools.calculator import calculate

    rng = random.Random(0)
    for n in ("7", "1000", "4567"):
        for _ in range(20):
            a = _altered(rng, n)
            assert len(a) == len(n) and sum(x != y for x, y in zip(a, n)) == 1 and a[0] != "0"
    cfg, _out = pretrained
    items = call_items(world_paths(cfg), 50)
    assert set(items) == {"math_seen", "math_unseen", "qa_seen", "qa_unseen"}
    for name, its in items.items():
        assert its, name
        for it in its:
            assert it["wrong"] != it["argument"] and it["prompt"].endswith(("The answer is", "Answer:"))
            if it["tool"] == "Calculator":
                assert calculate(it["argument"]) == it["answer"] != calculate(it["wrong"])
            else:
                assert it["subject"] in it["argument"] and it["subject"] not in it["wrong"]


def test_cli_probe_on_the_base_model(pretrained, capsys):
    from toolformer.cli.app import main

    cfg, out = pretrained
    overrides = [f"world.{k}={str(v).lower()}" for k, v in SMALL.items()] + ["pretrain.probe_items=4"]
    assert main(["world", "probe", f"run_dir={cfg.run_dir}", *overrides]) == 0
    text = capsys.readouterr().out
    assert "probe Calculator:" in text and "probe math_unseen:" in text and "call probe qa_unseen:" in text
    assert main(["world", "probe", "--model", str(out / "missing"), f"run_dir={cfg.run_dir}"]) == 2
    assert "does not exist" in capsys.readouterr().err
    assert main(["probe", "--model", str(out)]) == 2  # the command of earlier versions names its new name
    assert "`toolformer probe` is now `toolformer world probe`" in capsys.readouterr().err


def test_shipped_base_model_is_copied_when_it_matches(pretrained, tmp_path, capsys):
    """A folder ``toolformer pretrain`` made is used instead of training when
    its record matches the config; another config trains; damaged weights are
    an error naming the file."""
    import dataclasses
    import filecmp
    import shutil

    from toolformer.smallworld.pretrain import pretrain_base_model

    cfg, out = pretrained
    shipped = tmp_path / "shipped"
    shutil.copytree(out, shipped, ignore=shutil.ignore_patterns("checkpoints"))
    use = dataclasses.replace(cfg, pretrain=dataclasses.replace(cfg.pretrain, shipped=str(shipped),
                                                                output_dir=str(tmp_path / "copy")))
    assert pretrain_base_model(use) == tmp_path / "copy"
    assert "using the shipped base model" in capsys.readouterr().out
    for name in ("model.safetensors", "tokenizer.json", "pretrain.json"):
        assert filecmp.cmp(shipped / name, tmp_path / "copy" / name, shallow=False)
    assert not (tmp_path / "copy" / "checkpoints").exists()  # copied, not trained

    other = dataclasses.replace(use, pretrain=dataclasses.replace(use.pretrain, learning_rate=1e-3,
                                                                  output_dir=str(tmp_path / "other")))
    pretrain_base_model(other)
    assert "trained with another config" in capsys.readouterr().out
    assert (tmp_path / "other" / "checkpoints").exists()  # trained

    (shipped / "model.safetensors").write_bytes(b"damaged")
    again = dataclasses.replace(use, pretrain=dataclasses.replace(use.pretrain, output_dir=str(tmp_path / "c2")))
    with pytest.raises(ValueError, match="model.safetensors: sha256"):
        pretrain_base_model(again)


def test_init_from_continues_a_base_model_with_its_tokenizer(pretrained, tmp_path):
    """pretrain.init_from: the steps start from the given model and keep its tokenizer (no new one is trained);
    the record names the start's weights; a folder without a model, or a shape other than the config's, is an
    error naming the key."""
    import dataclasses
    import shutil

    from safetensors.torch import load_file

    from toolformer.smallworld.pretrain import pretrain_base_model, pretrain_key
    from toolformer.worlds.files import sha256_file

    cfg, out = pretrained
    more = dataclasses.replace(cfg, pretrain=dataclasses.replace(cfg.pretrain, init_from=str(out), max_steps=2,
                                                                 output_dir=str(tmp_path / "more")))
    done = pretrain_base_model(more)
    assert (done / "tokenizer.json").read_text() == (out / "tokenizer.json").read_text()
    record = json.loads((done / "pretrain.json").read_text())
    assert record["init_from"] == {"path": str(out), "model_sha256": sha256_file(out / "model.safetensors")}
    assert record["steps"] == 2 and record["key"] != json.loads((out / "pretrain.json").read_text())["key"]
    start, end = load_file(out / "model.safetensors"), load_file(done / "model.safetensors")
    assert start.keys() == end.keys() and any(not (start[k] == end[k]).all() for k in start)  # trained further
    # The start counts by its weights: the same model in another folder gives the same key, another model another.
    shutil.copytree(out, tmp_path / "moved")
    moved = dataclasses.replace(more, pretrain=dataclasses.replace(more.pretrain, init_from=str(tmp_path / "moved")))
    assert pretrain_key(moved) == record["key"]
    assert pretrain_key(dataclasses.replace(more, pretrain=dataclasses.replace(more.pretrain, init_from=str(done)))) \
        != record["key"]

    # pretrain.prefix_space adds the prefix space to the start's tokenizer (same vocabulary) and counts in the key.
    spaced = dataclasses.replace(more, pretrain=dataclasses.replace(more.pretrain, prefix_space=True, max_steps=1,
                                                                    output_dir=str(tmp_path / "spaced")))
    from transformers import AutoTokenizer

    from toolformer.lm.tokenizer import has_prefix_space

    done_spaced = pretrain_base_model(spaced)
    tok = AutoTokenizer.from_pretrained(done_spaced)
    assert has_prefix_space(tok) and tok.get_vocab() == AutoTokenizer.from_pretrained(out).get_vocab()
    unspaced = dataclasses.replace(spaced, pretrain=dataclasses.replace(spaced.pretrain, prefix_space=False))
    assert pretrain_key(spaced) != pretrain_key(unspaced) == pretrain_key(dataclasses.replace(
        unspaced, pretrain=dataclasses.replace(unspaced.pretrain, output_dir=more.pretrain.output_dir)))

    empty = dataclasses.replace(more, pretrain=dataclasses.replace(more.pretrain, init_from=str(tmp_path / "none"),
                                                                   output_dir=str(tmp_path / "x")))
    with pytest.raises(FileNotFoundError, match="pretrain.init_from"):
        pretrain_base_model(empty)
    wider = dataclasses.replace(more, pretrain=dataclasses.replace(more.pretrain, layers=2,
                                                                   output_dir=str(tmp_path / "y")))
    with pytest.raises(ValueError, match="pretrain.layers: 2, but the model of pretrain.init_from"):
        pretrain_base_model(wider)


def test_a_base_model_of_an_older_format_is_refused(pretrained, tmp_path, capsys):
    """A base model whose record an older toolformer wrote (no format) is an error naming the folder and --force,
    in the run folder and as pretrain.shipped; --force trains it again."""
    import dataclasses
    import shutil

    from toolformer.smallworld.pretrain import pretrain_base_model

    cfg, out = pretrained
    old = tmp_path / "old"
    shutil.copytree(out, old, ignore=shutil.ignore_patterns("checkpoints"))
    record = json.loads((old / "pretrain.json").read_text())
    del record["format"]
    (old / "pretrain.json").write_text(json.dumps(record))
    here = dataclasses.replace(cfg, pretrain=dataclasses.replace(cfg.pretrain, output_dir=str(old)))
    with pytest.raises(ValueError, match=r"old/pretrain.json: written by an older toolformer .*--force"):
        pretrain_base_model(here)
    shipped = dataclasses.replace(cfg, pretrain=dataclasses.replace(cfg.pretrain, shipped=str(old),
                                                                    output_dir=str(tmp_path / "copy")))
    with pytest.raises(ValueError, match=r"old/pretrain.json: written by an older toolformer .*pretrain.shipped"):
        pretrain_base_model(shipped)
    assert pretrain_base_model(here, force=True) == old
    assert json.loads((old / "pretrain.json").read_text())["format"] == 2
