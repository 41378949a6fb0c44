"""A deterministic test double for generation: a "model" whose logits are
scripted from the text it has generated so far.

``script(text) -> list`` returns the tokens (strings of the vocabulary or ids)
in rank order, best first; every other token gets a much lower score. With
``with_prompt=True`` the script is called as ``script(text, prompt)``. The
double keeps each row's token history in its "cache", so it works with the
key/value-cache loop of :mod:`toolformer.lm.generate` exactly like a real model.
``call_script`` writes one call inside an open call and ``generate_scripted`` runs
``generate_with_tools`` on such a script.

``FixedCallLM`` is the sampler's double (:mod:`toolformer.lm.sampler`): after a
call-start token it writes a fixed token script, elsewhere its logits are uniform.
"""

from __future__ import annotations

from types import SimpleNamespace

import torch
from torch import nn


class ScriptedLM(nn.Module):
    def __init__(self, tokenizer, script, window: int = 1024, with_prompt: bool = False):
        super().__init__()
        self.tok = tokenizer
        self.script = script
        self.with_prompt = with_prompt
        self.vocab = tokenizer.get_vocab()
        self.dummy = nn.Parameter(torch.zeros(1))  # gives the loop a device
        self.config = SimpleNamespace(max_position_embeddings=window)
        self.seen: list[str] = []  # every generated text the script was asked about

    def token_id(self, t) -> int:
        if isinstance(t, int):
            return t
        if t not in self.vocab:
            raise KeyError(f"{t!r} is not one token of the vocabulary")
        return self.vocab[t]

    def forward(self, input_ids, attention_mask=None, position_ids=None, past_key_values=None, use_cache=True):
        B, T = input_ids.shape
        if past_key_values is None:
            mask = attention_mask if attention_mask is not None else torch.ones_like(input_ids)
            hist = [[int(t) for t, m in zip(row, mrow) if m] for row, mrow in zip(input_ids, mask)]
            past_key_values = {"hist": hist, "prompt_len": [len(h) for h in hist]}
        else:
            for b in range(B):
                past_key_values["hist"][b].extend(int(t) for t in input_ids[b])
        logits = torch.full((B, T, len(self.tok)), -1e4)  # (B, T, V)
        for b in range(B):
            hist, n = past_key_values["hist"][b], past_key_values["prompt_len"][b]
            text = self.tok.decode(hist[n:], clean_up_tokenization_spaces=False)
            self.seen.append(text)
            ranked = self.script(text, self.tok.decode(hist[:n], skip_special_tokens=True)) if self.with_prompt \
                else self.script(text)
            for rank, t in enumerate(ranked):
                logits[b, -1, self.token_id(t)] = 100.0 - rank
        return SimpleNamespace(logits=logits, past_key_values=past_key_values)


def follow(tokenizer, target: str, text: str):
    """The next token of ``target`` after ``text`` (EOS when done or off track)."""
    if not target.startswith(text) or target == text:
        return tokenizer.eos_token_id
    from toolformer.lm.tokenizer import encode_piece

    return encode_piece(tokenizer, target[len(text):])[0]


CALL = "[Calculator(2+3) →"


def call_script(tok, outside, call=CALL):
    """Inside an open call write ``call``, then (if nothing was inserted) a
    wrong result ` 7` and `]`; outside a call defer to ``outside(text)``."""

    def script(text):
        i = text.rfind("[")
        if i != -1 and "]" not in text[i:]:
            seg = text[i:]
            if call.startswith(seg) and seg != call:
                return [follow(tok, call, seg)]
            return [" 7"] if seg.endswith("→") else ["]"]
        return outside(text)

    return script


def generate_scripted(tok, script, sandbox, prompts=("Q: 2 + 3 = ?",), **kw):
    """``generate_with_tools`` with a ScriptedLM of ``script`` and the plain call style."""
    from toolformer.lm.generate import generate_with_tools
    from toolformer.tools.calls import get_style

    return generate_with_tools(ScriptedLM(tok, script), tok, list(prompts), sandbox, get_style("plain"), **kw)


class TokenCache:
    """FixedCallLM's key/value cache: just the tokens seen so far."""

    def __init__(self, tokens):
        self.tokens = tokens

    def batch_repeat_interleave(self, n):
        self.tokens = self.tokens.repeat_interleave(n, 0)

    def reorder_cache(self, index):
        self.tokens = self.tokens[index]


class FixedCallLM(torch.nn.Module):
    """A causal LM double: after the call-start token it writes a fixed token
    script (e.g. `Calculator(2+3)]`); elsewhere uniform logits."""

    def __init__(self, vocab, script, start_ids):
        super().__init__()
        self.vocab, self.script, self.start_ids = vocab, script, set(start_ids)
        self.dummy = torch.nn.Parameter(torch.zeros(1))

    def forward(self, input_ids, attention_mask=None, position_ids=None, cache=None, use_cache=True):
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
