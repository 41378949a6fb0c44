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
* requests that declare a shared prefix (``shared``: the first tokens of the
  prefix, e.g. BOS + ``[Calculator(3 + 4) →`` common to e(c, ε) and e(c, r))
  run that shared prefix once and continue each row from its key/value cache;
* rows are grouped by length, batched by a token budget and left-padded; the
  vocabulary projection runs only on the positions that predict weighted
  tokens (the model body's last hidden states are gathered first), so no
  (rows × length × vocabulary) tensor is ever made.

"The same" is to float rounding, not bit for bit: a loss depends on how its row
is batched (its padding, the rows beside it, a shared row or prefix cache) and
on the CPU kernel (AVX-512, AVX2, ``ATEN_CPU_CAPABILITY=default``) and thread
count, which sum in other orders; a loss moves in its 6th-7th digit (the tests
hold it to 1e-5 of the one-row reference, ``tests/reference.py``). The same
requests in the same batches, on one machine with one thread count, give the
same bits (the README's determinism).
"""

from __future__ import annotations

import inspect
from collections import defaultdict
from dataclasses import dataclass

import torch

from toolformer.lm.losses import add_weighted_losses, loss_weights
from toolformer.lm.modeling import cache_kwarg, output_cache
from toolformer.lm.sampler import _left_pad, batches_by_budget

MIN_SHARED = 4  # shorter shared prefixes are not worth a second forward


@dataclass(frozen=True)
class LossRequest:
    prefix: tuple[int, ...]  # [BOS] + tokens(z)
    text_key: str  # identifies the text (doc_id)
    position: int  # token index i of x_i
    shared: int = 0  # leading prefix tokens other requests may share (their key/value cache is reused); 0 = none


def build_row(prefix: tuple[int, ...], text_ids: list[int], position: int, horizon: int,
              window: int) -> tuple[list[int], int]:
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
class ScoringSequence:
    ids: list[int]
    targets: list[tuple[int, int, int]]  # (request index, row index of its first weighted token, h)
    shared: int = 0  # leading tokens that may come from a shared prefix's cache (< len(prefix): no target there)


def body_and_lm_head(model):
    """(body, lm_head) such that ``lm_head(body(...).last_hidden_state)`` are the
    model's logits, or None when the model does not split that way (checked
    on a few tokens, so a model with extra logit scaling is not mis-scored)."""
    lm_head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    body = getattr(model, "base_model", None)
    if lm_head is None or body is None or body is model:
        return None
    device = next(model.parameters()).device
    ids = torch.arange(3, 11, device=device).clamp(max=model.config.vocab_size - 1)[None]
    with torch.no_grad():
        want = model(input_ids=ids, use_cache=False).logits.float()
        got = lm_head(body(input_ids=ids, use_cache=False).last_hidden_state).float()
    if got.shape != want.shape or not torch.allclose(got, want, rtol=1e-3, atol=1e-3 * float(want.abs().max())):
        return None
    return body, lm_head


class LossScorer:
    """Computes L_i(z) for many requests on one model."""

    def __init__(self, model, pad_id: int, window: int, horizon: int = 5, batch_tokens: int = 16384,
                 share_rows: bool = True, share_prefixes: bool = True):
        self.model = model
        self.device = next(model.parameters()).device
        self.pad_id = pad_id
        self.window = window
        self.horizon = horizon
        self.batch_tokens = batch_tokens
        self.weights = loss_weights(horizon)
        self.keep_arg = "logits_to_keep" in inspect.signature(model.forward).parameters
        # Sharing a row across positions needs logits at any position of it: through the body and the LM head.
        self.split = body_and_lm_head(model) if share_rows else None
        self.share_prefixes = share_prefixes and self.split is not None
        self.tokens_scored = 0  # real (unpadded) tokens sent through the model
        self.tokens_computed = 0  # the same with padding
        self.rows_scored = 0
        self.forwards = 0

    def rows(self, unique: list[LossRequest], texts: dict[str, list[int]]) -> list[ScoringSequence]:
        groups: dict[tuple, list[int]] = defaultdict(list)
        for k, r in enumerate(unique):
            groups[(r.prefix, r.text_key)].append(k)
        rows = []
        for (prefix, key), ks in groups.items():
            text = texts[key]
            single = [build_row(prefix, text, unique[k].position, self.horizon, self.window) for k in ks]
            end = max(unique[k].position + h for k, (_, h) in zip(ks, single))
            shared = min(max(unique[k].shared for k in ks), len(prefix) - 1) if self.share_prefixes else 0
            if self.split is not None and len(ks) > 1 and len(prefix) + end <= self.window:
                rows.append(ScoringSequence(list(prefix) + text[:end],
                                [(k, len(prefix) + unique[k].position, h) for k, (_, h) in zip(ks, single)], shared))
            else:
                rows += [ScoringSequence(row, [(k, len(row) - h, h)], shared) for k, (row, h) in zip(ks, single)]
        return rows

    def plan(self, rows: list[ScoringSequence]) -> tuple[list[list[int]], list[tuple[list[int], list[list[int]]]]]:
        """Batches of plain rows, and batches of (shared prefixes, rows continuing
        each): rows whose first ``shared`` tokens are the same as another's."""
        prefixes: dict[tuple[int, ...], list[int]] = defaultdict(list)
        for g, row in enumerate(rows):
            if row.shared >= MIN_SHARED:
                prefixes[tuple(row.ids[: row.shared])].append(g)
        shared_groups = []
        for gs in prefixes.values():  # a group larger than the budget is split; each part runs its prefix
            per_batch = max(2, self.batch_tokens // max(len(rows[g].ids) for g in gs))
            parts = [gs[k : k + per_batch] for k in range(0, len(gs), per_batch)]
            shared_groups += [part for part in parts if len(part) > 1]
        in_shared = {g for gs in shared_groups for g in gs}
        plain = [g for g in range(len(rows)) if g not in in_shared]
        plain_batches = [[plain[k] for k in b] for b in batches_by_budget([len(rows[g].ids) for g in plain],
                                                                          self.batch_tokens)]
        # A batch holds whole prefix groups within the budget, each counted as its rows at its longest row.
        prefix_batches = [[shared_groups[k] for k in b] for b in batches_by_budget(
            [max(len(rows[g].ids) for g in gs) for gs in shared_groups], self.batch_tokens,
            [len(gs) for gs in shared_groups])]
        return plain_batches, [([gs[0] for gs in b], b) for b in prefix_batches]

    @torch.no_grad()
    def losses(self, requests: list[LossRequest], texts: dict[str, list[int]]) -> dict[LossRequest, float]:
        unique = list(dict.fromkeys(requests))
        rows = self.rows(unique, texts)
        loss = torch.zeros(len(unique), dtype=torch.float64)
        plain_batches, prefix_batches = self.plan(rows)
        for group in plain_batches:
            self._score(rows, group, loss)
        for prefixes, groups in prefix_batches:
            self._score_shared(rows, prefixes, groups, loss)
        return {r: float(loss[k]) for k, r in enumerate(unique)}

    def _targets(self, rows: list[ScoringSequence], group: list[int], skip: list[int], pads: list[int]):
        """Flat lists of (row in batch, index of the position predicting it, target token, its distance t from
        x_i, request)."""
        b_idx, t_idx, target, step, owner = [], [], [], [], []
        for b, g in enumerate(group):
            row = rows[g]
            for k, first, h in row.targets:
                for t in range(h):  # x_{i+t} is predicted at the index before it; x_i gets w_0 whatever h is
                    b_idx.append(b)
                    t_idx.append(pads[b] + first + t - 1 - skip[b])
                    target.append(row.ids[first + t])
                    step.append(t)
                    owner.append(k)
        return b_idx, t_idx, target, step, owner

    def _accumulate(self, logits: torch.Tensor, target: list[int], step: list[int], owner: list[int],
                    loss: torch.Tensor) -> None:
        logp = torch.log_softmax(logits.float(), dim=-1)  # fp32 whatever the model dtype
        tlogp = logp.gather(-1, torch.tensor(target, device=self.device)[:, None]).squeeze(-1).cpu().double()
        add_weighted_losses(loss, owner, step, tlogp, self.weights)
        self.forwards += 1

    def _score(self, rows: list[ScoringSequence], group: list[int], loss: torch.Tensor) -> None:
        seqs = [rows[g].ids for g in group]
        ids, mask = _left_pad(seqs, self.pad_id, self.device)
        pads = [ids.shape[1] - len(x) for x in seqs]
        self.tokens_scored += sum(map(len, seqs))
        self.tokens_computed += ids.numel()
        self.rows_scored += len(seqs)
        b_idx, t_idx, target, step, owner = self._targets(rows, group, [0] * len(group), pads)
        position_ids = (mask.cumsum(-1) - 1).clamp(min=0)
        b_idx, t_idx = torch.tensor(b_idx, device=self.device), torch.tensor(t_idx)
        width = ids.shape[1]
        if self.split is not None:
            body, lm_head = self.split
            hidden = body(input_ids=ids, attention_mask=mask, position_ids=position_ids,
                          use_cache=False).last_hidden_state
            logits = lm_head(hidden[b_idx, t_idx.to(self.device)])
        else:  # every row ends with its targets: the last horizon + 1 positions hold them
            keep = self.horizon + 1 if self.keep_arg else width
            kwargs = {"logits_to_keep": keep} if self.keep_arg else {}
            out = self.model(input_ids=ids, attention_mask=mask, position_ids=position_ids, use_cache=False,
                             **kwargs).logits[:, -keep:]
            logits = out[b_idx, (t_idx - (width - keep)).to(self.device)]
        self._accumulate(logits, target, step, owner, loss)

    def _score_shared(self, rows: list[ScoringSequence], prefixes: list[int], groups: list[list[int]],
                      loss: torch.Tensor) -> None:
        """Run each shared prefix once (use_cache), then every row's rest after its prefix's cache."""
        assert self.split is not None  # share_prefixes needs the split model
        body, lm_head = self.split
        prefix_seqs = [rows[g].ids[: rows[g].shared] for g in prefixes]
        h_ids, h_mask = _left_pad(prefix_seqs, self.pad_id, self.device)
        out = body(input_ids=h_ids, attention_mask=h_mask, position_ids=(h_mask.cumsum(-1) - 1).clamp(min=0),
                   use_cache=True)
        cache = output_cache(out)
        members = [g for gs in groups for g in gs]
        which = torch.tensor([h for h, gs in enumerate(groups) for _ in gs], device=self.device)
        cache.batch_select_indices(which)  # one copy of its prefix's keys/values per row
        tails = [rows[g].ids[rows[g].shared :] for g in members]
        t_ids, t_mask = _left_pad(tails, self.pad_id, self.device)
        offset = torch.tensor([len(prefix_seqs[h]) for h, gs in enumerate(groups) for _ in gs], device=self.device)
        position_ids = offset[:, None] + (t_mask.cumsum(-1) - 1).clamp(min=0)
        attention_mask = torch.cat([h_mask[which], t_mask], dim=1)
        hidden = body(input_ids=t_ids, attention_mask=attention_mask, position_ids=position_ids, use_cache=True,
                      **{cache_kwarg(body): cache}).last_hidden_state
        self.tokens_scored += sum(map(len, prefix_seqs)) + sum(map(len, tails))
        self.tokens_computed += h_ids.numel() + t_ids.numel()
        self.rows_scored += len(members)
        pads = [t_ids.shape[1] - len(t) for t in tails]
        b_idx, t_idx, target, step, owner = self._targets(rows, members, [rows[g].shared for g in members], pads)
        logits = lm_head(hidden[torch.tensor(b_idx, device=self.device), torch.tensor(t_idx, device=self.device)])
        self._accumulate(logits, target, step, owner, loss)

