"""Arithmetic in prose: forms for the four operations, their words and numbers.

A :class:`Form` states one operation three ways: as a story sentence that
gives the answer (``... 3563 sacks in all.``), and as a word problem (a body
and a question, SVAMP-style) whose answer follows as ``The answer is 3563.``.
There are 12 forms per operation. Some state the numbers in the reverse of
the call's order (``Take 17 jars away from 240 jars``), some ask the question
first (``How many ... if ...?``), and any form may write its numbers with
thousands separators (``6,305``).

Each form is tagged with its cue words (``in all``, ``difference``, ``per``,
``equally`` ...). :func:`split_forms` holds a third of the forms of each
operation out by seed, and part of the vocabulary (objects, first names):
held-out forms appear in no training text, only in the ``math_unseen``
evaluation set, but every cue tag of a held-out form also tags a training
form of the same operation, and every operation keeps training forms with the
numbers in either order. Held out is meant as a new composition of known
words, not a new meaning (docs/design.md, "The small world"). The tags are
coarser than the words: ``sub-how-many-more`` and ``sub-fewer`` share
``more_than``, though "more" means + in every training form that says it.

Two-step problems (chained calls) are in :mod:`toolformer.smallworld.twostep`.
"""

from __future__ import annotations

import json
import random
import re
from dataclasses import dataclass
from importlib import resources

OPS = ("+", "-", "*", "/")
APPLY = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b, "/": lambda a, b: a // b}
OP_NAMES = {"+": "Addition", "-": "Subtraction", "*": "Multiplication", "/": "Common-Division"}

UNITS = [("sacks", "sack"), ("eggs", "egg"), ("apples", "apple"), ("jars", "jar"), ("bricks", "brick"),
         ("fish", "fish"), ("loaves", "loaf"), ("barrels", "barrel"), ("books", "book"), ("candles", "candle"),
         ("baskets", "basket"), ("lamps", "lamp"), ("coats", "coat"), ("planks", "plank"), ("stamps", "stamp"),
         ("nails", "nail"), ("buttons", "button"), ("cups", "cup"), ("bottles", "bottle"), ("ropes", "rope"),
         ("hats", "hat"), ("shoes", "shoe"), ("pears", "pear"), ("plums", "plum"), ("bowls", "bowl"),
         ("spoons", "spoon"), ("tiles", "tile"), ("boards", "board"), ("kettles", "kettle"), ("combs", "comb"),
         ("sheep", "sheep"), ("geese", "goose"), ("pens", "pen"), ("maps", "map"), ("bells", "bell"),
         ("nets", "net")]
FIRST_NAMES = ["Tom", "Alice", "Ben", "Clara", "Sam", "Lucy", "Jack", "Emma", "Paul", "Rosa", "Hugo", "Ida",
               "Max", "Nora", "Leo", "Greta", "Otto", "Maya", "Felix", "Lena", "Oscar", "Hans", "Karl", "Eva"]
ACTORS = ["The mill in {T}", "The market of {T}", "The baker of {T}", "The farm at {T}", "The school in {T}",
          "{P}", "{P}"]


@dataclass(frozen=True)
class Form:
    op: str
    key: str
    story: str
    """A sentence stating the answer ``{c}`` with the operands ``{a}`` and ``{b}``."""
    body: str
    """The situation without the answer (a word problem's body; empty when the question comes first)."""
    question: str
    """The question of the word problem."""
    cues: tuple[str, ...]
    """The words that name the operation; a held-out form's cues all occur in training forms."""
    reversed: bool = False
    """The problem states ``{b}`` before ``{a}`` (the call is still ``a op b``)."""


_FORM_FIELDS = {"key", "op", "cues", "story", "body", "question"}


def _load_forms(name: str) -> list[Form]:
    """The forms of the package data file ``forms/<name>.json``, in order: a list of groups
    ``{"group": ..., "forms": [{"key", "op", "cues", "story", "body", "question", "reversed"?}]}``."""
    path = resources.files("toolformer.smallworld").joinpath(f"forms/{name}.json")
    forms = []
    for group in json.loads(path.read_text(encoding="utf-8")):
        for i, f in enumerate(group["forms"]):
            if set(f) - {"reversed"} != _FORM_FIELDS:
                raise ValueError(f"{path}: form {i} of group {group['group']!r} has the fields {sorted(f)}, "
                                 f"not {sorted(_FORM_FIELDS)} (and optionally 'reversed')")
            forms.append(Form(f["op"], f["key"], f["story"], f["body"], f["question"], tuple(f["cues"]),
                              bool(f.get("reversed", False))))
    return forms


FORMS = _load_forms("forms")
# Forms that only training text uses (``world.extra_train_forms``): never held out, so the split of
# :data:`FORMS` and the ``math_unseen`` forms stay those of the seed. More ways to say each operation in training
# make the held-out forms a new composition of more known words: other verbs, a number in the question, two
# sentences, the bare operation words (``plus``, ``multiplied by``), a comparison ("how many more ... need").
# The last four of each operation say the scene words of other operations' forms (families, crowns paid, a
# cart's trips, an orchard's trees, a hall's seats, teams, weeks): in :data:`FORMS` most scene words come with
# one operation only, and a model then takes the operation from the scene ("families" → ÷) instead of from the
# words that state it (SCENE_WORDS; ``tests/test_world.py`` checks that training says each with two or more).
EXTRA_FORMS = _load_forms("extra_forms")
# Forms that training text uses with ``world.scene_forms``: never held out. In :data:`FORMS` and
# :data:`EXTRA_FORMS` many words that state no operation come with one operation only ("bought" says + in
# add-bought, × in mul-price; "trips" × in training, ÷ in div-trips), so holding a form out can leave its
# words saying another operation in every training text. These say each such word with an operation its forms
# do not use, so that for every seed each word of a held-out form other than its cue words is said with two
# operations or more in training (``tests/test_world.py``): the operation has to come from the cue words.
SCENE_FORMS = _load_forms("scene_forms")
SCENE_WORDS = ("families", "crowns", "paid", "cart", "trip", "orchard", "trees", "hall", "seats", "rows", "teams",
               "workers", "weeks", "earned")
"""Words that set a scene and state no operation; with the extra forms training says each with two or more."""
# No object word in them: held-out object words are drawn from those no form writes (split_forms).
assert not {w for u in UNITS for w in u} & set(re.findall(r"[a-z]+", " ".join(
    f.story + f.body + f.question for f in EXTRA_FORMS).lower())), "an object word in EXTRA_FORMS"
assert not {w for u in UNITS for w in u} & set(re.findall(r"[a-z]+", " ".join(
    f.story + f.body + f.question for f in SCENE_FORMS).lower())), "an object word in SCENE_FORMS"
FORM_KEYS = {f.key: f for f in [*FORMS, *EXTRA_FORMS, *SCENE_FORMS]}
assert len(FORM_KEYS) == len(FORMS) + len(EXTRA_FORMS) + len(SCENE_FORMS)


@dataclass(frozen=True)
class Split:
    """Which forms and words training text may use, and which only ``*_unseen`` evaluation items use."""

    train_forms: tuple[Form, ...]
    heldout_forms: tuple[Form, ...]
    train_units: tuple[tuple[str, str], ...]
    heldout_units: tuple[tuple[str, str], ...]
    train_names: tuple[str, ...]
    heldout_names: tuple[str, ...]

    @property
    def extra(self) -> bool:
        """Training uses :data:`EXTRA_FORMS` as well (``world.extra_train_forms``)."""
        return EXTRA_FORMS[0] in self.train_forms

    @property
    def scene(self) -> bool:
        """Training uses :data:`SCENE_FORMS` as well (``world.scene_forms``)."""
        return SCENE_FORMS[0] in self.train_forms

    def forms(self, op: str, heldout: bool = False) -> list[Form]:
        return [f for f in (self.heldout_forms if heldout else self.train_forms) if f.op == op]

    def record(self) -> dict:
        return {"train_forms": [f.key for f in self.train_forms], "heldout_forms": [f.key for f in self.heldout_forms],
                "train_units": [u for u, _ in self.train_units], "heldout_units": [u for u, _ in self.heldout_units],
                "train_names": list(self.train_names), "heldout_names": list(self.heldout_names)}


def _valid_heldout(op_forms: list[Form], held: list[Form]) -> bool:
    train = [f for f in op_forms if f not in held]
    known = {c for f in train for c in f.cues}
    return (all(set(f.cues) <= known for f in held) and any(f.reversed for f in train)
            and any(not f.reversed for f in train))


def split_forms(seed: int, heldout_per_op: int = 4, vocab_heldout: float = 0.25, extra_train: bool = False,
                scene_train: bool = False) -> Split:
    """Hold out ``heldout_per_op`` forms of each operation and a share of the
    objects and first names, by seed (see the module docstring); with
    ``extra_train`` the training forms add :data:`EXTRA_FORMS`, with
    ``scene_train`` :data:`SCENE_FORMS` (the held-out ones stay the same)."""
    rng = random.Random(f"{seed}-forms")
    held: list[Form] = []
    for op in OPS:
        op_forms = [f for f in FORMS if f.op == op]
        for _ in range(10_000):
            pick = rng.sample(op_forms, heldout_per_op)
            if _valid_heldout(op_forms, pick):
                held += pick
                break
        else:
            raise ValueError(f"world: no split of the {op} forms keeps every held-out cue in training")
    # Only words no other text of the world uses can be held out ("jar" is in "a jar of honey").
    from toolformer.smallworld.entities import GOODS

    other_text = set(re.findall(r"[a-z]+", " ".join([*GOODS, *(f.story + f.body + f.question for f in FORMS)])))
    eligible = [u for u in UNITS if not set(u) & other_text]
    names = list(FIRST_NAMES)
    rng.shuffle(eligible)
    rng.shuffle(names)
    nu, nn = round(len(UNITS) * vocab_heldout), round(len(names) * vocab_heldout)
    held_units = eligible[:nu]
    train = ([f for f in FORMS if f not in held] + (EXTRA_FORMS if extra_train else [])
             + (SCENE_FORMS if scene_train else []))
    return Split(tuple(train), tuple(f for f in FORMS if f in held),
                 tuple(u for u in UNITS if u not in held_units), tuple(held_units), tuple(names[nn:]),
                 tuple(names[:nn]))


def _operands(rng: random.Random, op: str, size: str) -> tuple[int, int]:
    """Two operands of ``op`` by size: "small" mixes 2- to 4-digit numbers (pre-training), "large" keeps
    the 3-4-digit operations the tiny model cannot compute."""
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


def written(n: int, separators: bool) -> str:
    """A number as the text writes it: ``6,305`` with separators, else ``6305``."""
    return f"{n:,}" if separators else str(n)


@dataclass
class Item:
    """One arithmetic fact ``a op b = c`` dressed in a form."""

    form: Form
    a: int
    b: int
    c: str
    slots: dict
    separators: bool = False
    """Operands of 1,000 and more written with thousands separators (the answer and the call never are)."""

    @property
    def op(self) -> str:
        return self.form.op

    @property
    def call_input(self) -> str:
        return f"{self.a} {self.op} {self.b}"

    def _fill(self, text: str) -> str:
        return text.format(a=written(self.a, self.separators), b=written(self.b, self.separators), **self.slots)

    def story(self) -> tuple[str, int]:
        """The story sentence and the character offset of the answer in it."""
        head, tail = self.form.story.split("{c}")
        head = self._fill(head)
        return head + self.c + self._fill(tail), len(head)

    def body(self) -> str:
        return self._fill(self.form.body)

    def question(self) -> str:
        return self._fill(self.form.question)

    def prompt(self) -> str:
        """Body and question, as an evaluation prompt reads them."""
        return f"{self.body()} {self.question()}".strip()

    def problem(self) -> tuple[str, int]:
        """Body, question and ``The answer is c.``; with the answer's offset."""
        head = f"{self.prompt()} The answer is "
        return f"{head}{self.c}.", len(head)

    def numbers(self) -> list[tuple[str, str]]:
        """(number, unit word or "") for filler sentences that repeat them."""
        units, story = self.slots["units"], self.form.story
        return [(written(self.a, self.separators), units if "{a} {units}" in story else ""),
                (written(self.b, self.separators), units if "{b} {units}" in story else ""),
                (self.c, units if "{c} {units}" in story else "")]


def make_item(rng: random.Random, size: str, towns: list[str], people: list[str], forms: list[Form],
              units: list[tuple[str, str]], names: list[str], separators: float = 0.0) -> Item:
    """A random arithmetic item in one of ``forms``, with one of ``units`` and a
    person from ``people`` or ``names``; numbers written with separators at the
    rate ``separators``."""
    form = rng.choice(forms)
    while True:
        a, b = _operands(rng, form.op, size)
        c = str(APPLY[form.op](a, b))  # whole numbers: / divides exactly (tests check against the Calculator)
        if c not in (str(a), str(b)):
            break
    return Item(form, a, b, c, fill_slots(rng, towns, people, units, names), rng.random() < separators)


def fill_slots(rng: random.Random, towns: list[str], people: list[str], units: list[tuple[str, str]],
           names: list[str]) -> dict:
    """The words of an item: a unit, two towns, a person from ``people`` or ``names``, an actor."""
    plural, singular = rng.choice(units)
    t, t2 = rng.sample(towns, 2)
    person = rng.choice(names) if rng.random() < 0.5 else rng.choice(people)
    actor = rng.choice(ACTORS).format(T=t, P=person)
    return {"Actor": actor, "units": plural, "unit": singular, "T": t, "T2": t2, "P": person}


# Sentences that repeat an earlier number: in-context copying is what lets a
# call's result, put before the text, lower the loss at the answer.
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
