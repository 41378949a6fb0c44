import pytest
import torch
from scripted_lm import FixedCallLM
from transformers import AutoModelForCausalLM, AutoTokenizer

from toolformer.lm.sampler import Sampler
from toolformer.lm.textpos import tokenize_text
from toolformer.tools import REGISTRY, render_prompt
from toolformer.tools.calls import STYLES

PLAIN = STYLES["plain"]


@pytest.fixture(scope="module")
def model_tok(tiny_model_dir):
    return AutoModelForCausalLM.from_pretrained(tiny_model_dir).eval(), AutoTokenizer.from_pretrained(tiny_model_dir)


def _docs(tok, texts):
    return [(t, tokenize_text(tok, t)) for t in texts]


def test_prompt_cache_gives_the_same_scores_as_full_prompts(model_tok):
    model, tok = model_tok
    prompt = render_prompt(REGISTRY["Calculator"], "{text}", PLAIN)
    docs = _docs(tok, ["The farm sold 340 eggs and 275 more, 615 in all.", "Short one.", "A b c 1 2 3 = 6 ok"])
    cached = Sampler(model, tok, PLAIN, prompt, [tok.bos_token_id], reuse_cache=True)
    full = Sampler(model, tok, PLAIN, prompt, [tok.bos_token_id], reuse_cache=False)
    a = cached.score_positions(docs, batch_tokens=4096)
    b = full.score_positions(docs, batch_tokens=64)  # one document per batch
    for x, y, (_, tt) in zip(a, b, docs):
        assert len(x) == len(tt.ids)
        assert x == pytest.approx(y, abs=1e-5)
        assert all(0.0 <= p <= 1.0 for p in x)


def test_position_scores_fit_a_large_vocabulary_and_read_only_the_logits_they_need(model_tok, monkeypatch):
    """A forward's logits are bounded by the vocabulary (a 262,144-row output layer would make 16 GiB of a
    16,384-token budget) and cover only the document's positions: the same scores either way."""
    import toolformer.lm.modeling as modeling
    from toolformer.lm.modeling import last_logits, logit_token_budget

    model, tok = model_tok
    prompt = render_prompt(REGISTRY["Calculator"], "{text}", PLAIN)
    docs = _docs(tok, ["The farm sold 340 eggs and 275 more, 615 in all.", "Short one.", "A b c 1 2 3 = 6 ok"])
    want = Sampler(model, tok, PLAIN, prompt, [tok.bos_token_id]).score_positions(docs, batch_tokens=4096)
    vocab = model.get_output_embeddings().weight.shape[0]
    assert logit_token_budget(model, 4096, max_bytes=4 * vocab * 20) == 20 and logit_token_budget(model, 7) == 7
    seen = []
    real = model.forward

    def forward(*a, **k):
        seen.append(((k["input_ids"] if "input_ids" in k else a[0]).shape, k.get("logits_to_keep")))
        return real(*a, **k)

    monkeypatch.setattr(modeling, "LOGIT_BYTES", 4 * vocab * 20)  # 20 tokens of logits a forward
    monkeypatch.setattr(model, "forward", forward)
    got = Sampler(model, tok, PLAIN, prompt, [tok.bos_token_id]).score_positions(docs, batch_tokens=4096)
    assert all(x == pytest.approx(y, abs=1e-5) for x, y in zip(got, want))
    scored = [(shape, keep) for shape, keep in seen if keep is not None and keep > 1]
    assert len(scored) == 3 and all(shape[0] * shape[1] <= 20 or shape[0] == 1 for shape, _ in scored)
    assert all(keep < shape[1] + 1 for shape, keep in scored)  # the prompt's positions make no logits
    assert last_logits(torch.nn.Linear(2, 2), 1) == {}  # a forward without logits_to_keep: all, sliced after


def test_sampling_writes_closed_calls_and_drops_unclosed(model_tok):
    _, tok = model_tok
    from toolformer.lm.textpos import marker_token_ids

    start_ids = marker_token_ids(tok, "[")

    def run(text):
        lm = FixedCallLM(len(tok), tok(text, add_special_tokens=False)["input_ids"], start_ids)
        prompt = render_prompt(REGISTRY["Calculator"], "{text}", PLAIN)
        sampler = Sampler(lm, tok, PLAIN, prompt, [tok.bos_token_id])
        docs = _docs(tok, ["Sold 2 and 3, 5 in all."])
        return sampler.sample_calls(docs, [[5, 6]], num_calls=3, max_new_tokens=10, temperature=1.0,
                                    tool="Calculator", generator=torch.Generator().manual_seed(0), batch_tokens=4096)

    # 3 samples per position, deduplicated; both positions get the call.
    assert run("Calculator(2+3)]") == [[(5, "2+3"), (6, "2+3")]]
    assert run("Calculator(2+3") == [[]]  # never closed within max_new_tokens: dropped
    assert run("WikiSearch(x)]") == [[]]  # a call of another tool: dropped


def test_without_a_prompt_scores_come_from_the_text_alone(model_tok):
    model, tok = model_tok
    text = "The farm sold 340 eggs and 275 more, 615 in all."
    docs = _docs(tok, [text, "Short one."])
    free = Sampler(model, tok, PLAIN, None, [tok.bos_token_id])
    scores = free.score_positions(docs, batch_tokens=4096)
    from toolformer.lm.textpos import marker_token_ids

    ids = [tok.bos_token_id, *docs[0][1].ids]
    with torch.no_grad():
        probs = torch.softmax(model(torch.tensor([ids])).logits[0].float(), dim=-1)
    want = probs[:-1, marker_token_ids(tok, "[")].sum(-1).tolist()  # p(call-start | BOS, x_1..x_{i-1})
    assert scores[0] == pytest.approx(want, abs=1e-5)
    assert len(scores[1]) == len(docs[1][1].ids)
    with pytest.raises(ValueError, match="neither BOS nor EOS"):
        Sampler(model, tok, PLAIN, None, [])


def test_without_a_prompt_a_call_counts_for_the_tool_it_names_and_ends_at_the_arrow(model_tok):
    _, tok = model_tok
    from toolformer.lm.textpos import marker_token_ids

    start_ids = marker_token_ids(tok, "[")
    docs = _docs(tok, ["Sold 2 and 3, 5 in all."])

    def run(script, prompt=None, tools=("Calculator", "QA"), max_new_tokens=12):
        lm = FixedCallLM(len(tok), tok(script, add_special_tokens=False)["input_ids"], start_ids)
        sampler = Sampler(lm, tok, PLAIN, prompt, [tok.bos_token_id])
        return sampler.sample_any(docs, [[(5, 2), (6, 1)]], max_new_tokens, 1.0, set(tools),
                                  torch.Generator().manual_seed(0), 4096)

    # The tuned model writes e(c, r): the input ends at the arrow, the model's own result is not taken.
    n_head = len(tok("Calculator(2+3) →", add_special_tokens=False)["input_ids"])
    assert run("Calculator(2+3) → 5]", max_new_tokens=n_head) == [[(5, "Calculator", "2+3"),
                                                                   (6, "Calculator", "2+3")]]
    assert run("QA(Who sold it?)]") == [[(5, "QA", "Who sold it?"), (6, "QA", "Who sold it?")]]
    assert run("QA(Who sold it?)]", tools=("Calculator",)) == [[]]  # a tool not sampled: dropped
    assert run("Calculator(2+3") == [[]]  # never closed: dropped
    # With a few-shot prompt, a call that carries a result is not an input the prompt asked for.
    prompt = render_prompt(REGISTRY["Calculator"], "{text}", PLAIN)
    assert run("Calculator(2+3) → 5]", prompt=prompt) == [[]]


@pytest.mark.parametrize("few_shot", [True, False])
def test_sampling_from_the_masked_document_cache_equals_decoding_from_the_cut_prefix(model_tok, few_shot):
    """Each document runs once and every sample masks its cache after x_{i-1}: greedy samples (temperature
    ~0) are the tokens greedy decoding writes from [P(x), x_1..x_{i-1}, call-start] alone."""
    model, tok = model_tok
    prompt = render_prompt(REGISTRY["Calculator"], "{text}", PLAIN) if few_shot else None
    sampler = Sampler(model, tok, PLAIN, prompt, [tok.bos_token_id])
    docs = _docs(tok, ["The farm sold 340 eggs and 275 more, 615 in all.", "Short one, 12 and 7."])
    plans = [[(0, 1), (3, 2), (9, 1)], [(2, 1), (5, 1)]]
    rows = sampler.prompt_rows(docs)
    got = sampler.sample_rows(rows, plans, [tt.ids for _, tt in docs], 6, 1e-6, torch.Generator().manual_seed(0))
    for (text, tt), plan, samples in zip(docs, plans, got):
        for i, tokens in samples:
            seq = list(sampler.parts.preamble_ids)  # [BOS] + the prompt's preamble ([BOS] alone without one)
            if few_shot:
                seq += tok(text + sampler.parts.tail, add_special_tokens=False)["input_ids"]
            seq += tt.ids[:i] + [sampler._start_token(tt.ids[i])]
            want = []
            with torch.no_grad():
                for _ in range(6):
                    nxt = int(model(torch.tensor([seq])).logits[0, -1].argmax())
                    want.append(nxt)
                    seq.append(nxt)
                    if nxt in sampler.stop_ids:
                        break
            assert tokens == want, (text, i)
        assert [i for i, _ in samples] == [i for i, m in plan for _ in range(m)]


def test_a_documents_samples_are_split_to_fit_the_token_budget(model_tok, monkeypatch):
    """Every (position, m) is sampled m times whatever the budget; a batch holds at most budget tokens of rows
    (rows × (document + max_new_tokens)), unless one sample alone is longer."""
    _, tok = model_tok
    from toolformer.lm.textpos import marker_token_ids

    script = tok("Calculator(2+3)]", add_special_tokens=False)["input_ids"]
    lm = FixedCallLM(len(tok), script, marker_token_ids(tok, "["))
    sampler = Sampler(lm, tok, PLAIN, None, [tok.bos_token_id])
    docs = _docs(tok, ["Sold 2 and 3, 5 in all.", "The farm sold 340 eggs and 275 more, 615 in all."])
    plans = [[(1, 3), (4, 5)], [(0, 2), (6, 4), (9, 1)]]
    batches = []
    real = sampler.sample_rows

    def spy(rows, pieces, *args):
        batches.append([(len(r) + 12, sum(m for _, m in p)) for (r, _), p in zip(rows, pieces)])
        return real(rows, pieces, *args)

    monkeypatch.setattr(sampler, "sample_rows", spy)
    for budget in (10**6, 150, 1):
        batches.clear()
        out = sampler.sample_any(docs, plans, 12, 1.0, {"Calculator"}, torch.Generator().manual_seed(0), budget)
        assert out == [[(1, "Calculator", "2+3"), (4, "Calculator", "2+3")],
                       [(0, "Calculator", "2+3"), (6, "Calculator", "2+3"), (9, "Calculator", "2+3")]]
        assert sum(n for b in batches for _, n in b) == 15  # every sample drawn, none twice
        for b in batches:
            assert max(length for length, _ in b) * sum(n for _, n in b) <= budget or sum(n for _, n in b) == 1
        if budget == 10**6:
            assert len(batches) == 1
        elif budget == 1:
            assert len(batches) == 15  # one sample per batch
        else:
            assert 1 < len(batches) < 15
