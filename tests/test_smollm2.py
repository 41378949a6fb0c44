"""Real pretrained weights: SmolLM2-135M, imported once per session from its pinned registry package (conftest.py,
``smollm2``; skipped with the reason where the package cannot be had). Its document tokens as the family defines
them, the filter's losses against the reference (batched and alone), the filter stage's recorded losses against a
recomputation, and the whole path: sample → execute → filter → build → a few fine-tuning steps → generate with a
call → save and reload.

Tolerances: float32 through 30 layers; batched rows are padded to another width than a request alone, so sums run
in another order: 1e-4 nats between any two computations of one loss."""

from __future__ import annotations

import json

import pytest
from reference import reference_loss

from toolformer.lm.modeling import document_end, document_start
from toolformer.lm.rows import pack_sequences
from toolformer.lm.scoring import LossRequest, LossScorer

pytestmark = pytest.mark.slow
TOL = 1e-4
DOCS = {"a": "Out of 1400 participants, 400 passed the test.",
        "b": "Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May.",
        "c": "The Eiffel Tower is located in Paris."}
CORPUS = [{"id": "m1", "text": "A box holds 12 pencils. 7 boxes hold 7 * 12 = 84 pencils in all."},
          {"id": "m2", "text": "Out of 1400 participants, 400 passed, that is 400 / 1400 = 0.29 of them."},
          {"id": "m3", "text": "She had 25 apples and gave away 9, so 25 - 9 = 16 apples were left."}]


def test_documents_start_and_end_with_the_pretraining_separator(smollm2):
    """SmolLM2 was pre-trained on documents separated by <|endoftext|> (id 0); the release names its chat markers
    BOS and EOS, and its tokenizer adds neither. The import makes <|endoftext|> both, so a document is read after
    it, training rows hold one between documents, and generation stops on it."""
    _folder, tok, _model = smollm2
    assert tok.convert_ids_to_tokens([0]) == ["<|endoftext|>"]
    assert (document_start(tok), document_end(tok)) == ([0], [])
    assert tok("Hello world").input_ids[0] != 0  # the tokenizer adds nothing: the pipeline puts the start
    docs = [tok(t, add_special_tokens=False).input_ids for t in DOCS.values()]
    row = pack_sequences(tok, list(DOCS.values()), 128, whole_documents=True)[0].tolist()
    assert [i for i, t in enumerate(row) if t == 0] == [0, len(docs[0]) + 1, len(docs[0]) + len(docs[1]) + 2]
    assert row[1:len(docs[0]) + 1] == docs[0]


def test_filter_losses_match_the_reference_batched_and_alone(smollm2):
    """L(ε) and L(e(c, r)) at positions 0, 1 and the last of each text: the batched scorer, each request alone,
    and the reference (one sequence, no padding) agree within TOL."""
    _folder, tok, model = smollm2
    texts = {k: tok(t, add_special_tokens=False).input_ids for k, t in DOCS.items()}
    start = tuple(document_start(tok))
    call = start + tuple(tok("[Calculator(400 / 1400) → 0.29] ", add_special_tokens=False).input_ids)
    reqs = [LossRequest(p, k, i) for k, ids in texts.items() for i in (0, 1, len(ids) - 1) for p in (start, call)]
    scorer = LossScorer(model, tok.pad_token_id, 2048, 5, 256)
    batched = scorer.losses(reqs, texts)
    for r in reqs:
        ref = reference_loss(model, r.prefix, texts[r.text_key], r.position)
        assert batched[r] == pytest.approx(ref, abs=TOL), (r.text_key, r.position)
        assert scorer.losses([r], texts)[r] == pytest.approx(ref, abs=TOL), (r.text_key, r.position)


@pytest.fixture(scope="module")
def tuned_run(smollm2, tmp_path_factory):
    """sample → execute → filter → build → finetune (3 steps) of the tiny config on three calculations, SmolLM2 as
    the model, tau_f low enough that calls are kept."""
    from helpers import ROOT

    from toolformer.cli.app import main

    folder, _tok, _model = smollm2
    root = tmp_path_factory.mktemp("smollm2-run")
    (root / "corpus.jsonl").write_text("".join(json.dumps(d) + "\n" for d in CORPUS))
    overrides = [f"run_dir={root / 'run'}", f"model.path={folder}", f"corpus.path={root / 'corpus.jsonl'}",
                 "tools.enabled=[Calculator]", "sample.method={Calculator: rules}", "filter.tau_filter=-5.0",
                 "build.plain_ratio=0", "finetune.max_steps=3", "finetune.batch_size=2", "finetune.micro_batch_size=2",
                 "finetune.max_length=64", "finetune.learning_rate=1.0e-5", "finetune.dev_ratio=0",
                 "finetune.eval_every=0", "finetune.save_every=0", "model.threads=2",
                 "stages=[sample, execute, filter, build, finetune]"]
    assert main(["run", "--config", str(ROOT / "configs/tiny.yaml"), *overrides]) == 0
    return root / "run"


def test_the_filter_stage_records_the_reference_losses(smollm2, tuned_run):
    """Every scored record: L(ε), L(e(c, ε)) and L(e(c, r)) recomputed from its document, position and call text
    with the reference; the kept ones have L⁻ − L⁺ ≥ tau_f."""
    from toolformer.config.schema import FilterConfig
    from toolformer.inspect.view import read_stage
    from toolformer.lm.textpos import tokenize_text

    _folder, tok, model = smollm2
    texts = {d["id"]: tokenize_text(tok, d["text"]).ids for d in CORPUS}
    records = [r for r in read_stage(tuned_run, "filter").records if r["loss_plus"] is not None]
    assert records and any(r["kept"] for r in records)
    for r in records[:12]:
        ids = texts[r["doc_id"]]
        for key, call in (("loss_none", None), ("loss_with_result", r["call_text"]),
                          ("loss_no_result", r["call_text_no_result"])):
            if r[key] is None:
                continue
            z = "" if call is None else call + FilterConfig().prefix_separator
            prefix = [0] + tok(z, add_special_tokens=False).input_ids
            assert r[key] == pytest.approx(reference_loss(model, prefix, ids, r["position"]), abs=TOL), (key, r)
        assert r["kept"] == (r["loss_minus"] - r["loss_plus"] >= r["tau_filter"])


def test_the_tuned_model_generates_a_call_and_reloads(tuned_run, tmp_path):
    """The tuned folder (a few steps on calls) answers with a Calculator call that ran, and saved again and reloaded
    gives the same text and calls."""
    from toolformer.api import ToolformerModel

    tf = ToolformerModel.from_pretrained(tuned_run / "model", device="cpu", dtype="float32")
    assert (document_start(tf.tokenizer), document_end(tf.tokenizer)) == ([0], [])
    prompt = "A box holds 12 pencils. 5 boxes hold"
    first = tf.generate(prompt, max_new_tokens=16, top_k_trigger=len(tf.tokenizer), constrained=True)
    assert first.calls and first.calls[0]["tool"] == "Calculator" and first.calls[0]["result"] is not None
    again = ToolformerModel.from_pretrained(tf.save_pretrained(tmp_path / "saved"), device="cpu", dtype="float32")
    second = again.generate(prompt, max_new_tokens=16, top_k_trigger=len(tf.tokenizer), constrained=True)
    assert (second.text, second.calls) == (first.text, first.calls)
