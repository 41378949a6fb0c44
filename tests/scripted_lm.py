"""A deterministic test double for generation: a "model" whose logits are
scripted from the text it has generated so far.

``script(text) -> list`` returns the tokens (strings of the vocabulary or ids)
in rank order, best first; every other token gets a much lower score. With
``with_prompt=True`` the script is called as ``script(text, prompt)``. The
double keeps each row's token history in its "cache", so it works with the
key/value-cache loop of :mod:`toolformer.lm.generate` exactly like a real model.
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
