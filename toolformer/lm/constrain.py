"""Constrained decoding: tool calls that are well formed by construction.

With ``constrained`` on, :func:`toolformer.lm.generate.generate_with_tools`
masks the logits of every prompt inside an open call so that only tokens
that keep the call valid may follow:

* after the call-start marker: an enabled tool's name (after at most one
  space) and then ``(``;
* inside the parentheses: text that is still a prefix of an input the tool's
  grammar accepts (:attr:`toolformer.tools.base.Tool.input_pattern`, a regular
  expression; empty for a tool that takes no input), one line, without a call
  marker of the style (``[``, ``]``, ``→``, ``->``; ``<API>``, ``</API>``) or a
  quote (a ``"``, or a ``'`` that does not follow a letter or digit: quotes
  change where the call parser finds the closing bracket); brackets stay
  balanced, and the ``)`` at depth 0 closes the input only when the whole
  input matches the grammar;
* after the closing ``)``: at most one space and the result marker, where
  decoding pauses to run the call.

The grammar is the tool's declaration, not a list kept here: a new tool with
an ``input_pattern`` is decoded by its pattern with no change to this module.

A prefix check (the text so far plus a token's text is a prefix of some
valid call) is an automaton over characters: the tool's pattern compiled to
an NFA (Thompson's construction from Python's own regex parser) and turned
into DFA states on demand, times the call's phase (name, input, result
marker), bracket depth and the part of a marker the input ends with. The
vocabulary is decoded once (each token on its own, as
:func:`~toolformer.lm.textpos.marker_token_ids` does) into a trie of token
texts; the allowed tokens of an automaton state are found by walking the
trie from that state (dead branches pruned) once and kept, so a step costs a
walk over the characters the open call gained since the last step and a
cached mask (states deeper in brackets than any token can close share one).
Measured with ``bench --constrained`` (README, "Performance").

Two rules keep the model from leaving a call open:

* when the model's best token is not allowed (it wants to stop, start a new
  line, or write a word into an arithmetic input), only the allowed tokens
  that close something remain when there are any: a bracket of the input,
  or the input itself when it is complete (``)``, then the result marker);
  otherwise the best allowed token is taken;
* tokens that would make the input longer than ``max_input_chars`` are not
  allowed; and when the token budget ends inside a call whose input is
  complete, the call is closed, run and its result inserted
  (:meth:`CallGrammar.closing_text`).

A byte-level vocabulary's tokens that decode to part of a character (U+FFFD)
are never allowed inside a call.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field

import torch

from toolformer.lm.inputpattern import InputPattern

MAX_INPUT_CHARS = 200  # the default of tools.max_input_chars
WALK_MEMO = 100_000  # call texts whose automaton state is kept
_GRAMMARS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


# -- the call automaton and the token masks ------------------------------------------------------------------------
# Automaton states: ("name", text after the call-start marker), ("arg", tool, pattern state, bracket depth, the end
# of the input that begins a marker, previous character is a letter or digit), ("tail", text after `)`), ("done",).
DONE = ("done",)


@dataclass(slots=True)
class _Trie:
    ids: list[int] = field(default_factory=list)  # tokens whose text ends here
    next: dict[str, _Trie] = field(default_factory=dict)


class _Options:
    """The tokens that may follow one automaton state: as flags (``allowed[id]``) and as the (V,) masks of
    the tokens to block."""

    def __init__(self, vocab: int, allowed: list[int], closing: list[int]):
        self.allowed = [False] * vocab
        for i in allowed:
            self.allowed[i] = True
        self.any_allowed, self.any_closing = bool(allowed), bool(closing)
        self.closing = torch.zeros(vocab, dtype=torch.bool)
        self.closing[closing] = True
        self.blocked = ~torch.tensor(self.allowed)
        self.blocked_closing = ~self.closing


class CallGrammar:
    """Which tokens may continue an open call, for one tokenizer, call style and set of tools."""

    def __init__(self, tokenizer, style, tools: dict, max_input_chars: int = MAX_INPUT_CHARS):
        self.style = style
        self.patterns = {name: InputPattern(t.input_pattern if t.takes_input else "") for name, t in tools.items()}
        self.max_input_chars = max_input_chars
        self.markers = tuple(m for m in (style.start, style.end, *style.arrows) if m)
        self.vocab = len(tokenizer)
        texts = tokenizer.batch_decode([[i] for i in range(self.vocab)], clean_up_tokenization_spaces=False)
        special = {getattr(tokenizer, f"{k}_token_id", None) for k in ("eos", "bos", "pad", "unk")}
        self.lengths = torch.tensor([len(t) for t in texts])  # (V,)
        self.longest = int(self.lengths.max())
        self.max_closes = max(t.count(")") for t in texts)  # the most `)` one token holds
        self.trie = _Trie()
        for i, text in enumerate(texts):
            if text and i not in special:
                node = self.trie
                for ch in text:
                    node = node.next.setdefault(ch, _Trie())
                node.ids.append(i)
        self._advance_memo: dict[tuple, tuple | None] = {}
        self._options: dict[tuple, _Options] = {}
        self._walked: dict[str, tuple[tuple | None, int]] = {}

    # the automaton
    def advance(self, state: tuple, ch: str) -> tuple | None:
        """The state after one more character (None: no valid call continues this way)."""
        key = (state, ch)
        if key not in self._advance_memo:
            self._advance_memo[key] = self._advance(state, ch)
        return self._advance_memo[key]

    def _advance(self, state: tuple, ch: str) -> tuple | None:
        kind = state[0]
        if kind == "name":
            name = state[1].lstrip(" ")
            if ch == "(":
                return ("arg", name, self.patterns[name].start, 0, "", False) if name in self.patterns else None
            if ch == " ":
                return ("name", " ") if state[1] == "" else None
            return ("name", state[1] + ch) if any(n.startswith(name + ch) for n in self.patterns) else None
        if kind == "arg":
            return self._advance_input(state, ch)
        if kind == "tail":
            text = state[1] + ch
            body = text[1:] if text.startswith(" ") else text
            if not body:
                return ("tail", text)
            if body in self.style.arrows:
                return DONE
            return ("tail", text) if any(a.startswith(body) for a in self.style.arrows) else None
        return None  # nothing follows the result marker: the decoder runs the call there

    def _advance_input(self, state: tuple, ch: str) -> tuple | None:
        _, tool, pstate, depth, pending, after_alnum = state
        pattern = self.patterns[tool]
        if ch == ")" and depth == 0:
            return ("tail", "") if pattern.accepts(pstate) else None
        if ch in '"\n\ufffd' or (ch == "'" and not after_alnum):
            return None
        text = pending + ch
        if any(text.endswith(m) for m in self.markers):
            return None
        pending = next((text[k:] for k in range(len(text)) if any(m.startswith(text[k:]) for m in self.markers)), "")
        pstate = pattern.step(pstate, ch)
        if pstate < 0:
            return None
        depth += (ch == "(") - (ch == ")")
        return ("arg", tool, pstate, depth, pending, ch.isalnum())

    def walk(self, text: str) -> tuple[tuple | None, int]:
        """(state, characters of input) after ``text``, the open call's text after the call-start marker.
        Continued from the longest text walked before that this one extends by at most one token (an open
        call grows a token per step), so a step walks only the new characters."""
        start: tuple[tuple | None, int] = (("name", ""), 0)
        done = 0
        for cut in range(len(text) - 1, max(-1, len(text) - 1 - self.longest), -1):
            if text[:cut] in self._walked:
                start, done = self._walked[text[:cut]], cut
                break
        state, chars = start
        for ch in text[done:]:
            if state is None:
                break
            chars += state[0] == "arg"
            state = self.advance(state, ch)
        if len(self._walked) > WALK_MEMO:  # texts of calls long closed: start afresh
            self._walked.clear()
        self._walked[text] = (state, chars) if state is not None else (None, 0)
        return self._walked[text]

    # the tokens
    def options(self, state: tuple) -> _Options:
        """The tokens that may follow ``state``, and those among them that close something: a bracket of
        the input, the input itself (the call's `)`), or that come after it."""
        if state[0] == "arg" and state[3] > self.max_closes:
            # No token closes the call from this deep: the same tokens as at the depth where none can.
            state = (*state[:3], self.max_closes, *state[4:])
        if state not in self._options:
            allowed: list[int] = []
            closing: list[int] = []
            todo = [(self.trie, state, state[0] in ("tail", "done"))]
            while todo:
                node, st, closed = todo.pop()
                allowed += node.ids
                if closed:
                    closing += node.ids
                for ch, child in node.next.items():
                    nxt = self.advance(st, ch)
                    if nxt is not None:
                        todo.append((child, nxt, closed or ch == ")" or nxt[0] in ("tail", "done")))
            self._options[state] = _Options(self.vocab, allowed, closing)
        return self._options[state]

    @property
    def states_cached(self) -> int:
        """Automaton states whose token masks have been computed (and are kept)."""
        return len(self._options)

    def restrict(self, logits: torch.Tensor, call_texts: list[str | None]) -> None:
        """Set to -inf, in place, the logits (B, V') of the tokens that may not follow each row's open call
        (``call_texts[b]``, from its call-start marker; None: no open call, the row is left as it is). The
        model's best token when it is allowed; else the allowed ones that close a bracket or the input; else
        the allowed ones. A row whose text is off the grammar is left as it is."""
        best = logits.argmax(dim=-1).tolist()  # (B,)
        for b, call_text in enumerate(call_texts):
            blocked = None if call_text is None else self._blocked(call_text, best[b])
            if blocked is not None:
                logits[b, : self.vocab].masked_fill_(blocked.to(logits.device), float("-inf"))
                logits[b, self.vocab :] = float("-inf")  # past the tokenizer's vocabulary (padded embeddings)

    def _blocked(self, call_text: str, best: int) -> torch.Tensor | None:
        """(V,) the tokens a row may not write next (None: no constraint)."""
        state, chars = self.walk(_after_start(call_text, self.style))
        if state is None:
            return None
        opts = self.options(state)
        if state[0] == "arg" and chars + self.longest > self.max_input_chars:  # no input past the limit
            allowed = ~opts.blocked & ((self.lengths <= self.max_input_chars - chars) | opts.closing)
            if best < self.vocab and bool(allowed[best]):
                return ~allowed
            return opts.blocked_closing if opts.any_closing else (~allowed if allowed.any() else None)
        if best < self.vocab and opts.allowed[best]:
            return opts.blocked
        if opts.any_closing:
            return opts.blocked_closing
        return opts.blocked if opts.any_allowed else None

    def closing_text(self, call_text: str) -> str | None:
        """The text that closes the open call ``call_text`` up to its result marker (``") →"``, ``"() →"``
        ...), or None when its input is not complete."""
        state, _ = self.walk(_after_start(call_text, self.style))
        if state is None:
            return None
        for head in ("", ")", "()"):
            for arrow in self.style.arrows:
                for tail in (head + " " + arrow, head + arrow):
                    st: tuple | None = state
                    for ch in tail:
                        st = self.advance(st, ch) if st is not None else None
                    if st == DONE:
                        return tail
        return None


def _after_start(call_text: str, style) -> str:
    return call_text.lstrip(" ")[len(style.start) :]


def call_grammar(tokenizer, style, tools: dict, max_input_chars: int = MAX_INPUT_CHARS) -> CallGrammar:
    """The :class:`CallGrammar` of ``tools`` (name -> Tool), built once per tokenizer, style, tools and limit
    (its token masks are kept from one call of the decoder to the next)."""
    key = (style, tuple(sorted((n, t.input_pattern if t.takes_input else None) for n, t in tools.items())),
           max_input_chars, len(tokenizer))
    try:
        cache = _GRAMMARS.setdefault(tokenizer, {})
    except TypeError:  # a tokenizer that cannot be weakly referenced
        cache = {}
    if key not in cache:
        cache[key] = CallGrammar(tokenizer, style, tools, max_input_chars)
    return cache[key]
