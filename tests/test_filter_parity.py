import random

import pytest
import torch
from reference import reference_loss
from transformers import AutoModelForCausalLM, AutoTokenizer

from toolformer.lm.scoring import LossRequest, LossScorer


@pytest.fixture(scope="module")
def model_and_tok(tiny_model_dir):
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir).eval()
    # Random weights are too flat to tell variants apart; sharpen the head.
    with torch.no_grad():
        model.lm_head.weight.mul_(8.0)
    return model, AutoTokenizer.from_pretrained(tiny_model_dir)


def _requests(tok, n, seed, window):
    rng = random.Random(seed)
    texts = {}
    reqs = []
    for d in range(12):
        length = rng.randint(8, 90)
        texts[f"d{d}"] = [rng.randrange(3, len(tok)) for _ in range(length)]
    for _ in range(n):
        key = rng.choice(list(texts))
        pos = rng.randrange(0, len(texts[key]))
        plen = rng.choice([0, 0, 3, 9, 17, 30])
        prefix = (tok.bos_token_id,) + tuple(rng.randrange(3, len(tok)) for _ in range(plen))
        reqs.append(LossRequest(prefix, key, pos))
    return reqs, texts


@pytest.mark.parametrize("window,budget", [pytest.param(1024, 4096, marks=pytest.mark.slow), (48, 300)])
def test_batched_filter_matches_reference(model_and_tok, window, budget):
    """≥ 200 candidates, mixed lengths (padding), short texts (fewer than 5
    targets) and, with window 48, left cuts of the text."""
    model, tok = model_and_tok
    reqs, texts = _requests(tok, 220, seed=window, window=window)
    scorer = LossScorer(model, tok.pad_token_id, window=window, horizon=5, batch_tokens=budget)
    got = scorer.losses(reqs, texts)
    assert scorer.forwards > 1  # really batched, several groups
    cut = 0
    for r in reqs:
        ref = reference_loss(model, r.prefix, texts[r.text_key], r.position, 5, window)
        assert got[r] == pytest.approx(ref, abs=1e-4)
        cut += len(r.prefix) + min(r.position + 5, len(texts[r.text_key])) > window
    if window == 48:
        assert cut > 20  # the left-cut path was exercised


def test_identical_requests_computed_once(model_and_tok):
    model, tok = model_and_tok
    texts = {"a": list(range(10, 40))}
    r = LossRequest((tok.bos_token_id,), "a", 7)
    scorer = LossScorer(model, tok.pad_token_id, window=1024)
    scorer.losses([r] * 50, texts)
    assert scorer.tokens_scored == 1 + 12  # one row: BOS + x_1..x_{i+4}


def test_rows_shared_across_positions_match_reference(model_and_tok):
    """One prefix at many positions of one text (L(ε) of every position, or a
    call proposed at several positions) is one row, and each loss still equals
    the reference computed on its own row; near the window the group falls back
    to one row per request (left cut)."""
    model, tok = model_and_tok
    rng = random.Random(3)
    texts = {"a": [rng.randrange(3, len(tok)) for _ in range(60)], "b": [rng.randrange(3, len(tok)) for _ in range(30)]}
    bos = (tok.bos_token_id,)
    call = bos + (7, 8, 9, 10)
    reqs = [LossRequest(p, "a", i) for p in (bos, call) for i in (0, 4, 17, 30, 58)]
    reqs += [LossRequest(bos, "b", i) for i in (2, 26)]
    for window in (1024, 40):
        scorer = LossScorer(model, tok.pad_token_id, window=window, horizon=5, batch_tokens=256)
        got = scorer.losses(reqs, texts)
        for r in reqs:
            assert got[r] == pytest.approx(reference_loss(model, r.prefix, texts[r.text_key], r.position, 5, window),
                                           abs=1e-4)
        if window == 1024:  # three rows: BOS + a[:60], call + a[:60], BOS + b[:30]
            assert scorer.tokens_scored == (1 + 60) + (5 + 60) + (1 + 30)
        else:  # text "a" does not fit: one row per request there
            assert scorer.tokens_scored > 10 * 5


def test_unshared_rows_and_models_that_do_not_split(model_and_tok):
    """share_rows=False (and any model whose head on the body's hidden states
    is not its logits) takes the logits_to_keep path, with the same losses."""
    model, tok = model_and_tok
    reqs, texts = _requests(tok, 80, seed=5, window=1024)
    shared = LossScorer(model, tok.pad_token_id, window=1024).losses(reqs, texts)
    plain = LossScorer(model, tok.pad_token_id, window=1024, share_rows=False)
    assert plain.split is None
    got = plain.losses(reqs, texts)
    for r in reqs:
        assert got[r] == pytest.approx(shared[r], abs=1e-4)

    class Scaled(torch.nn.Module):  # logits scaled after the head: body + head would mis-score
        def __init__(self, inner):
            super().__init__()
            self.inner, self.config, self.base_model = inner, inner.config, inner.base_model

        def get_output_embeddings(self):
            return self.inner.get_output_embeddings()

        def forward(self, input_ids, attention_mask=None, position_ids=None, use_cache=False, logits_to_keep=0):
            out = self.inner(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                             use_cache=use_cache, logits_to_keep=logits_to_keep)
            out.logits = out.logits * 0.5
            return out

    scaled = LossScorer(Scaled(model), tok.pad_token_id, window=1024)
    assert scaled.split is None
    r = reqs[0]
    want = reference_loss(Scaled(model), r.prefix, texts[r.text_key], r.position, 5, 1024)
    assert scaled.losses([r], texts)[r] == pytest.approx(want, abs=1e-4)


@pytest.fixture(scope="module")
def llama_and_tok(model_and_tok):
    """A tiny Llama (rotary positions: the cache continuation must carry positions right)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    _, tok = model_and_tok
    torch.manual_seed(1)
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256)
    model = LlamaForCausalLM(cfg).eval()
    with torch.no_grad():
        model.lm_head.weight.mul_(8.0)
    return model, tok


@pytest.mark.parametrize("arch,window", [pytest.param("gpt2", 1024, marks=pytest.mark.slow), ("gpt2", 40),
                                         pytest.param("llama", 1024, marks=pytest.mark.slow), ("llama", 40)])
def test_shared_heads_match_reference(model_and_tok, llama_and_tok, arch, window):
    """e(c, ε) and e(c, r) share BOS + the call up to the arrow: the head runs
    once and both rows continue from its cache, with the reference's losses
    (positions 0 and near the end, heads of different lengths, left cuts)."""
    model, tok = model_and_tok if arch == "gpt2" else llama_and_tok
    rng = random.Random(11)
    texts = {f"d{d}": [rng.randrange(3, len(tok)) for _ in range(rng.randint(6, 60))] for d in range(6)}
    bos = (tok.bos_token_id,)
    reqs = []
    for key, text in texts.items():
        for pos in {0, len(text) - 1, rng.randrange(len(text)), rng.randrange(len(text))}:
            call = tuple(rng.randrange(3, len(tok)) for _ in range(rng.randint(3, 12)))
            head = bos + call + (4,)
            reqs += [LossRequest(bos, key, pos), LossRequest(head + (5,), key, pos, shared=len(head)),
                     LossRequest(head + (6, 7, 8, 5), key, pos, shared=len(head))]
    scorer = LossScorer(model, tok.pad_token_id, window=window, horizon=5, batch_tokens=300)
    got = scorer.losses(reqs, texts)
    _plain, shared_batches = scorer.plan(scorer.rows(list(dict.fromkeys(reqs)), texts))
    assert shared_batches and sum(len(gs) for _, b in shared_batches for gs in b) >= 20  # the shared path ran
    for r in reqs:
        ref = reference_loss(model, r.prefix, texts[r.text_key], r.position, 5, window)
        assert got[r] == pytest.approx(ref, abs=1e-4), r
    unshared = LossScorer(model, tok.pad_token_id, window=window, horizon=5, batch_tokens=300)
    unshared.losses([LossRequest(r.prefix, r.text_key, r.position) for r in reqs], texts)
    assert scorer.tokens_scored < unshared.tokens_scored


def test_a_head_shared_by_more_rows_than_a_batch_holds(model_and_tok):
    """One call in many documents: the group is split to fit the token budget."""
    model, tok = model_and_tok
    rng = random.Random(2)
    texts = {f"d{d}": [rng.randrange(3, len(tok)) for _ in range(30)] for d in range(40)}
    head = (tok.bos_token_id, 9, 10, 11, 12, 4)
    reqs = [LossRequest(head + tail, key, 20, shared=len(head)) for key in texts for tail in ((5,), (6, 7, 5))]
    scorer = LossScorer(model, tok.pad_token_id, window=1024, horizon=5, batch_tokens=200)
    _plain, batches = scorer.plan(scorer.rows(reqs, texts))
    assert len(batches) > 1 and all(sum(len(gs) for gs in b) * 33 <= 200 for _, b in batches)
    got = scorer.losses(reqs, texts)
    for r in reqs[:12]:
        assert got[r] == pytest.approx(reference_loss(model, r.prefix, texts[r.text_key], 20, 5, 1024), abs=1e-4)
