"""Batched computation of the filter losses L_i(z).

A request asks for L_i(z) for one prefix z (already tokenized, BOS included)
before one text at one position i. The sequence is
``prefix + text[:i + h]`` (h = tokens weighted, at most ``horizon``): it is cut
right after the last weighted token, and when it exceeds the model window the
text is cut on the left while the prefix is kept. Identical requests are
computed once (L(ε) of a position is shared by all its candidates). Rows are
grouped by length, batched by a token budget and left-padded, so the logits
needed are the last ``horizon + 1`` of every row (``logits_to_keep``).
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass

import torch

from toolformer.losses import loss_weights
from toolformer.sampler import batches_by_budget


@dataclass(frozen=True)
class LossRequest:
    prefix: tuple[int, ...]  # [BOS] + tokens(z)
    text_key: str  # identifies the text (doc_id)
    position: int  # token index i of x_i


def build_row(prefix: tuple[int, ...], text_ids: list[int], position: int, horizon: int, window: int) -> tuple[list[int], int]:
    """The token row for one request and how many targets h it ends with."""
    h = min(horizon, len(text_ids) - position)
    if h <= 0:
        raise ValueError(f"position {position} is past the end of a text of {len(text_ids)} tokens")
    end = position + h
    start = max(0, end - (window - len(prefix)))  # left cut of the text, prefix kept
    if start > position:
        raise ValueError(f"prefix of {len(prefix)} tokens leaves no room for the text in a window of {window}")
    return list(prefix) + text_ids[start:end], h


class LossScorer:
    """Computes L_i(z) for many requests on one model."""

    def __init__(self, model, pad_id: int, window: int, horizon: int = 5, batch_tokens: int = 16384):
        self.model = model
        self.device = next(model.parameters()).device
        self.pad_id = pad_id
        self.window = window
        self.horizon = horizon
        self.batch_tokens = batch_tokens
        self.weights = torch.tensor(loss_weights(horizon), dtype=torch.float32)
        params = inspect.signature(model.forward).parameters
        self.keep_arg = "logits_to_keep" in params
        self.tokens_scored = 0  # real (unpadded) tokens sent through the model
        self.forwards = 0

    @torch.no_grad()
    def losses(self, requests: list[LossRequest], texts: dict[str, list[int]]) -> dict[LossRequest, float]:
        unique = list(dict.fromkeys(requests))
        rows = [build_row(r.prefix, texts[r.text_key], r.position, self.horizon, self.window) for r in unique]
        out: dict[LossRequest, float] = {}
        H = self.horizon
        for group in batches_by_budget([len(row) for row, _ in rows], self.batch_tokens):
            width = max(len(rows[k][0]) for k in group)
            ids = torch.full((len(group), width), self.pad_id, dtype=torch.long)
            mask = torch.zeros_like(ids)
            targets = torch.zeros((len(group), H), dtype=torch.long)
            tmask = torch.zeros((len(group), H), dtype=torch.float32)
            wts = torch.zeros((len(group), H), dtype=torch.float32)
            for b, k in enumerate(group):
                row, h = rows[k]
                ids[b, width - len(row) :] = torch.tensor(row)
                mask[b, width - len(row) :] = 1
                targets[b, H - h :] = torch.tensor(row[-h:])
                tmask[b, H - h :] = 1
                wts[b, H - h :] = self.weights[:h]  # x_i gets w_0, whatever h is
                self.tokens_scored += len(row)
            ids, mask = ids.to(self.device), mask.to(self.device)
            position_ids = (mask.cumsum(-1) - 1).clamp(min=0)
            kwargs = {"logits_to_keep": H + 1} if self.keep_arg else {}
            logits = self.model(input_ids=ids, attention_mask=mask, position_ids=position_ids, use_cache=False,
                                **kwargs).logits[:, -(H + 1) : -1]  # (B, H, V): predictions of the last H tokens
            self.forwards += 1
            logp = torch.log_softmax(logits.float(), dim=-1)  # fp32 whatever the model dtype
            tlogp = logp.gather(-1, targets.to(self.device).unsqueeze(-1)).squeeze(-1).cpu()  # (B, H)
            tlogp = tlogp * tmask  # padding targets contribute nothing
            loss = -(wts * tlogp).sum(-1)
            for b, k in enumerate(group):
                out[unique[k]] = float(loss[b])
        return out

