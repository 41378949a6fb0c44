"""Two-step word problems (chained calls): the second operation works on the first one's result.

A :class:`TwoStepForm` states ``a``, ``b`` and ``d`` and asks for ``c = (a first b) second d``; its worked
answer is ``The answer is c1 second d, which is c.``, with a call before ``c1`` and one before ``c`` whose
input holds ``c1``. :data:`TWOSTEP_FORMS` write the ``math_twostep`` set and the annotation corpus's two-step documents,
all in training words (:mod:`toolformer.smallworld.arithmetic` has the one-step forms).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from toolformer.smallworld.arithmetic import APPLY, fill_slots, written


@dataclass(frozen=True)
class TwoStepForm:
    """A word problem that needs two operations: ``c1 = a first b``, then ``c = c1 second d``. The text states
    ``a``, ``b`` and ``d`` in that order and nothing else numeric, so the rule proposer's last three earlier
    numbers hold the operands of each step."""

    key: str
    first: str
    second: str
    body: str
    question: str


TWOSTEP_FORMS = [
    TwoStepForm("fee", "*", "+", "{Actor} bought {a} {units} for {b} crowns apiece, and the carter charged a fee of "
                "{d} crowns.", "How many crowns did it cost with the fee?"),
    TwoStepForm("crates-aside", "*", "+", "{Actor} filled {a} crates with {b} {units} each and kept {d} more {units} "
                "aside.", "How many {units} were there counting those aside?"),
    TwoStepForm("crates-sold", "*", "-", "{T} had {a} crates of {b} {units}, and {d} {units} were sold at the fair.",
                "How many {units} did {T} keep?"),
    TwoStepForm("got-gave", "+", "-", "{P} had {a} {units}, got {b} more from {T} and then gave {d} to a neighbour.",
                "How many {units} does {P} have now?"),
    TwoStepForm("store", "-", "+", "The store at {T} held {a} {units}; {b} were taken out and later {d} were "
                "brought in.", "How many {units} does the store hold now?"),
    TwoStepForm("orders", "+", "*", "{T} ordered {a} {units} and {T2} ordered {b} {units}, at {d} crowns for each "
                "{unit}.", "How many crowns do the two orders cost?"),
    TwoStepForm("villages", "+", "/", "{T} gave {a} {units} and {T2} gave {b} {units}, and all of them were shared "
                "out equally among {d} villages.", "How many {units} did each village get?"),
    TwoStepForm("broke", "-", "*", "{Actor} made {a} {units} and {b} of them broke; the rest went for {d} crowns "
                "apiece.", "How many crowns did the rest bring?"),
]
TWOSTEP_KEYS = {f.key: f for f in TWOSTEP_FORMS}
assert len(TWOSTEP_KEYS) == len(TWOSTEP_FORMS)


def _twostep_operands(rng: random.Random, first: str, second: str) -> tuple[int, int, int]:
    """(a, b, d) with whole, 3-4-digit intermediate results: the steps the tiny model cannot compute."""
    if second == "/":  # (a + b) / d exact: d and the quotient first, then a + b = c1 split into two
        d = rng.randint(3, 12)
        c1 = d * rng.randint((200 + d - 1) // d, 1998 // d)  # 200 <= c1 <= 1998
        a = rng.randint(max(100, c1 - 999), min(999, c1 - 100))
        return a, c1 - a, d
    if first == "*":
        a, b = rng.randint(12, 99), rng.randint(12, 99)
    elif first == "+":
        a, b = rng.randint(100, 999), rng.randint(100, 999)
    else:
        a = rng.randint(300, 9999 if second == "+" else 999)
        b = rng.randint(100, a - 100)
    c1 = APPLY[first](a, b)
    d = rng.randint(3, 19) if second == "*" else rng.randint(100, min(999, c1 - 1) if second == "-" else 999)
    return a, b, d


@dataclass
class TwoStepItem:
    """``c1 = a first b``, ``c = c1 second d`` dressed in a two-step form."""

    form: TwoStepForm
    a: int
    b: int
    d: int
    slots: dict
    separators: bool = False

    @property
    def c1(self) -> str:
        return str(APPLY[self.form.first](self.a, self.b))

    @property
    def c(self) -> str:
        return str(APPLY[self.form.second](int(self.c1), self.d))

    @property
    def calls(self) -> tuple[str, str]:
        """The two calls' inputs; the second starts with the first's result."""
        return f"{self.a} {self.form.first} {self.b}", f"{self.c1} {self.form.second} {self.d}"

    def prompt(self) -> str:
        """Body and question, as an evaluation prompt reads them."""
        return f"{self.body()} {self.question()}"

    def body(self) -> str:
        w = lambda n: written(n, self.separators)  # noqa: E731
        return self.form.body.format(a=w(self.a), b=w(self.b), d=w(self.d), **self.slots)

    def question(self) -> str:
        return self.form.question.format(**self.slots)

    def problem(self) -> tuple[str, int, int]:
        """The problem and its worked answer, ``The answer is c1 second d, which is c.``, with the offsets of
        ``c1`` and ``c`` (where the two calls go)."""
        head = f"{self.prompt()} The answer is "
        # ", which is", not "=": the base model copies an earlier result after "which is" and not after "=", so
        # the filter keeps the second call only there (python -m toolformer.smallworld.lab.chain_probe).
        middle = f"{self.c1} {self.form.second} {self.d}, which is "
        return f"{head}{middle}{self.c}.", len(head), len(head) + len(middle)

    def numbers(self) -> list[tuple[str, str]]:
        """(number, unit word or "") for filler sentences that repeat them."""
        return [(written(self.a, self.separators), ""), (written(self.d, self.separators), ""), (self.c, "")]


def make_twostep(rng: random.Random, towns: list[str], people: list[str], form: TwoStepForm,
                 units: list[tuple[str, str]], names: list[str], separators: float = 0.0) -> TwoStepItem:
    """A random two-step item in ``form``, with one of ``units`` and a person from ``people`` or ``names``;
    every number (a, b, d, c1, c) distinct, so each step's result is a number the text has not stated before."""
    while True:
        a, b, d = _twostep_operands(rng, form.first, form.second)
        item = TwoStepItem(form, a, b, d, {})
        numbers = [str(a), str(b), str(d), item.c1, item.c]
        if len(set(numbers)) == 5 and int(item.c1) >= 100:
            break
    item.slots = fill_slots(rng, towns, people, units, names)
    item.separators = rng.random() < separators
    return item
