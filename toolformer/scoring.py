"""Batched computation of the filter losses L_i(z).

A request asks for L_i(z) for one prefix z (already tokenized, BOS included)
before one text at one position i. The sequence is
``prefix + text[:i + h]`` (h = tokens weighted, at most ``horizon``): it is cut
right after the last weighted token, and when it exceeds the model window the
text is cut on the left while the prefix is kept.

What is shared:

* identical requests are computed once (L(ε) of a position is shared by all
  its candidates);
* requests with the same prefix on the same text (L(ε) at every position of a
  document, or one call proposed at several positions) share one row cut after
  the last weighted token of the furthest position: the model is causal, so
  the losses at the earlier positions are the same as in their own rows;
* rows are grouped by length, batched by a token budget and left-padded; the
  vocabulary projection runs only on the positions that predict weighted
  tokens (the model body's last hidden states are gathered first), so no
  (rows × length × vocabulary) tensor is ever made.
"""

from __future__ import annotations

import inspect
from collections import defaultdict
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


@dataclass
class Row:
    ids: list[int]
    targets: list[tuple[int, int, int]]  # (request index, row index of its first weighted token, h)


def body_and_head(model):
    """(body, head) such that ``head(body(...).last_hidden_state)`` are the
    model's logits, or None when the model does not split that way (checked
    on a few tokens, so a model with extra logit scaling is not mis-scored)."""
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    body = getattr(model, "base_model", None)
    if head is None or body is None or body is model:
        return None
    device = next(model.parameters()).device
    ids = torch.arange(3, 11, device=device).clamp(max=model.config.vocab_size - 1)[None]
    with torch.no_grad():
        want = model(input_ids=ids, use_cache=False).logits.float()
        got = head(body(input_ids=ids, use_cache=False).last_hidden_state).float()
    if got.shape != want.shape or not torch.allclose(got, want, rtol=1e-3, atol=1e-3 * float(want.abs().max())):
        return None
    return body, head


class LossScorer:
    """Computes L_i(z) for many requests on one model."""

    def __init__(self, model, pad_id: int, window: int, horizon: int = 5, batch_tokens: int = 16384,
                 share_rows: bool = True):
        self.model = model
        self.device = next(model.parameters()).device
        self.pad_id = pad_id
        self.window = window
        self.horizon = horizon
        self.batch_tokens = batch_tokens
        self.weights = loss_weights(horizon)
        self.keep_arg = "logits_to_keep" in inspect.signature(model.forward).parameters
        # Sharing a row across positions needs logits at any position of it: through the body and head.
        self.split = body_and_head(model) if share_rows else None
        self.tokens_scored = 0  # real (unpadded) tokens sent through the model
        self.rows_scored = 0
        self.forwards = 0

    def rows(self, unique: list[LossRequest], texts: dict[str, list[int]]) -> list[Row]:
        groups: dict[tuple, list[int]] = defaultdict(list)
        for k, r in enumerate(unique):
            groups[(r.prefix, r.text_key)].append(k)
        rows = []
        for (prefix, key), ks in groups.items():
            text = texts[key]
            single = [build_row(prefix, text, unique[k].position, self.horizon, self.window) for k in ks]
            end = max(unique[k].position + h for k, (_, h) in zip(ks, single))
            if self.split is not None and len(ks) > 1 and len(prefix) + end <= self.window:
                rows.append(Row(list(prefix) + text[:end],
                                [(k, len(prefix) + unique[k].position, h) for k, (_, h) in zip(ks, single)]))
            else:
                rows += [Row(row, [(k, len(row) - h, h)]) for k, (row, h) in zip(ks, single)]
        return rows

    @torch.no_grad()
    def losses(self, requests: list[LossRequest], texts: dict[str, list[int]]) -> dict[LossRequest, float]:
        unique = list(dict.fromkeys(requests))
        rows = self.rows(unique, texts)
        loss = torch.zeros(len(unique), dtype=torch.float64)
        for group in batches_by_budget([len(r.ids) for r in rows], self.batch_tokens):
            width = max(len(rows[g].ids) for g in group)
            ids = torch.full((len(group), width), self.pad_id, dtype=torch.long)
            mask = torch.zeros_like(ids)
            b_idx, t_idx, target, weight, owner = [], [], [], [], []
            for b, g in enumerate(group):
                row = rows[g]
                pad = width - len(row.ids)
                ids[b, pad:] = torch.tensor(row.ids)
                mask[b, pad:] = 1
                self.tokens_scored += len(row.ids)
                self.rows_scored += 1
                for k, first, h in row.targets:
                    for t in range(h):  # x_{i+t} is predicted at the index before it; x_i gets w_0 whatever h is
                        b_idx.append(b)
                        t_idx.append(pad + first + t - 1)
                        target.append(row.ids[first + t])
                        weight.append(self.weights[t])
                        owner.append(k)
            ids, mask = ids.to(self.device), mask.to(self.device)
            position_ids = (mask.cumsum(-1) - 1).clamp(min=0)
            t_idx = torch.tensor(t_idx)
            if self.split is not None:
                body, head = self.split
                hidden = body(input_ids=ids, attention_mask=mask, position_ids=position_ids,
                              use_cache=False).last_hidden_state
                logits = head(hidden[torch.tensor(b_idx, device=self.device), t_idx.to(self.device)])
            else:  # every row ends with its targets: the last horizon + 1 positions hold them
                keep = self.horizon + 1 if self.keep_arg else width
                kwargs = {"logits_to_keep": keep} if self.keep_arg else {}
                out = self.model(input_ids=ids, attention_mask=mask, position_ids=position_ids, use_cache=False,
                                 **kwargs).logits[:, -keep:]
                logits = out[torch.tensor(b_idx, device=self.device), (t_idx - (width - keep)).to(self.device)]
            self.forwards += 1
            logp = torch.log_softmax(logits.float(), dim=-1)  # fp32 whatever the model dtype
            tlogp = logp.gather(-1, torch.tensor(target, device=self.device)[:, None]).squeeze(-1).cpu().double()
            loss.index_add_(0, torch.tensor(owner), -torch.tensor(weight, dtype=torch.float64) * tlogp)
        return {r: float(loss[k]) for k, r in enumerate(unique)}
