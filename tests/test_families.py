"""Real tokenizers (Llama-3, Qwen, cl100k) and tiny models of their architectures (tests/families.py): the
filter's losses against the reference at positions 0, 1 and last, batched and alone; the document start and end
of every family; the call markers in both styles; packed rows; the call tokens' rows; a tuned folder saved and
reloaded; the trl-sft export and the lm-eval model on each family."""

import pytest
import torch
from families import FAMILIES, check_tokenizer
from reference import reference_loss

from toolformer.config.schema import PipelineConfig
from toolformer.lm.modeling import check_markers, document_end, document_start
from toolformer.lm.rows import IGNORE_INDEX, pack_sequences
from toolformer.lm.scoring import LossRequest, LossScorer
from toolformer.stages.filter import CandidateScorer
from toolformer.tools.calls import get_style

DOCS = {"a": "Out of 1400 participants, 400 passed the test.",
        "b": "The meeting is on Monday, May 1, 2024, at the town hall of Aldermoor, by the river.",
        "c": "7 + 8 = 15"}


def test_tokenizers_give_the_packages_ids(family):
    fam, tok, _model = family
    check_tokenizer(fam, tok)


def test_document_start_and_end(family):
    fam, tok, _model = family
    want = {"llama3": ([128000], [128001]), "qwen": ([151643], []), "gpt": ([100257], [])}[fam.name]
    assert (document_start(tok), document_end(tok)) == want


def requests(tok, texts):
    """L(ε) and L(e(c, r)) at positions 0, 1 and last of every text."""
    start = tuple(document_start(tok))
    call = start + tuple(tok.encode("[Calculator(400 / 1400) → 0.29] ", add_special_tokens=False))
    return [LossRequest(p, key, i) for key, ids in texts.items() if key != "c" for i in (0, 1, len(ids) - 1)
            for p in (start, call)]


@pytest.mark.slow  # 3-7 s a family
@pytest.mark.parametrize("share", [True, False])
def test_filter_losses_match_the_reference_batched_and_alone(family, share):
    """Position 0 included: a BOS-less tokenizer (Qwen) is scored after its EOS, from real logits."""
    fam, tok, model = family
    texts = {k: tok.encode(t, add_special_tokens=False) for k, t in DOCS.items()}
    reqs = requests(tok, texts)
    assert all(r.prefix for r in reqs)
    scorer = LossScorer(model, tok.pad_token_id or 0, 2048, 5, 256, share_rows=share)
    batched = scorer.losses(reqs, texts)
    for r in reqs:
        alone = scorer.losses([r], texts)[r]  # one request a call: its own row, no padding
        ref = reference_loss(model, r.prefix, texts[r.text_key], r.position)
        assert batched[r] == pytest.approx(ref, abs=1e-5), (fam.name, r.text_key, r.position)
        assert alone == pytest.approx(ref, abs=1e-5), (fam.name, r.text_key, r.position)


def test_candidate_scorer_at_position_zero(family):
    """The filter stage's scorer: a Calendar call before the first token, L(ε) the reference's whatever else is
    in the batch. Alone and batched agree to 1e-5, not bit for bit: the batch's rows are padded to another
    width, so the kernels sum in another order (AVX-512 and AVX2 differ there in the 7th digit)."""
    fam, tok, model = family
    cfg = PipelineConfig()
    docs = {k: {"text": t} for k, t in DOCS.items()}
    rec = {"doc_id": "b", "tool": "Calendar", "input": "", "position": 0, "char_start": 0, "p_i": None,
           "source": "rules", "result": "Today is Monday, May 1, 2024.", "error": None}
    other = {**rec, "doc_id": "a", "tool": "Calculator", "input": "400 / 1400", "position": 5, "char_start": 12,
             "result": "0.29"}
    scorer = CandidateScorer(cfg, model, tok, docs, all_losses=True)
    alone, = scorer.score([rec])
    batched = scorer.score([other, rec, other])[1]
    ids = tok.encode(DOCS["b"], add_special_tokens=False)
    ref = reference_loss(model, scorer.prefix(None), ids, 0)
    assert alone["loss_none"] == pytest.approx(batched["loss_none"], abs=1e-5)
    assert alone["loss_none"] == pytest.approx(ref, abs=1e-5)
    ref_plus = reference_loss(model, scorer.prefix(alone["call_text"]), ids, 0)
    assert alone["loss_plus"] == pytest.approx(batched["loss_plus"], abs=1e-5)
    assert alone["loss_plus"] == pytest.approx(ref_plus, abs=1e-5)


@pytest.mark.parametrize("style", ["plain", "special"])
def test_call_markers_survive_encode_and_decode(family, style, tmp_path):
    from families import write_family_model

    from toolformer.lm.modeling import load_tokenizer

    fam, tok, _model = family
    call = get_style(style).render("Calculator", "400 / 1400", "0.29")
    if style == "plain":
        check_markers(tok, get_style(style), fam.name)
        assert tok.decode(tok.encode(call, add_special_tokens=False)) == call
        return
    folder = write_family_model(fam.name, tmp_path / fam.name)
    special = load_tokenizer(str(folder), get_style(style))
    ids = special.encode(call, add_special_tokens=False)
    assert {special.convert_tokens_to_ids(m) for m in ("<API>", "</API>", "→")} <= set(ids)
    for skip in (False, True):  # the markers are no skippable special tokens: a decoded text keeps its calls
        assert special.decode(ids, skip_special_tokens=skip) == call


def test_packed_rows_put_every_document_between_start_and_end(family):
    fam, tok, _model = family
    texts = list(DOCS.values())
    rows = pack_sequences(tok, texts, 64, whole_documents=True)
    start, end = document_start(tok), document_end(tok)
    want = []
    for t in texts:
        want.append(start + tok.encode(t, add_special_tokens=False) + end)
    got = [[int(x) for x in row if x != IGNORE_INDEX] for row in rows]
    flat = [x for row in got for x in row]
    assert flat == [x for w in want for x in w]
    assert all(row[0] == start[0] for row in got)
    if fam.name == "llama3":
        assert flat.count(tok.eos_token_id) == len(texts)  # every document ends, so the tuned model stops


def test_qwen_padded_and_exact_vocabularies_share_the_tokenizer():
    pytest.importorskip("quicktok")
    assert FAMILIES["qwen"].vocab_rows == 151936 and FAMILIES["qwen-exact"].vocab_rows == 151669
    assert torch.tensor(0).dtype == torch.int64


@pytest.mark.parametrize("name", ["qwen", "qwen-exact"])
def test_call_rows_are_the_mean_whatever_the_padding(name):
    """Qwen's checkpoints have 151,936 rows for 151,669 tokens: the markers land on padding rows, which are set
    to the mean of the tokenizer's rows, as the resized matrix of the unpadded model is."""
    pytest.importorskip("quicktok")
    import copy

    from families import cached_tokenizer, tiny_model

    from toolformer.tools.calls import add_call_tokens

    fam = FAMILIES[name]
    tok = copy.deepcopy(cached_tokenizer("qwen"))
    model = tiny_model(fam, tok)
    assert add_call_tokens(tok, model, get_style("special")) == 3
    w = model.get_input_embeddings().weight
    assert w.shape[0] == max(fam.vocab_rows, len(tok))
    mean = w[:151669].mean(0)
    for m in ("<API>", "</API>", "→"):
        assert torch.allclose(w[tok.convert_tokens_to_ids(m)], mean, atol=1e-6)
    assert model.get_output_embeddings().weight is w  # tied: one matrix
    assert "mean of the 151,669 tokenizer rows" in tok.call_rows_note


@pytest.mark.slow  # about 5 s a family: the decoder reads every token of a 150k vocabulary
def test_generation_batched_is_generation_one_by_one(family):
    from toolformer.lm.generate import generate_with_tools

    _fam, tok, model = family
    prompts = ["The bridge", "A much longer prompt about the town of Aldermoor and its river", "7 + 8 ="]
    style = get_style("plain")
    batched = generate_with_tools(model, tok, prompts, None, style, disabled=True, max_new_tokens=6, batch_size=3,
                                  window=2048)
    for p, g in zip(prompts, batched):
        alone, = generate_with_tools(model, tok, [p], None, style, disabled=True, max_new_tokens=6, window=2048)
        assert g.text == alone.text, p


@pytest.mark.parametrize("name", ["llama3", "gpt"])
def test_call_rows_are_the_mean_on_untied_models(name):
    """Llama-3 (128,256 rows, exact) and GPT-NeoX on cl100k (ids up to 100,276 for 100,261 tokens: the call
    tokens get 100,277 and up): the matrices grow to the last call token and both input and output rows are the
    mean of the rows before the first call token."""
    pytest.importorskip("quicktok")
    import copy

    from families import cached_tokenizer, tiny_model

    from toolformer.tools.calls import add_call_tokens

    fam = FAMILIES[name]
    tok = copy.deepcopy(cached_tokenizer(name))
    model = tiny_model(fam, tok)
    assert add_call_tokens(tok, model, get_style("special")) == 3
    ids = [tok.convert_tokens_to_ids(m) for m in ("<API>", "</API>", "→")]
    assert ids == [fam.vocab_rows, fam.vocab_rows + 1, fam.vocab_rows + 2]
    for w in (model.get_input_embeddings().weight, model.get_output_embeddings().weight):
        assert w.shape[0] == fam.vocab_rows + 3
        for i in ids:
            assert torch.allclose(w[i], w[: fam.vocab_rows].mean(0), atol=1e-6)
    assert f"mean of the {fam.vocab_rows:,} tokenizer rows" in tok.call_rows_note


@pytest.mark.slow  # 4 to 10 s a family: three loads of a 100k-150k vocabulary, and save_pretrained twice
def test_tuned_folder_saves_and_reloads(family, tmp_path):
    """A tuned folder of each family (call tokens of the special style, toolformer.json): from_pretrained, then
    save_pretrained and from_pretrained again give the same markers, rows, document tokens and generation."""
    import copy

    from helpers import ROOT

    from toolformer.api import ToolformerModel
    from toolformer.config.load import load_config
    from toolformer.lm.modelfolder import read_spec, write_spec
    from toolformer.tools.calls import add_call_tokens

    fam, tok, model = family
    tok, model = copy.deepcopy(tok), copy.deepcopy(model)
    add_call_tokens(tok, model, get_style("special"))
    folder = tmp_path / "tuned"
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    cfg = load_config(PipelineConfig, ROOT / "configs" / "tiny.yaml",
                      [f"run_dir={tmp_path / 'run'}", "calls.style=special", "tools.enabled=[Calculator]"])
    write_spec(cfg, folder, 1.0, tokenizer=tok)
    first = ToolformerModel.from_pretrained(folder, device="cpu", dtype="float32")
    again = ToolformerModel.from_pretrained(first.save_pretrained(tmp_path / "saved"))
    assert read_spec(tmp_path / "saved")["document"] == read_spec(folder)["document"]
    for tf in (first, again):
        assert tf.style.name == "special" and tf.tools == ["Calculator"]
        ids = [tf.tokenizer.convert_tokens_to_ids(m) for m in ("<API>", "</API>", "→")]
        if fam.name == "gpt" and ids != [tok.convert_tokens_to_ids(m) for m in ("<API>", "</API>", "→")]:
            # The stand-in's vocabulary has holes (ids up to 100,276 for 100,261 tokens). `tokenizers` gives the
            # added tokens 100,277 and up when they are added, but 100,261 and up when tokenizer.json is read
            # back: a reloaded folder reads its call tokens from other rows. Real GPT-NeoX vocabularies have no
            # holes; a tokenizer that has them needs its call tokens checked after a reload.
            pytest.xfail("tokenizers renumbers added tokens past a vocabulary with holes on reload")
        assert ids == [tok.convert_tokens_to_ids(m) for m in ("<API>", "</API>", "→")], fam.name
        assert (document_start(tf.tokenizer), document_end(tf.tokenizer)) == (document_start(tok), document_end(tok))
        w = tf.model.get_input_embeddings().weight
        assert torch.equal(w[ids], model.get_input_embeddings().weight[ids])
    prompt = "Out of 1400 participants, 400 passed the test, that is"
    a, b = first.generate(prompt, max_new_tokens=6), again.generate(prompt, max_new_tokens=6)
    assert (a.text, a.calls) == (b.text, b.calls)


def test_trl_sft_export_renders_through_each_family(family, tmp_path):
    """The trl-sft export of a built run, rendered by each family's tokenizer with a chat template that writes
    every field: the text encodes and decodes back exactly, and the calls are tool messages, not markers."""
    import json
    import re

    from helpers import built_run_with_two_calls, read_jsonl

    from toolformer.inspect.trl import export_trl

    fam, tok, _ = family
    cfg = built_run_with_two_calls(tmp_path / "run", "Nothing to compute, 東京 2024.")
    assert export_trl(cfg, "trl-sft", tmp_path / "sft")["calls"] == 2
    template = ("{% for m in messages %}<|{{ m.role }}|>{{ m.content }}{% for c in m.tool_calls or [] %}"
                "<call>{{ c.function | tojson }}</call>{% endfor %}<|end|>{% endfor %}")
    for row in read_jsonl(tmp_path / "sft/data.jsonl"):
        text = tok.apply_chat_template(row["messages"], tokenize=False, chat_template=template)
        assert tok.decode(tok.encode(text, add_special_tokens=False)) == text, fam.name
        assert "[Calc" not in text and "→" not in text
        calls = [json.loads(c) for c in re.findall(r"<call>(.*?)</call>", text)]
        assert [c["name"] for c in calls] == [t["function"]["name"] for m in row["messages"]
                                              for t in m.get("tool_calls") or []]


@pytest.mark.slow
def test_lm_eval_model_on_each_family(family, tmp_path):
    """The lm-evaluation-harness model on a folder of each family: the document start before every request, log-
    likelihoods scored together equal each scored alone, and generate_until answers every request."""
    from helpers import ROOT
    from lm_eval.api.instance import Instance

    from toolformer.config.load import load_config
    from toolformer.integrations.lmeval_model import ToolformerLM
    from toolformer.lm.modelfolder import write_spec

    fam, tok, model = family
    folder = tmp_path / "tuned"
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    write_spec(load_config(PipelineConfig, ROOT / "configs" / "tiny.yaml", [f"run_dir={tmp_path / 'run'}"]), folder,
               1.0, tokenizer=tok)
    lm = ToolformerLM(pretrained=str(folder), tools="off", device="cpu", batch_size=4)
    assert lm._prefix() == document_start(tok), fam.name

    def request(kind: str, args: tuple, idx: int = 0) -> Instance:
        return Instance(request_type=kind, doc={}, arguments=args, idx=idx, metadata=("t", idx, 1))

    pairs = [("", DOCS["a"]), ("Out of 1400", " participants"), (DOCS["b"][:30], DOCS["b"][30:])]
    together = lm.loglikelihood([request("loglikelihood", p) for p in pairs], disable_tqdm=True)
    alone = [lm.loglikelihood([request("loglikelihood", p)], disable_tqdm=True)[0] for p in pairs]
    assert [x[0] for x in together] == pytest.approx([x[0] for x in alone], abs=1e-4), fam.name
    out = lm.generate_until([request("generate_until", (DOCS["c"][:4], {"max_gen_toks": 4}), i) for i in range(2)],
                            disable_tqdm=True)
    assert len(out) == 2 and all(isinstance(o, str) for o in out)
