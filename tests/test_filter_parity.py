import random

import pytest
import torch
from reference import reference_loss
from transformers import AutoModelForCausalLM, AutoTokenizer

from toolformer.scoring import LossRequest, LossScorer


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


@pytest.mark.parametrize("window,budget", [(1024, 4096), (48, 300)])
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
