"""Generation with tool calls: the paper's inference loop.

Decoding is greedy (or sampled), one token per step for every prompt of a
batch, with the key/value cache. The paper's rules (section 4.1):

* a call starts whenever the call-start token is among the ``top_k_trigger``
  most likely tokens at a step (k = 10), even if it is not the most likely;
* when the model writes the result marker ``→`` inside an open call, decoding
  of that prompt pauses: the call is parsed, executed in the
  :class:`~toolformer.tools.sandbox.Sandbox`, and ``" " + result + call-end`` is
  inserted, then decoding continues after it;
* at most ``max_calls`` calls per input (1); after that, and always in
  "Toolformer (disabled)" mode, p(call-start) is set to 0; so too right
  after a call's result, until the model has written a token of text, not
  only spaces (with
  ``max_calls`` > 1: calls never touch in the fine-tuning data, and a second
  call started at once would replace the answer the first one gave).

Which tokens are call-start tokens: every vocabulary token whose decoded text,
stripped of leading spaces, equals the style's call-start marker. With a BPE
vocabulary in the plain style that is both ``[`` and `` [`` (a space belongs
to the piece after it). The result marker is recognised on the decoded text
of the open call, so ``→``, `` →``, ``->`` and arrows that a byte-level
vocabulary splits over several tokens all count.

Inserted tokens are fed one per step through the same batched loop (a queue
of forced tokens per prompt), so every row of the batch stays in step and one
left-padded cache serves the whole batch. ``max_new_tokens`` counts the
tokens the model chooses; inserted result tokens come on top.

A malformed call never stops decoding: an unparseable call, an unknown tool
or a tool error is recorded in ``calls`` with its error and closed without a
result (``[tool(input) →]``, the paper's e(c, ε)); a call the model closes
without ``→`` is recorded (error ``no_result_marker``) but not executed. In the
plain style a ``[`` that turns out not to start ``Name(`` (e.g. ``[1]``) is
ordinary text and does not count against ``max_calls``.

With ``constrained=True`` the tokens of an open call are masked so that every
call is well formed (an enabled tool, an input its grammar accepts, closed by
the result marker), and a call the token budget cuts is closed and run when
its input is complete: see :mod:`toolformer.lm.constrain`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import torch

from toolformer.lm.constrain import MAX_INPUT_CHARS, call_grammar
from toolformer.lm.modeling import cache_kwarg, document_start, last_logits, model_window, output_cache
from toolformer.lm.textpos import marker_token_ids
from toolformer.lm.tokenizer import encode_piece
from toolformer.tools.calls import CallStyle, parse_calls, strip_calls

# A prefix that can still become `Name(...`; anything else after `[` is text.
_CALL_PREFIX = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*(\(.*)?\Z|\Z", re.S)  # dots: MCP tools (`words.lookup`)
# Tokens reserved per allowed call for its inserted result when the prompt is cut to the window, at most a quarter
# of the room the new tokens leave: in a small window, room for results that may never come must not cut the prompt.
RESULT_TOKENS = 64


@dataclass
class Generation:
    prompt: str
    """The prompt as given (without BOS)."""
    text: str
    """The generated continuation, calls and inserted results included."""
    calls: list[dict] = field(default_factory=list)
    """Calls made: {"tool", "input", "result", "error"} in order."""
    text_without_calls: str = ""
    """``text`` with every call (and the separator after it) removed."""
    prompt_tokens_cut: int = 0
    """Tokens cut from the start of a prompt too long for the window (0: the whole prompt was read)."""


@dataclass
class DecodeState:
    """Decoding state of one prompt."""

    date: str | None
    index: int = 0  # the prompt's index in the call of generate_with_tools
    new_ids: list[int] = field(default_factory=list)  # generated + inserted tokens
    forced: list[int] = field(default_factory=list)  # tokens still to insert, fed one per step
    chosen: int = 0  # tokens the model chose (counts against max_new_tokens)
    opened: int = 0  # calls opened so far
    after_call: bool = False  # a call just closed: no call starts before the model writes a token of text
    call_at: int | None = None  # index in new_ids of the open call's start token
    calls: list[dict] = field(default_factory=list)
    done: bool = False


class _Decoder:
    """The per-step logic of the loop, apart from the model forward."""

    def __init__(self, tokenizer, style: CallStyle, sandbox, *, max_new_tokens: int, top_k_trigger: int,
                 max_calls: int, disabled: bool, tools: set[str] | None, on_call=None, grammar=None):
        self.tok = tokenizer
        self.style = style
        self.sandbox = sandbox
        self.max_new_tokens = max_new_tokens
        self.top_k = top_k_trigger
        self.max_calls = max_calls
        self.disabled = disabled or max_calls <= 0
        self.tools = tools
        self.on_call = on_call
        self.start_ids = marker_token_ids(tokenizer, style.start)
        # Tokens of spaces only (a tokenizer with pretrain.digits_apart has " " before every number).
        self.blank_ids = set(marker_token_ids(tokenizer, "", required=False))
        self.eos_id = tokenizer.eos_token_id
        self.grammar = grammar  # a CallGrammar: constrained decoding of open calls (None: off)

    def may_call(self, row: DecodeState) -> bool:
        return not self.disabled and row.opened < self.max_calls and row.call_at is None and not row.after_call

    def choose(self, logits: torch.Tensor, rows: list[DecodeState], do_sample: bool, temperature: float) -> list[int]:
        """Pick the next token of every row from ``logits`` (B, V)."""
        logits = logits.float().clone()  # (B, V)
        if self.grammar is not None and any(r.call_at is not None for r in rows):
            self.grammar.restrict(logits, [None if r.call_at is None or r.forced or r.done else self._call_text(r)
                                           for r in rows])
        start = torch.tensor(self.start_ids, device=logits.device)
        forbid = torch.tensor([not self.may_call(r) for r in rows], device=logits.device)  # (B,)
        if forbid.any():
            logits[forbid.nonzero().squeeze(1)[:, None], start[None, :]] = float("-inf")
        if do_sample:
            probs = torch.softmax(logits / max(temperature, 1e-6), dim=-1)  # (B, V)
            picked = torch.multinomial(probs, 1).squeeze(1)  # (B,)
        else:
            picked = logits.argmax(dim=-1)  # (B,)
        chosen: list[int] = picked.tolist()
        if not self.disabled and self.top_k > 0:
            top = logits.topk(min(self.top_k, logits.shape[-1]), dim=-1).indices.tolist()  # (B, k)
            starts = set(self.start_ids)
            for b, row in enumerate(rows):
                if self.may_call(row):
                    # The best-ranked call-start token in the top k, if any, starts a call.
                    hit = next((t for t in top[b] if t in starts), None)
                    if hit is not None:
                        chosen[b] = hit
        return chosen

    def step(self, row: DecodeState, token: int) -> None:
        """Append the chosen ``token`` (or the next inserted one) to ``row``."""
        if row.forced:
            row.new_ids.append(row.forced.pop(0))
            return
        if token == self.eos_id:
            row.done = True
            return
        row.new_ids.append(token)
        row.chosen += 1
        row.after_call = row.after_call and token in self.blank_ids  # a space alone is not text yet
        if row.call_at is None and token in self.start_ids and self.may_call(row):
            row.call_at = len(row.new_ids) - 1
            row.opened += 1
        elif row.call_at is not None:
            self._advance_call(row)
        if row.chosen >= self.max_new_tokens:
            if self.grammar is not None and row.call_at is not None:
                self._close_call(row)
            row.new_ids.extend(row.forced)  # finish an insertion already decided
            row.forced = []
            row.done = True

    def _call_text(self, row: DecodeState) -> str:
        return self.tok.decode(row.new_ids[row.call_at:], clean_up_tokenization_spaces=False).lstrip(" ")

    def _close_call(self, row: DecodeState) -> None:
        """Constrained decoding at the end of the budget: close an open call whose input is complete, run it."""
        text = self._call_text(row)
        tail = self.grammar.closing_text(text)
        if tail is not None:
            row.new_ids.extend(self._ids_after(text, tail))
            self._advance_call(row)

    def _advance_call(self, row: DecodeState) -> None:
        """Decide what the open call's text so far means."""
        s = self.style
        text = self._call_text(row)
        partial = text[len(s.start):]
        found = [pc for pc in parse_calls(text, s, None) if pc.start == 0]
        if found and found[0].call.result is not None:
            self._execute(row, found[0].call.tool, found[0].call.input, partial)
        elif s.end in partial:
            if found:  # e(c) without a result marker: a call the model closed itself, not executed
                self._record(row, {"tool": found[0].call.tool, "input": found[0].call.input, "result": None,
                                   "error": {"code": "no_result_marker", "message": "call closed without →"}})
            else:  # `[1]`: ordinary text, refund the call
                row.opened -= 1
            row.call_at = None
        elif not _CALL_PREFIX.match(partial.lstrip(" ")):
            # `[` followed by something that is no call (e.g. `[1]`): ordinary text, refund the call.
            row.call_at = None
            row.opened -= 1
        elif any(a in partial for a in s.arrows):
            self._record(row, {"tool": None, "input": partial, "result": None,
                               "error": {"code": "unparseable", "message": f"cannot parse call {text!r}"}})
            self._insert(row, partial, None)

    def _execute(self, row: DecodeState, tool: str, tool_input: str, partial: str) -> None:
        if self.tools is not None and tool not in self.tools:
            result, error = None, {"code": "unknown_tool", "message": f"no tool named {tool!r}"}
        else:
            out = self.sandbox.run(tool, tool_input, row.date)
            result, error = out.result, out.error
        self._record(row, {"tool": tool, "input": tool_input, "result": result, "error": error})
        self._insert(row, partial, result)

    def _record(self, row: DecodeState, call: dict) -> None:
        """Record the open call's outcome and tell ``on_call`` (prompt index, call, text before the call)."""
        row.calls.append(call)
        if self.on_call is not None:
            before = self.tok.decode(row.new_ids[:row.call_at], clean_up_tokenization_spaces=False)
            self.on_call(row.index, call, before)

    def _insert(self, row: DecodeState, partial: str, result: str | None) -> None:
        """Queue " result" + call-end (or just call-end) and close the call."""
        text = self.style.end if result is None else ("" if partial.endswith(" ") else " ") + result + self.style.end
        row.forced = self._ids_after(self.style.start + partial, text)
        row.call_at = None
        row.after_call = True

    def _ids_after(self, context: str, text: str) -> list[int]:
        """The tokens of ``text`` written after ``context``, tokenized in context, as the training text was
        tokenized as a whole (sentencepiece adds a prefix space to a lone piece; BPE may merge across the seam)."""
        before = self.tok.encode(context, add_special_tokens=False)
        after = self.tok.encode(context + text, add_special_tokens=False)
        same = after[: len(before)] == before and len(after) > len(before)
        return after[len(before):] if same else encode_piece(self.tok, text)


def _forward(model, ids, mask, positions, past, cache_arg: str):
    out = model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True, **{cache_arg: past},
                **last_logits(model, 1))  # the last position's logits only: a prompt's would fill GiBs
    return out.logits[:, -1, :], output_cache(out)  # (B, V)


@torch.no_grad()
def _generate_batch(model, tokenizer, prompts: list[str], dec: _Decoder, dates, do_sample, temperature,
                    window: int, indices: list[int]) -> list[Generation]:
    device = next(model.parameters()).device
    room = window - dec.max_new_tokens
    keep = max(1, room - min(RESULT_TOKENS * max(0, dec.max_calls), room // 4))
    bos = document_start(tokenizer)
    # Cut long prompts from the left, keeping the document start (BOS, else EOS) first, as in training.
    encoded = [tokenizer.encode(p, add_special_tokens=False) for p in prompts]
    seqs = [bos + e[-max(1, keep - len(bos)):] for e in encoded]
    cut = [len(bos) + len(e) - len(s) for e, s in zip(encoded, seqs)]
    width = max(len(s) for s in seqs)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    ids = torch.tensor([[pad] * (width - len(s)) + s for s in seqs], device=device)  # (B, T) left padded
    mask = torch.tensor([[0] * (width - len(s)) + [1] * len(s) for s in seqs], device=device)  # (B, T)
    positions = (mask.cumsum(-1) - 1).clamp(min=0)  # (B, T): 0 at each prompt's first real token
    rows = [DecodeState(date=d, index=i) for d, i in zip(dates, indices)]
    cache_arg = cache_kwarg(model)
    logits, past = _forward(model, ids, mask, positions, None, cache_arg)
    last_pos = positions[:, -1]  # (B,)
    while True:
        picked = dec.choose(logits, rows, do_sample, temperature)
        feed = []
        for b, row in enumerate(rows):
            if not row.done:
                dec.step(row, picked[b])
                if int(last_pos[b]) + 1 >= window:  # no position left to feed the token at
                    row.new_ids.extend(row.forced)
                    row.forced, row.done = [], True
            feed.append(pad if row.done else row.new_ids[-1])
        if all(r.done for r in rows):
            break
        alive = torch.tensor([not r.done for r in rows], device=device)  # (B,)
        last_pos = last_pos + alive.long()  # finished rows keep their position
        ids = torch.tensor(feed, device=device)[:, None]  # (B, 1)
        mask = torch.cat([mask, torch.ones_like(ids)], dim=1)  # (B, T + 1)
        logits, past = _forward(model, ids, mask, last_pos[:, None], past, cache_arg)
    out = []
    for prompt, row, n_cut in zip(prompts, rows, cut):
        text = tokenizer.decode(row.new_ids, clean_up_tokenization_spaces=False)
        bare = strip_calls(text, dec.style, None, separator=" ")
        out.append(Generation(prompt, text, row.calls, bare, n_cut))
    return out


def generate_with_tools(model, tokenizer, prompts: list[str], sandbox, style: CallStyle, *,
                        max_new_tokens: int = 32, top_k_trigger: int = 10, max_calls: int = 1,
                        disabled: bool = False, do_sample: bool = False, temperature: float = 1.0,
                        dates: list[str | None] | None = None, tools: set[str] | None = None,
                        batch_size: int = 16, window: int = 0, on_call=None, constrained: bool = False,
                        max_input_chars: int = MAX_INPUT_CHARS) -> list[Generation]:
    """Continue every prompt, calling tools the paper's way (see the module doc).

    ``sandbox`` runs the calls (may be None when ``disabled``); ``dates`` gives
    each prompt's date for the Calendar tool; ``tools`` limits the tool names
    that may be called (None: any the sandbox knows); prompts are decoded in
    batches of ``batch_size``, similar lengths together; ``window`` is the
    model's context in tokens (0: from the model config). A prompt too long
    for the window, less room for the new tokens and call results, is cut
    from the left (``prompt_tokens_cut`` says by how many tokens). With
    ``constrained`` every call is well formed by construction (the tools'
    input grammars; inputs of at most ``max_input_chars``): see
    :mod:`toolformer.lm.constrain`. ``on_call(index, call, text)``, when
    given, is called as each call is made (``index`` of the prompt, the
    call's dict as in ``calls``, ``text`` generated before the call). Returns
    one :class:`Generation` per prompt, in order.
    """
    if sandbox is None and not disabled and max_calls > 0:
        raise ValueError("generate_with_tools: tools are enabled but no sandbox was given")
    if dates is not None and len(dates) != len(prompts):
        raise ValueError(f"generate_with_tools: {len(dates)} dates for {len(prompts)} prompts")
    grammar = None
    if constrained and sandbox is not None and not disabled:
        enabled = {n: t for n, t in sandbox.tools.items() if tools is None or n in tools}
        grammar = call_grammar(tokenizer, style, enabled, max_input_chars)
    dec = _Decoder(tokenizer, style, sandbox, max_new_tokens=max_new_tokens, top_k_trigger=top_k_trigger,
                   max_calls=max_calls, disabled=disabled, tools=tools, on_call=on_call, grammar=grammar)
    window = window or model_window(model)
    dates = dates or [None] * len(prompts)
    order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))
    results: list[Generation | None] = [None] * len(prompts)
    for s in range(0, len(order), max(1, batch_size)):
        idx = order[s : s + max(1, batch_size)]
        gens = _generate_batch(model, tokenizer, [prompts[i] for i in idx], dec, [dates[i] for i in idx],
                               do_sample, temperature, window, idx)
        for i, g in zip(idx, gens):
            results[i] = g
    return results  # type: ignore[return-value]


def load_model_folder(cfg, path: str):
    """(model, tokenizer) of a model folder with ``cfg.model``'s device and dtype.

    A folder with its own tokenizer (a fine-tuned model) uses it; otherwise the
    configured ``model.tokenizer`` (or ``model.path``) is used. A local folder that is damaged (a file garbled,
    cut short or missing) is a :class:`~toolformer.lm.folderfiles.FolderFileError` naming the file.
    """
    import dataclasses
    from pathlib import Path

    from toolformer.lm.folderfiles import check_damage, loading_errors
    from toolformer.lm.modeling import load

    if Path(path).is_dir():
        check_damage(path)  # a damaged file is one line naming it, not a traceback of the loader
    own = any((Path(path) / f).exists() for f in ("tokenizer.json", "tokenizer_config.json"))
    tokenizer = "" if own else (cfg.model.tokenizer or cfg.model.path)
    with loading_errors(path):
        return load(dataclasses.replace(cfg.model, path=path, tokenizer=tokenizer), cfg.calls)
