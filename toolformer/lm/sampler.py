"""The paper's sampler: score positions with P(x), then sample calls.

For one tool with few-shot prompt P(x) = preamble + x + tail (preamble and tail are the
prompt's text before and after ``{text}``):

* position scoring: p_i = p_M(call-start | P(x), x_1..x_{i−1}) for every i,
  from one forward pass per document over [tail-terminated P(x), x];
* call sampling: from [P(x), x_1..x_{i−1}, call-start] sample up to m
  continuations that stop at the call-end marker.

Without a prompt (``sample.prompt: none``, a model that already writes calls, e.g.
after a first round of fine-tuning) P(x) = x: p_i comes from [BOS, x] alone, one
sampler serves every tool, a sampled call counts for the tool it names, and
sampling also stops at the result marker (the input is complete there).

The preamble is identical for every document, so its key/value cache is computed
once per tool and expanded across each batch. Rows are left-padded (positions
given explicitly) so the logits needed are always the last ones.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import torch

from toolformer.lm.modeling import cache_kwarg, last_logits, logit_token_budget, output_cache
from toolformer.lm.textpos import TokenizedText, marker_token_ids, vocab_ids
from toolformer.lm.tokenizer import encode_piece
from toolformer.tools.calls import CallStyle, parse_calls


@dataclass
class PromptParts:
    preamble_ids: list[int]  # [BOS] + tokens(prompt before {text})
    tail: str  # prompt after {text}, e.g. "\nOutput:"


def prompt_parts(tokenizer, prompt: str, bos: list[int]) -> PromptParts:
    preamble, _, tail = prompt.partition("{text}")
    return PromptParts(bos + tokenizer(preamble, add_special_tokens=False)["input_ids"], tail)


class PrefixCache:
    """Key/value cache of a fixed prefix, computed once, expanded per batch."""

    def __init__(self, model, prefix_ids: list[int]):
        self.length = len(prefix_ids)
        device = next(model.parameters()).device
        with torch.no_grad():
            out = model(torch.tensor([prefix_ids], device=device), use_cache=True)
        self.cache = output_cache(out)

    def expand(self, batch: int):
        c = copy.deepcopy(self.cache)
        if batch > 1:
            c.batch_repeat_interleave(batch)
        return c


def _left_pad(rows: list[list[int]], pad_id: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for b, r in enumerate(rows):
        ids[b, width - len(r) :] = torch.tensor(r, dtype=torch.long)
        mask[b, width - len(r) :] = 1
    return ids.to(device), mask.to(device)


def _forward(model, ids, new_mask, past_mask, cache, offset, keep: int = 0):
    """One forward over left-padded new tokens after cached ones.

    new_mask: (B, T) 1 for real new tokens; past_mask: (B, P) for the cached
    tokens (prefix included); offset: (B,) position of each row's first new
    real token. Positions count real tokens only, so padding never shifts them.
    keep > 0: logits of the last ``keep`` positions only, where the model can (the rest are never read).
    """
    position_ids = offset.unsqueeze(1) + (new_mask.cumsum(-1) - 1).clamp(min=0)  # (B, T)
    attention_mask = torch.cat([past_mask, new_mask], dim=1)  # (B, P + T)
    kwargs = {cache_kwarg(model): cache} if cache is not None else {}
    kwargs |= last_logits(model, keep)
    return model(input_ids=ids, attention_mask=attention_mask, position_ids=position_ids, use_cache=True, **kwargs)


def batches_by_budget(lengths: list[int], budget: int, rows: list[int] | None = None) -> list[list[int]]:
    """Indices grouped so that rows × longest row ≤ budget (sorted by length).
    Item k stands for ``rows[k]`` rows of ``lengths[k]`` tokens (default one)."""
    order = sorted(range(len(lengths)), key=lambda k: lengths[k])
    groups: list[list[int]] = []
    cur: list[int] = []
    longest, n = 0, 0
    for k in order:
        size = rows[k] if rows is not None else 1
        longest_new = max(longest, lengths[k])
        if cur and longest_new * (n + size) > budget:
            groups.append(cur)
            cur, longest_new, n = [], lengths[k], 0
        cur.append(k)
        longest, n = longest_new, n + size
    if cur:
        groups.append(cur)
    return groups


class Sampler:
    """Position scoring and call sampling for one tool (a few-shot prompt), or for every tool at once
    (``prompt=None``: the text alone, for a model that writes calls by itself)."""

    def __init__(self, model, tokenizer, style: CallStyle, prompt: str | None, bos: list[int],
                 reuse_cache: bool = True):
        self.model, self.tok, self.style = model, tokenizer, style
        self.device = next(model.parameters()).device
        self.free = prompt is None
        if self.free and not bos:
            raise ValueError("sample.prompt=none: the tokenizer has neither BOS nor EOS, so nothing comes before the "
                             "first position of a document to score it from")
        self.parts = PromptParts(list(bos), "") if prompt is None else prompt_parts(tokenizer, prompt, bos)
        # without a prompt each row is [BOS] + x: p_1 needs the logits at BOS, so BOS is not cached apart
        self.prefix = PrefixCache(model, self.parts.preamble_ids) if reuse_cache and not self.free else None
        self.start_ids = marker_token_ids(tokenizer, style.start)
        self.end_ids = set(i for i in vocab_ids(tokenizer) if style.end in tokenizer.decode([i]))
        # Without a prompt the model is one that writes e(c, r) itself: its call input ends at the arrow (the
        # result it would guess is not wanted), so the arrow stops sampling too.
        self.stop_ids = self.end_ids | (set(i for i in vocab_ids(tokenizer)
                                            if any(a in tokenizer.decode([i]) for a in style.arrows))
                                        if self.free else set())
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0

    def prompt_rows(self, docs: list[tuple[str, TokenizedText]]) -> list[tuple[list[int], int]]:
        """(row ids after the preamble, index where x_1 starts) for each document."""
        rows = []
        for text, tt in docs:
            preamble = [] if self.prefix else self.parts.preamble_ids
            copy_ids = [] if self.free else encode_piece(self.tok, text + self.parts.tail)  # after the preamble
            rows.append((preamble + copy_ids + tt.ids, len(preamble) + len(copy_ids)))
        return rows

    @torch.no_grad()
    def score_positions(self, docs: list[tuple[str, TokenizedText]], batch_tokens: int) -> list[list[float]]:
        """p_i for every position of every document: one forward per document."""
        rows = self.prompt_rows(docs)
        out: list[list[float]] = [[] for _ in docs]
        start_ids = torch.tensor(self.start_ids, device=self.device)
        # A vocabulary of 262,144 rows would make 16 GiB of logits of a 16,384-token budget: fewer tokens then.
        budget = logit_token_budget(self.model, batch_tokens)
        for group in batches_by_budget([len(r) for r, _ in rows], budget):
            ids, mask = _left_pad([rows[k][0] for k in group], self.pad_id, self.device)
            n_max = max(len(docs[k][1].ids) for k in group)
            cache, past, offset = self._start_batch(len(group))
            step = _forward(self.model, ids, mask, past, cache, offset, keep=n_max + 1)
            logits = step.logits[:, -(n_max + 1) : -1]  # (B, n_max, V)
            p = torch.softmax(logits.float(), dim=-1)[..., start_ids].sum(-1)  # (B, n_max)
            for b, k in enumerate(group):
                n = len(docs[k][1].ids)
                out[k] = p[b, n_max - n :].tolist()
        return out

    @torch.no_grad()
    def sample_calls(self, docs: list[tuple[str, TokenizedText]], positions: list[list[int]], num_calls: int,
                     max_new_tokens: int, temperature: float, tool: str, generator: torch.Generator,
                     batch_tokens: int) -> list[list[tuple[int, str]]]:
        """Up to ``num_calls`` distinct closed call inputs of ``tool`` per kept position:
        returns, per document, (position, input) pairs."""
        found = self.sample_any(docs, [[(i, num_calls) for i in ps] for ps in positions], max_new_tokens,
                                temperature, {tool}, generator, batch_tokens)
        return [[(i, tool_input) for i, _, tool_input in calls] for calls in found]

    @torch.no_grad()
    def sample_any(self, docs: list[tuple[str, TokenizedText]], positions: list[list[tuple[int, int]]],
                   max_new_tokens: int, temperature: float, tools: set[str], generator: torch.Generator,
                   batch_tokens: int) -> list[list[tuple[int, str, str]]]:
        """For each (position, m) of each document, m samples from the call-start token on; returns, per
        document, the distinct closed calls of a tool in ``tools`` as (position, tool, input)."""
        rows = self.prompt_rows(docs)
        pieces = []  # (doc index, [(position, samples)]): a document's samples, split to fit the token budget
        for k, pos_list in enumerate(positions):
            cap = max(1, batch_tokens // (len(rows[k][0]) + max_new_tokens))
            plan, n = [], 0
            for i, m in pos_list:
                while m > 0:
                    take = min(m, cap - n)
                    plan.append((i, take))
                    n, m = n + take, m - take
                    if n == cap:
                        pieces.append((k, plan))
                        plan, n = [], 0
            if plan:
                pieces.append((k, plan))
        results: list[list[tuple[int, str, str]]] = [[] for _ in docs]
        seen: set[tuple[int, int, str, str]] = set()
        lengths = [len(rows[k][0]) + max_new_tokens for k, _ in pieces]
        for group in batches_by_budget(lengths, batch_tokens, [sum(m for _, m in plan) for _, plan in pieces]):
            ks = [pieces[g][0] for g in group]
            sampled = self.sample_rows([rows[k] for k in ks], [pieces[g][1] for g in group],
                                        [docs[k][1].ids for k in ks], max_new_tokens, temperature, generator)
            for k, samples in zip(ks, sampled):
                for i, tokens in samples:
                    calls = parse_calls(self.style.start + self.call_text(tokens), self.style, tools)
                    if not calls or not calls[0].closed or calls[0].start != 0 \
                            or (calls[0].call.result is not None and not self.free):
                        continue  # never closed, not a call of these tools, or (with a prompt) a call with a result
                    key = (k, i, calls[0].call.tool, calls[0].call.input)
                    if key not in seen:
                        seen.add(key)
                        results[k].append((i, calls[0].call.tool, calls[0].call.input))
        return results

    def _start_token(self, next_token: int) -> int:
        """The call-start token as the tokenizer writes it before ``next_token``:
        `` [`` where x_i carries a leading space, ``[`` where it does not."""
        spaced = self.tok.decode([next_token]).startswith(" ")
        for t in self.start_ids:
            if self.tok.decode([t]).startswith(" ") == spaced:
                return t
        return self.start_ids[0]

    def _start_batch(self, batch: int):
        """(cache, past mask, offset) for a batch starting right after the preamble."""
        if self.prefix is None:
            return None, torch.zeros((batch, 0), dtype=torch.long, device=self.device), \
                torch.zeros(batch, dtype=torch.long, device=self.device)
        past = torch.ones((batch, self.prefix.length), dtype=torch.long, device=self.device)
        return self.prefix.expand(batch), past, torch.full((batch,), self.prefix.length, device=self.device)

    def sample_rows(self, rows: list[tuple[list[int], int]], plans: list[list[tuple[int, int]]],
                    text_ids: list[list[int]], max_new_tokens: int, temperature: float,
                    generator: torch.Generator) -> list[list[tuple[int, list[int]]]]:
        """m samples after the call-start token at each (i, m) of ``plans``, per document row: each document
        runs once; its key/value cache is copied per sample and masked after x_{i-1} (the same as the prefix
        alone), and a sample leaves the batch when it stops. Returns (i, sampled tokens) per sample."""
        ids, mask = _left_pad([r for r, _ in rows], self.pad_id, self.device)
        width = ids.shape[1]
        cache, past, offset = self._start_batch(len(rows))
        out = _forward(self.model, ids, mask, past, cache, offset, keep=1)  # its cache is what is read
        cache, past = output_cache(out), torch.cat([past, mask], dim=1)
        doc_of, cut, before, first, where = [], [], [], [], []
        for d, ((row, x0), plan, x) in enumerate(zip(rows, plans, text_ids)):
            for i, m in plan:
                doc_of += [d] * m
                cut += [past.shape[1] - width + (width - len(row)) + x0 + i] * m  # first masked column
                before += [x0 + i] * m  # the row's tokens before x_i
                first += [self._start_token(x[i])] * m
                where += [(d, i)] * m
        index = torch.tensor(doc_of, device=self.device)
        cache.reorder_cache(index)
        columns = torch.arange(past.shape[1], device=self.device).unsqueeze(0)
        past = past[index] * (columns < torch.tensor(cut, device=self.device).unsqueeze(1)).long()
        offset = offset[index] + torch.tensor(before, device=self.device)
        one = torch.ones((len(index), 1), dtype=torch.long, device=self.device)
        step = _forward(self.model, torch.tensor(first, device=self.device).unsqueeze(1), one, past, cache, offset)
        drawn = self._draw(output_cache(step), torch.cat([past, one], dim=1), offset + 1, step.logits[:, -1],
                           max_new_tokens, temperature, generator)
        out_docs: list[list[tuple[int, list[int]]]] = [[] for _ in rows]
        for (d, i), tokens in zip(where, drawn):
            out_docs[d].append((i, tokens))
        return out_docs

    def _draw(self, cache, past, offset, logits, max_new_tokens: int, temperature: float,
              generator: torch.Generator) -> list[list[int]]:
        """Sample each row from ``logits`` on until a stop token (kept) or ``max_new_tokens``; a row leaves
        the batch when it stops."""
        B = logits.shape[0]
        generated = torch.full((B, max_new_tokens), self.pad_id, dtype=torch.long)
        active = torch.arange(B)  # the samples still running, as rows of `generated`
        stop_ids = torch.tensor(sorted(self.stop_ids), dtype=torch.long)
        for t in range(max_new_tokens):
            probs = torch.softmax(logits.float() / max(temperature, 1e-5), dim=-1).cpu()
            nxt = torch.multinomial(probs, 1, generator=generator).squeeze(1)  # (A,)
            generated[active, t] = nxt
            going = ~torch.isin(nxt, stop_ids)
            if not bool(going.any()) or t == max_new_tokens - 1:
                break
            if not bool(going.all()):  # stopped samples leave the batch
                keep = going.nonzero().squeeze(1)
                active, nxt = active[keep], nxt[keep]
                keep = keep.to(self.device)
                cache.reorder_cache(keep)
                past, offset = past[keep], offset[keep]
            one = torch.ones((len(active), 1), dtype=torch.long, device=self.device)
            step = _forward(self.model, nxt.unsqueeze(1).to(self.device), one, past, cache, offset)
            cache, past, offset = output_cache(step), torch.cat([past, one], dim=1), offset + 1
            logits = step.logits[:, -1]
        out = []
        for b in range(B):
            toks = generated[b].tolist()
            cut = next((j + 1 for j, x in enumerate(toks) if x in self.stop_ids), len(toks))
            out.append(toks[:cut])
        return out

    def call_text(self, tokens: list[int]) -> str:
        """The sampled tokens after the call-start token as call text closed by the end marker; "" when no stop
        token came (unclosed samples are dropped). Stopped at the arrow, the input is complete: closed there."""
        if not tokens or tokens[-1] not in self.stop_ids:
            return ""
        text = self.tok.decode(tokens)
        if tokens[-1] not in self.end_ids:
            text = text[: max(text.rfind(a) for a in self.style.arrows)].rstrip() + self.style.end
        return text
