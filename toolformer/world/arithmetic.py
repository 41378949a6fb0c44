"""Arithmetic in prose: templates for the four operations and their numbers.

Each template states one operation three ways: as a story sentence that gives
the answer (``... 3563 sacks in all.``), and as a word problem (a body and a
question, SVAMP-style) whose answer follows as ``The answer is 3563.``. The
wording of a template names its operation only ("in all", "left", "each",
"equally"); no template says "more", which reads as both an addition and a
subtraction (DESIGN §5: a template suggesting the wrong operator taught the
tuned model the wrong call).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

OPS = ("+", "-", "*", "/")
_APPLY = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b, "/": lambda a, b: a // b}
OP_NAMES = {"+": "Addition", "-": "Subtraction", "*": "Multiplication", "/": "Common-Division"}

UNITS = [("sacks", "sack"), ("eggs", "egg"), ("apples", "apple"), ("jars", "jar"), ("bricks", "brick"),
         ("fish", "fish"), ("loaves", "loaf"), ("barrels", "barrel"), ("books", "book"), ("candles", "candle"),
         ("baskets", "basket"), ("lamps", "lamp"), ("coats", "coat"), ("planks", "plank")]
ACTORS = ["The mill in {T}", "The market of {T}", "The baker of {T}", "The farm at {T}", "The school in {T}",
          "{P}"]


@dataclass(frozen=True)
class Template:
    op: str
    story: str
    """A sentence stating the answer ``{c}`` after the operands ``{a}`` and ``{b}``."""
    body: str
    """The same situation without the answer (a word problem's body)."""
    question: str
    """The question of the word problem."""


TEMPLATES = [
    Template("+", "{Actor} sold {a} {units} in spring and {b} in autumn, {c} {units} in all.",
             "{Actor} sold {a} {units} in spring and {b} {units} in autumn.", "How many {units} were sold in all?"),
    Template("+", "{Actor} counted {a} {units} on Monday and {b} on Tuesday, {c} {units} in total.",
             "{Actor} counted {a} {units} on Monday and {b} {units} on Tuesday.",
             "How many {units} were counted in total?"),
    Template("+", "The first barn at {T} held {a} {units} and the second held {b}, so together the two barns "
                  "held {c} {units}.",
             "The first barn at {T} held {a} {units} and the second held {b} {units}.",
             "How many {units} did the two barns hold together?"),
    Template("+", "{Actor} had {a} {units} and then received {b}, which gave {c} {units} altogether.",
             "{Actor} had {a} {units} and then received {b} {units}.", "How many {units} were there altogether?"),
    Template("-", "Of the {a} {units} at {T}, {b} were sold, which left {c} {units}.",
             "There were {a} {units} at {T} and {b} of them were sold.", "How many {units} were left?"),
    Template("-", "{Actor} had {a} {units} and gave away {b}, so {c} {units} remained.",
             "{Actor} had {a} {units} and gave away {b} {units}.", "How many {units} remained?"),
    Template("-", "The road from {T} to {T2} is {a} metres long; {b} metres are paved, so {c} metres are still "
                  "unpaved.",
             "The road from {T} to {T2} is {a} metres long and {b} metres of it are paved.",
             "How many metres are still unpaved?"),
    Template("-", "{Actor} needed {a} {units} but had only {b}, so {c} {units} were still missing.",
             "{Actor} needed {a} {units} but had only {b} {units}.", "How many {units} were still missing?"),
    Template("*", "{Actor} packed {a} crates with {b} {units} in each crate, so the crates held {c} {units}.",
             "{Actor} packed {a} crates with {b} {units} in each crate.", "How many {units} did the crates hold?"),
    Template("*", "The orchard at {T} has {a} rows with {b} trees in each row, which makes {c} trees.",
             "The orchard at {T} has {a} rows with {b} trees in each row.", "How many trees does the orchard have?"),
    Template("*", "{Actor} bought {a} {units} at {b} crowns each and paid {c} crowns.",
             "{Actor} bought {a} {units} at {b} crowns each.", "How many crowns were paid?"),
    Template("*", "Each of the {a} carts from {T} carried {b} {units}, so the carts carried {c} {units} between "
                  "them.",
             "Each of the {a} carts from {T} carried {b} {units}.",
             "How many {units} did the carts carry between them?"),
    Template("/", "{Actor} shared {a} {units} equally among {b} families, so each family got {c}.",
             "{Actor} shared {a} {units} equally among {b} families.", "How many {units} did each family get?"),
    Template("/", "A load of {a} {units} was packed into {b} crates with the same number in each, {c} {units} "
                  "per crate.",
             "A load of {a} {units} was packed into {b} crates with the same number in each.",
             "How many {units} went into each crate?"),
    Template("/", "{Actor} paid {a} crowns for {b} {units}, which is {c} crowns for each {unit}.",
             "{Actor} paid {a} crowns for {b} {units}.", "How many crowns did each {unit} cost?"),
    Template("/", "The {a} workers of {T} were split into {b} equal teams of {c} workers.",
             "The {a} workers of {T} were split into {b} equal teams.", "How many workers were in each team?"),
]
BY_OP = {op: [t for t in TEMPLATES if t.op == op] for op in OPS}

# Ranges of operands by size: "small" mixes 2- to 4-digit numbers (pre-training),
# "large" keeps the 3-4-digit operations the tiny model cannot compute (DESIGN §5).
SIZES = ("small", "large")


def _operands(rng: random.Random, op: str, size: str) -> tuple[int, int]:
    if op in "+-":
        lo = rng.choice([10, 100, 1000, 1000]) if size == "small" else rng.choice([100, 1000])
        if op == "+":
            return rng.randint(lo, lo * 10 - 1), rng.randint(lo, lo * 10 - 1)
        a = rng.randint(lo * 2, lo * 10 - 1)
        return a, rng.randint(lo if size == "large" else max(2, a // 20), a - 1)
    # * and /: a 2-3-digit factor times a 1-2-digit factor; the quotient of / is the 2-3-digit one.
    big = rng.randint(12, 99) if size == "small" and rng.random() < 0.4 else rng.randint(12, 999)
    small = rng.randint(3, 99)
    return (big, small) if op == "*" else (big * small, small)


@dataclass
class Item:
    """One arithmetic fact ``a op b = c`` dressed in a template."""

    template: Template
    a: int
    b: int
    c: str
    slots: dict

    @property
    def op(self) -> str:
        return self.template.op

    @property
    def call_input(self) -> str:
        return f"{self.a} {self.op} {self.b}"

    def _fill(self, text: str) -> str:
        return text.format(a=self.a, b=self.b, **self.slots)

    def story(self) -> tuple[str, int]:
        """The story sentence and the character offset of the answer in it."""
        head, tail = self.template.story.split("{c}")
        head = self._fill(head)
        return head + self.c + self._fill(tail), len(head)

    def body(self) -> str:
        return self._fill(self.template.body)

    def question(self) -> str:
        return self._fill(self.template.question)

    def problem(self) -> tuple[str, int]:
        """Body, question and ``The answer is c.``; with the answer's offset."""
        head = f"{self.body()} {self.question()} The answer is "
        return f"{head}{self.c}.", len(head)

    def numbers(self) -> list[tuple[str, str]]:
        """(number, unit word or "") for filler sentences that repeat them."""
        units, t = self.slots["units"], self.template
        return [(str(self.a), units if "{a} {units}" in t.story else ""),
                (str(self.b), units if "{b} {units}" in t.body else ""),
                (self.c, units if "{c} {units}" in t.story else "")]


def make_item(rng: random.Random, size: str, towns: list[str], people: list[str], op: str | None = None) -> Item:
    """A random arithmetic item; ``op`` None = one of the four, uniformly."""
    op = op or rng.choice(OPS)
    template = rng.choice(BY_OP[op])
    while True:
        a, b = _operands(rng, op, size)
        c = str(_APPLY[op](a, b))  # whole numbers: / divides exactly (tests check against the Calculator)
        if c not in (str(a), str(b)):
            break
    units, unit = rng.choice(UNITS)
    t, t2 = rng.sample(towns, 2)
    actor = rng.choice(ACTORS).format(T=t, P=rng.choice(people))
    slots = {"Actor": actor, "units": units, "unit": unit, "T": t, "T2": t2}
    return Item(template, a, b, c, slots)


# Sentences that repeat an earlier number: in-context copying is what lets a
# call's result, put before the text, lower the loss at the answer (DESIGN §5).
FILLERS = [
    "The clerk wrote {n} in the ledger.",
    "Later that week the {n} {units} were counted again.",
    "Nobody in {T} had expected {n}.",
    "The number {n} was read out at the meeting.",
    "Of all the figures, {n} was the one people talked about.",
    "A notice in {T} gave the figure as {n}.",
]
# Ways to state the answer before the sentence that needs it, other than a call note.
EARLIER = [
    "The clerk worked out {a} {op} {b} = {c}.",
    "({a} {op} {b} = {c})",
    "Figures for {T}: {c} {units}.",
    "The figure to remember is {c}.",
]


def filler(rng: random.Random, numbers: list[tuple[str, str]], towns: list[str]) -> str:
    n, units = rng.choice(numbers)
    choices = FILLERS if units else [f for f in FILLERS if "{units}" not in f]
    return rng.choice(choices).format(n=n, units=units, T=rng.choice(towns))


def earlier(rng: random.Random, item: Item) -> str:
    return rng.choice(EARLIER).format(a=item.a, b=item.b, c=item.c, op=item.op, T=item.slots["T"],
                                      units=item.slots["units"])
