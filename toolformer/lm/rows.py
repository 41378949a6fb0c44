"""Packed token rows and their losses: what training, the dev perplexity and the evaluate stage's held-out
perplexity share.

* :func:`pack_sequences` turns documents into rows of ``seq_len`` tokens, each document between
  :func:`~toolformer.lm.modeling.document_start` and :func:`~toolformer.lm.modeling.document_end`;
* :func:`batch_inputs` makes model inputs of rows (padding masked, labels kept);
* :func:`row_nll` / :func:`row_nlls` score rows, the latter also with given tokens taken out of every
  next-token distribution (perplexity "with tools disabled");
* :func:`evaluate_perplexity` is the dev perplexity, split across processes.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator

import numpy as np
import torch
from tqdm import tqdm

from toolformer.lm.modeling import document_end, document_start

# Fills the padded tail of the last packed row; ignored by the loss and masked
# from attention (any real id is substituted before the forward pass).
IGNORE_INDEX = -100


def pack_sequences(tokenizer, texts: Iterable[str], seq_len: int, batch: int = 1000,
                   whole_documents: bool = False) -> torch.Tensor:
    """Concatenate documents, each as ``document_start + text + document_end`` (BOS … EOS; EOS … with one
    token between documents where EOS starts them), and cut the stream into rows of ``seq_len`` tokens.

    Texts are tokenized with ``add_special_tokens=False``. By default a
    document may span two rows. With ``whole_documents`` a document that fits
    in a row never straddles two: a row is closed (padded) when the next
    document does not fit, and a longer document starts a fresh row. This keeps
    a call and the text that uses its result in one row, which a small model
    needs to learn copying from context. Padding (and the last, partial row) is
    ``IGNORE_INDEX``; :func:`batch_inputs` turns it into an attention mask and
    ignored labels. Returns (N, seq_len) int64.
    """
    start, end = document_start(tokenizer), document_end(tokenizer)
    docs = (np.asarray([*start, *ids, *end], dtype=np.int64) for ids in _encoded(tokenizer, list(texts), batch))
    return _pack(docs, seq_len, whole_documents, IGNORE_INDEX)


def _encoded(tokenizer, texts: list[str], batch: int) -> Iterator[list[int]]:
    """Each text's token ids (no special tokens)."""
    for i in tqdm(range(0, len(texts), batch), desc="pack", unit="batch", disable=len(texts) <= batch):
        yield from tokenizer(texts[i : i + batch], add_special_tokens=False)["input_ids"]


def _pack(docs: Iterable[np.ndarray], seq_len: int, whole_documents: bool, fill) -> torch.Tensor:
    """Documents (each with its separator) into rows of ``seq_len``, ``fill`` after the last one and, with
    ``whole_documents``, where a row is closed because the next document does not fit."""
    if seq_len < 2:
        raise ValueError(f"seq_len {seq_len}: need at least 2 tokens per row")
    chunks: list[np.ndarray] = []  # 8 bytes a token, not a Python list
    used = 0  # tokens in the current row (whole_documents)
    for doc in docs:
        if whole_documents and used and used + len(doc) > seq_len:
            chunks.append(np.full(seq_len - used, fill, dtype=doc.dtype))  # close the row
            used = 0
        chunks.append(doc)
        used = (used + len(doc)) % seq_len
    stream = torch.from_numpy(np.concatenate(chunks)) if chunks else torch.zeros(0, dtype=torch.long)  # (S,)
    n_rows = math.ceil(len(stream) / seq_len)
    rows = torch.full((n_rows * seq_len,), fill, dtype=stream.dtype)  # (N * T,)
    rows[: len(stream)] = stream
    return rows.view(n_rows, seq_len)  # (N, T)


def batch_inputs(rows: torch.Tensor, pad_id: int = 0) -> dict[str, torch.Tensor]:
    """Model inputs for packed rows (B, T): padding becomes ``pad_id`` with
    attention 0, and labels keep ``IGNORE_INDEX`` there."""
    pad = rows == IGNORE_INDEX  # (B, T)
    return {
        "input_ids": rows.masked_fill(pad, pad_id),  # (B, T)
        "attention_mask": (~pad).long(),  # (B, T)
        "labels": rows,  # (B, T); the model shifts them by one
    }


def row_nll(model, rows: torch.Tensor, pad_id: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    """Summed negative log-likelihood of the predicted tokens of each packed row
    (B, T) and how many tokens were predicted, both (B,) float64; padding
    (``IGNORE_INDEX``) is neither fed nor counted. Shared by the dev perplexity
    of training and the held-out perplexity of the evaluate stage."""
    nll, _without, counted = row_nlls(model, rows, pad_id, device, ())
    return nll, counted


def row_nlls(model, rows: torch.Tensor, pad_id: int, device,
             without: list[int] | tuple[int, ...]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """:func:`row_nll`, and the same NLL with the tokens ``without`` taken out of every next-token distribution
    (the rest renormalised), from one forward: each (B,) float64, then the token counts. A target that is
    itself one of ``without`` keeps its plain log-likelihood (the text has it; nothing else could score it)."""
    batch = {k: v.to(device) for k, v in batch_inputs(rows, pad_id).items()}
    logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], use_cache=False).logits
    logits = logits[:, :-1].float()  # (B, T-1, V)
    targets = batch["labels"][:, 1:]  # (B, T-1)
    counted = targets != IGNORE_INDEX  # (B, T-1)
    safe = targets.masked_fill(~counted, 0)  # (B, T-1)
    log_z = logits.logsumexp(-1)  # (B, T-1)
    token_nll = (log_z - logits.gather(-1, safe[..., None]).squeeze(-1)).masked_fill(~counted, 0.0)  # (B, T-1)
    nll_without = token_nll
    if len(without):
        ids = torch.tensor(list(without), device=logits.device)  # (M,)
        log_removed = logits[..., ids].logsumexp(-1)  # (B, T-1)
        # log(Z - Z_removed) = log Z + log(1 - Z_removed / Z); clamped below 1 so a certain marker stays finite
        log_rest = log_z + torch.log1p(-(log_removed - log_z).exp().clamp(max=1 - 1e-7))  # (B, T-1)
        renormalised = token_nll - log_z + log_rest  # (B, T-1)
        is_removed = torch.isin(safe, ids)  # (B, T-1)
        nll_without = torch.where(is_removed | ~counted, token_nll, renormalised)
    return token_nll.double().sum(1), nll_without.double().sum(1), counted.double().sum(1)


@torch.no_grad()
def evaluate_perplexity(model, rows: torch.Tensor, micro_batch_size: int, accelerator, pad_id: int = 0) -> dict:
    """Token-level dev loss and perplexity over ``rows`` (N, T), split across
    processes. Every process runs the same number of forwards (short shards
    repeat a row with weight 0) so wrapped models stay in step."""
    model.eval()
    world, rank = accelerator.num_processes, accelerator.process_index
    per_rank = math.ceil(len(rows) / world)
    idx = torch.arange(rank * per_rank, (rank + 1) * per_rank)  # (P,)
    weight = (idx < len(rows)).float()  # (P,) 0 for the padding rows
    idx = idx.clamp(max=len(rows) - 1)
    nll = torch.zeros((), dtype=torch.float64, device=accelerator.device)
    tokens = torch.zeros((), dtype=torch.float64, device=accelerator.device)
    for s in range(0, per_rank, micro_batch_size):
        part_nll, part_tokens = row_nll(model, rows[idx[s : s + micro_batch_size]], pad_id, accelerator.device)
        w = weight[s : s + micro_batch_size].to(accelerator.device)  # (B,)
        nll += (part_nll * w).sum()
        tokens += (part_tokens * w).sum()
    nll, tokens = accelerator.reduce(nll, "sum"), accelerator.reduce(tokens, "sum")
    model.train()
    loss = (nll / tokens.clamp(min=1)).item()
    return {"dev_loss": round(loss, 6), "dev_perplexity": round(math.exp(min(loss, 50.0)), 4),
            "dev_tokens": int(tokens.item())}
