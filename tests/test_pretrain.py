import json
import math

import pytest
from test_world import SMALL, small_cfg

from toolformer.smallworld.config import PretrainConfig
from toolformer.smallworld.probe import QA_PROMPT, _wrong_result, copy_probe, first_number, probe_items

TINY = dict(vocab_size=700, hidden=16, layers=1, heads=2, positions=64, seq_len=32, batch_size=4, max_steps=3,
            eval_every=2, dev_docs=20, probe_items=6, threads=1, shipped="", init_from="", learning_rate=3e-3,
            digits_apart=False, prefix_space=False)


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

    from toolformer.smallworld.pretrain import check_tokenizer

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


def test_digits_apart_gives_a_number_the_same_tokens_in_text_and_call():
    """With ``digits_apart`` the first operand of a call (after ``(``) is the same tokens as the number in the
    text (after a space); by default the text's first digit carries the space and the call's does not."""
    from toolformer.lm.tokenizer import train_tokenizer
    from toolformer.smallworld.pretrain import WORLD_TOOLS, check_tokenizer

    texts = ["Rosa had 4723 cups. [Calculator(4723 + 8738) → 13461] 13461 cups in all, Rosa said.",
             *[f"[{name}(" for name in WORLD_TOOLS]] * 40
    text = " had 4723 cups [Calculator(4723 + 8738) → 13461] 13461"
    apart = train_tokenizer(texts, vocab_size=160, digits_apart=True)
    pieces = apart.tokenize(text)
    assert pieces[:7] == [" had", " ", "4", "7", "2", "3", " cups"], pieces
    call = pieces.index("(")
    assert pieces[call + 1 : call + 5] == ["4", "7", "2", "3"] and pieces[call + 5 : call + 7] == [" +", " "]
    assert " 4" not in apart.get_vocab()
    joined = train_tokenizer(texts, vocab_size=160).tokenize(text)
    assert joined[1] == " 4" and joined[joined.index("(") + 1] == "4"
    check_tokenizer(apart, digits_apart=True)
    with pytest.raises(ValueError, match="' 1' is 2 tokens"):
        check_tokenizer(apart)
    assert apart.tokenize(" 19") == [" ", "1", "9"]  # the space before a number is a token of its own
    assert apart.decode(apart(text, add_special_tokens=False)["input_ids"]) == text


def test_prefix_space_gives_a_prompts_first_number_the_tokens_it_has_after_a_space(tmp_path):
    """With ``prefix_space`` a text that opens with a number (or a word) is encoded as the same number later in a
    text: ``" "`` then its digits. The setting survives save and load, is applied once, keeps the required pieces
    whole, and the character offsets still place a call before the first number."""
    from transformers import AutoTokenizer

    from toolformer.lm.textpos import tokenize_text
    from toolformer.lm.tokenizer import has_prefix_space, set_prefix_space, train_tokenizer
    from toolformer.smallworld.pretrain import WORLD_TOOLS, check_tokenizer
    from toolformer.tools.calls import insert_calls

    texts = ["51 families had 4723 cups. [Calculator(4723 / 51) → 92.6] 93 cups each, Rosa said.",
             *[f"[{name}(" for name in WORLD_TOOLS]] * 40
    plain = train_tokenizer(texts, vocab_size=160, digits_apart=True)
    spaced = train_tokenizer(texts, vocab_size=160, digits_apart=True, prefix_space=True)
    assert plain.tokenize("51 families") == ["5", "1", " families"]
    assert spaced.tokenize("51 families") == [" ", "5", "1", " families"] == plain.tokenize(" 51 families")
    assert spaced.tokenize("Rosa said") == plain.tokenize(" Rosa said")
    assert not has_prefix_space(plain) and has_prefix_space(spaced)
    set_prefix_space(spaced)  # a second time changes nothing
    assert spaced.tokenize("5") == [" ", "5"]
    check_tokenizer(spaced, digits_apart=True)

    spaced.save_pretrained(tmp_path)
    loaded = AutoTokenizer.from_pretrained(tmp_path)
    assert has_prefix_space(loaded) and loaded.tokenize("51 families") == [" ", "5", "1", " families"]

    text = "51 families had 4723 cups."
    tt = tokenize_text(loaded, text)
    assert len(tt.ids) == len(loaded(text, add_special_tokens=False)["input_ids"])
    four = tt.ids.index(loaded.convert_tokens_to_ids("4"))
    assert text[tt.char_starts[four]:].startswith("4723")
    assert insert_calls(text, [(tt.char_starts[four], "[Calculator(51 * 2) → 102]")]) == \
        "51 families had [Calculator(51 * 2) → 102] 4723 cups."
    assert tt.char_starts[0] == tt.char_starts[1] == 0  # the added space and the first digit both start the text


@pytest.mark.parametrize("arch", ["gpt2", "llama"])
def test_build_model_shapes(pretrained, arch):
    from transformers import AutoTokenizer

    from toolformer.smallworld.pretrain import build_model

    _cfg, out = pretrained
    tok = AutoTokenizer.from_pretrained(out)
    model = build_model(tok, PretrainConfig(**{**TINY, "arch": arch}))
    assert model.config.hidden_size == 16 and model.config.num_hidden_layers == 1
    assert model.get_input_embeddings().weight.shape[0] == len(tok)


def test_rows_start_with_bos(pretrained):
    from transformers import AutoTokenizer

    from toolformer.smallworld.pretrain import pack_with_bos

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
    from toolformer.cli import main

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

    from toolformer.smallworld.pretrain import pretrain_base_model, pretrain_key, sha256_file

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
    from pathlib import Path

    from toolformer.run.folder import FORMAT
    from toolformer.smallworld.config import load_smallworld
    from toolformer.smallworld.generator import world_paths
    from toolformer.smallworld.pretrain import pretrain_key, sha256_file

    root = Path(__file__).resolve().parent.parent
    monkeypatch.chdir(root)  # the config's folders are relative to the repository
    cfg = load_smallworld(root / "configs" / "demo.yaml",
                          [*(START_OVERRIDES if phase == "start" else []), f"run_dir={tmp_path}"])
    shipped = root / (cfg.pretrain.shipped + ("-start" if phase == "start" else ""))
    record = json.loads((shipped / "pretrain.json").read_text())
    assert record["format"] == FORMAT
    assert record["key"] == pretrain_key(cfg), \
        f"the demo config or the world generator changed: retrain {shipped.name} (see docs/small-world.md)"
    assert record["steps"] == cfg.pretrain.max_steps
    assert record["model_sha256"] == sha256_file(shipped / "model.safetensors")
    if phase == "demo":
        assert record["init_from"]["model_sha256"] == sha256_file(root / cfg.pretrain.init_from / "model.safetensors")
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
