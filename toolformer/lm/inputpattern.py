"""A tool's input grammar (``Tool.input_pattern``, a regular expression) as an automaton over characters,
for constrained decoding (:mod:`toolformer.lm.constrain`): Thompson's construction of an NFA from Python's
own regex parser, turned into DFA states on demand. Characters, classes, groups, ``|`` and repeats; no
flags, lookarounds or back-references."""

from __future__ import annotations

import sys

if sys.version_info >= (3, 11):
    from re import _constants as _sre_c
    from re import _parser as _sre_p
else:
    import sre_constants as _sre_c
    import sre_parse as _sre_p


MAX_NFA_NODES = 20000  # a pattern whose automaton grows past this (large {m,n} counts) is refused


# -- the tool's pattern as an automaton over characters ------------------------------------------------------------
def _category(name: str):
    """The test of a ``\\d``/``\\s``/``\\w`` class (and negations) as ``re`` applies it to str patterns."""
    tests = {"DIGIT": str.isdecimal, "SPACE": str.isspace, "WORD": lambda c: c.isalnum() or c == "_"}
    base = name.replace("CATEGORY_", "").replace("UNI_", "").replace("LOC_", "")
    negate = base.startswith("NOT_")
    test = tests.get(base[4:] if negate else base)
    if test is None:
        raise ValueError(f"input_pattern: character class {name} is not supported")
    return (lambda c: not test(c)) if negate else test


def _class_test(items):
    """The test of a ``[...]`` class from its parsed items."""
    negate, parts = False, []
    for op, av in items:
        if op is _sre_c.NEGATE:
            negate = True
        elif op is _sre_c.LITERAL:
            parts.append(lambda c, v=av: ord(c) == v)
        elif op is _sre_c.RANGE:
            parts.append(lambda c, lo=av[0], hi=av[1]: lo <= ord(c) <= hi)
        elif op is _sre_c.CATEGORY:
            parts.append(_category(str(av)))
        else:
            raise ValueError(f"input_pattern: {op} inside a character class is not supported")
    return lambda c: any(p(c) for p in parts) != negate


class InputPattern:
    """A regular expression as an automaton: ``start``, ``step(state, char) -> state`` (-1: no input with
    this prefix matches) and ``accepts(state)`` (the text so far matches as a whole)."""

    def __init__(self, pattern: str):
        self.pattern = pattern
        self._eps: list[list[int]] = []  # NFA: epsilon moves per node
        self._moves: list[list[tuple]] = []  # NFA: (char test, next node) per node
        tree = _sre_p.parse(pattern)
        if tree.state.flags & ~(_sre_c.SRE_FLAG_UNICODE | _sre_c.SRE_FLAG_VERBOSE):
            raise ValueError(f"input_pattern {pattern!r}: flags are not supported")
        items = list(tree.data)
        while items and items[0][0] is _sre_c.AT:  # ^ and $ at the ends: the whole input matches anyway
            items = items[1:]
        while items and items[-1][0] is _sre_c.AT:
            items = items[:-1]
        first = self._node()
        self._accept = self._sequence(items, first)
        self._sets: list[frozenset] = []
        self._ids: dict[frozenset, int] = {}
        self._memo: dict[tuple[int, str], int] = {}
        self.start = self._state({first})

    def _node(self) -> int:
        if len(self._eps) >= MAX_NFA_NODES:
            raise ValueError(f"input_pattern {self.pattern!r}: the automaton exceeds {MAX_NFA_NODES} nodes")
        self._eps.append([])
        self._moves.append([])
        return len(self._eps) - 1

    def _char(self, test, node: int) -> int:
        nxt = self._node()
        self._moves[node].append((test, nxt))
        return nxt

    def _sequence(self, items, node: int) -> int:
        for op, av in items:
            node = self._item(op, av, node)
        return node

    def _item(self, op, av, node: int) -> int:
        """Thompson's construction of one parsed item from ``node``; returns the node after it."""
        if op is _sre_c.LITERAL:
            return self._char(lambda c, v=av: ord(c) == v, node)
        if op is _sre_c.NOT_LITERAL:
            return self._char(lambda c, v=av: ord(c) != v, node)
        if op is _sre_c.ANY:
            return self._char(lambda c: c != "\n", node)
        if op is _sre_c.IN:
            return self._char(_class_test(av), node)
        if op is _sre_c.SUBPATTERN:
            if av[1] or av[2]:
                raise ValueError(f"input_pattern {self.pattern!r}: flags are not supported")
            return self._sequence(av[-1], node)
        if op is _sre_c.BRANCH:
            end = self._node()
            for alternative in av[1]:
                begin = self._node()
                self._eps[node].append(begin)
                self._eps[self._sequence(alternative, begin)].append(end)
            return end
        if op in (_sre_c.MAX_REPEAT, _sre_c.MIN_REPEAT, getattr(_sre_c, "POSSESSIVE_REPEAT", None)):
            low, high, sub = av
            return self._repeat(low, high, sub, node)
        raise ValueError(f"input_pattern {self.pattern!r}: {op} is not supported (only characters, classes, "
                         "groups, | and repeats)")

    def _repeat(self, low: int, high, sub, node: int) -> int:
        for _ in range(low):
            node = self._sequence(sub, node)
        if high is _sre_c.MAXREPEAT:
            loop, end = self._node(), self._node()
            self._eps[node].append(loop)
            self._eps[loop].append(end)
            self._eps[self._sequence(sub, loop)].append(loop)
            return end
        for _ in range(high - low):
            end = self._node()
            self._eps[node].append(end)
            self._eps[self._sequence(sub, node)].append(end)
            node = end
        return node

    def _state(self, nodes: set[int]) -> int:
        """The DFA state (an id) of a set of NFA nodes, closed under epsilon moves."""
        todo, seen = list(nodes), set(nodes)
        while todo:
            for m in self._eps[todo.pop()]:
                if m not in seen:
                    seen.add(m)
                    todo.append(m)
        key = frozenset(seen)
        if key not in self._ids:
            self._ids[key] = len(self._sets)
            self._sets.append(key)
        return self._ids[key]

    def step(self, state: int, char: str) -> int:
        key = (state, char)
        nxt = self._memo.get(key)
        if nxt is None:
            nodes = {m for n in self._sets[state] for test, m in self._moves[n] if test(char)}
            nxt = self._memo[key] = self._state(nodes) if nodes else -1
        return nxt

    def accepts(self, state: int) -> bool:
        return self._accept in self._sets[state]

    def fullmatch(self, text: str) -> bool:
        state = self.start
        for ch in text:
            state = self.step(state, ch)
            if state < 0:
                return False
        return self.accepts(state)
