import pytest
import torch
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


class TokenCache:
    """The double's key/value cache: just the tokens seen so far."""

    def __init__(self, tokens):
        self.tokens = tokens

    def batch_repeat_interleave(self, n):
        self.tokens = self.tokens.repeat_interleave(n, 0)


class ScriptedLM(torch.nn.Module):
    """A causal LM double: after the call-start token it writes a fixed token
    script (e.g. `Calculator(2+3)]`); elsewhere uniform logits."""

    def __init__(self, vocab, script, start_ids):
        super().__init__()
        self.vocab, self.script, self.start_ids = vocab, script, set(start_ids)
        self.dummy = torch.nn.Parameter(torch.zeros(1))

    def forward(self, input_ids, attention_mask=None, position_ids=None, cache=None, use_cache=True):
        from types import SimpleNamespace

        hist = cache.tokens if cache is not None else torch.zeros((input_ids.shape[0], 0), dtype=torch.long)
        full = torch.cat([hist, input_ids], dim=1)
        B, T = input_ids.shape
        logits = torch.zeros((B, T, self.vocab))  # (B, T, V)
        for b in range(B):
            seq = full[b].tolist()
            for t in range(T):
                upto = seq[: hist.shape[1] + t + 1]
                last_start = max((k for k, x in enumerate(upto) if x in self.start_ids), default=None)
                if last_start is not None and len(upto) - 1 - last_start < len(self.script):
                    logits[b, t, self.script[len(upto) - 1 - last_start]] = 50.0
        return SimpleNamespace(logits=logits, cache=TokenCache(full))


def test_sampling_writes_closed_calls_and_drops_unclosed(model_tok):
    _, tok = model_tok
    from toolformer.lm.textpos import marker_token_ids

    start_ids = marker_token_ids(tok, "[")

    def run(text):
        lm = ScriptedLM(len(tok), tok(text, add_special_tokens=False)["input_ids"], start_ids)
        prompt = render_prompt(REGISTRY["Calculator"], "{text}", PLAIN)
        sampler = Sampler(lm, tok, PLAIN, prompt, [tok.bos_token_id])
        docs = _docs(tok, ["Sold 2 and 3, 5 in all."])
        return sampler.sample_calls(docs, [[5, 6]], num_calls=3, max_new_tokens=10, temperature=1.0,
                                    tool="Calculator", generator=torch.Generator().manual_seed(0), batch_tokens=4096)

    # 3 samples per position, deduplicated; both positions get the call.
    assert run("Calculator(2+3)]") == [[(5, "2+3"), (6, "2+3")]]
    assert run("Calculator(2+3") == [[]]  # never closed within max_new_tokens: dropped
    assert run("WikiSearch(x)]") == [[]]  # a call of another tool: dropped
