"""The entities of the small world and the facts they make up.

Every name is invented by joining syllables, so no fact can leak in from
anywhere else. A world is a list of :class:`Fact` records; each fact knows the
question that asks for it (what the QA tool is called with) and the sentences
that state it (what the corpora say). Facts are split three ways:

* ``pretrain``: stated in the pre-training corpus (the base model may know them);
* ``corpus``: stated only in the annotation corpus (a QA call helps there);
* ``eval``: stated nowhere but in the tools' data (the QA evaluation asks them).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

# Syllables per kind of name; joined two (or three) at a time.
TOWN_HEADS = ["Al", "Bel", "Cor", "Dun", "Eld", "Fen", "Gar", "Hal", "Ith", "Kel", "Lor", "Mar", "Nor", "Pel",
              "Quen", "Ros", "Sal", "Tor", "Ul", "Ves", "Wen", "Yar", "Brae", "Cal", "Dra", "Hes", "Mor", "Thal"]
TOWN_TAILS = ["mere", "ford", "wick", "dale", "moor", "holt", "ton", "by", "stead", "wyn", "brook", "combe",
              "gate", "ley", "thorpe", "haven", "field", "stow"]
RIVER_PARTS = ["Os", "Vel", "Tam", "Ir", "Sev", "Lun", "Ad", "Ket", "Om", "Ner", "Ys", "Av"]
RIVER_TAILS = ["ter", "la", "ra", "wen", "ish", "et", "orn", "el", "an", "ey"]
RANGE_HEADS = ["Gren", "Carn", "Sto", "Bry", "Hol", "Mael", "Tir", "Vor"]
RANGE_TAILS = ["nock", "adh", "rig", "mont", "fell", "ach"]
SEA_NAMES = ["Sallow", "Gannet", "Myrr", "Tethra", "Orle", "Pelagos"]
FIRST_PARTS = ["Ma", "To", "E", "Li", "An", "Be", "Ro", "Sa", "Ja", "Ni", "O", "Ha", "Ca", "Mi", "Da", "Ve"]
FIRST_TAILS = ["ra", "bin", "lise", "na", "sel", "tram", "wen", "dric", "lo", "mund", "ra", "ly", "ric", "tha"]
LAST_PARTS = ["Quil", "Ren", "Ash", "Brom", "Cad", "Dor", "Fal", "Grim", "Hart", "Lark", "Mos", "Pell", "Stav",
              "Thorn", "Wex", "Yell", "Kirr", "Orm"]
LAST_TAILS = ["lon", "wick", "by", "ett", "ow", "ing", "aby", "er", "ston", "ard", "ley", "iver"]

PROFESSIONS = ["miller", "engineer", "painter", "teacher", "baker", "sailor", "weaver", "doctor", "mason",
               "poet", "carpenter", "brewer", "judge", "printer", "glassmaker"]
# (what is priced, its unit of price)
GOODS = ["a loaf of bread", "a sack of flour", "a barrel of ale", "a pound of salt", "a bale of wool",
         "a pair of boots", "a jar of honey", "a basket of pears"]
EVENT_KINDS = ["flood", "fire", "fair", "bridge", "treaty"]

# Ways to ask for each kind of fact: eight per relation. ``split_questions``
# holds some out by seed; those appear only in the ``qa_unseen`` evaluation set.
# ``{s}``: the subject as asked; ``{g}``: the priced good.
QUESTION_FORMS = {
    "river.length": ["How long is the {s}?", "What is the length of the {s}?", "How many kilometres long is the {s}?",
                     "What length does the {s} have?", "Do you know how long the {s} is?",
                     "The {s} is how many kilometres long?", "How long a river is the {s}?",
                     "What is the length of the {s} in kilometres?"],
    "river.source": ["Where does the {s} rise?", "Where is the source of the {s}?", "In which hills does the {s} rise?",
                     "What hills does the {s} rise in?", "Do you know where the {s} rises?",
                     "The {s} rises in which hills?", "Where does the {s} have its source?",
                     "From which hills does the {s} come?"],
    "river.mouth": ["Into which sea does the {s} flow?", "Which sea does the {s} flow into?",
                    "Where does the {s} flow to?", "What sea is at the mouth of the {s}?",
                    "Do you know which sea the {s} flows into?", "The {s} flows into which sea?",
                    "Where is the mouth of the {s}?", "Into what sea does the {s} empty?"],
    "range.height": ["How high is the highest point of the {s}?", "What is the height of the {s}?",
                     "How many metres high are the {s}?", "How tall are the {s} at their highest point?",
                     "Do you know how high the {s} are?", "The {s} rise to how many metres?",
                     "What height do the {s} reach?", "How high do the {s} rise?"],
    "town.founded": ["In what year was {s} founded?", "When was {s} founded?", "What year was {s} founded in?",
                     "In which year was the town of {s} founded?", "Do you know when {s} was founded?",
                     "{s} was founded in what year?", "When was the town of {s} founded?",
                     "What is the founding year of {s}?"],
    "town.population": ["What is the population of {s}?", "How many people live in {s}?",
                        "How many people is {s} home to?", "What is the number of people living in {s}?",
                        "Do you know the population of {s}?", "{s} has a population of how many?",
                        "How large is the population of {s}?", "How many inhabitants does {s} have?"],
    "town.river": ["Which river flows through {s}?", "On which river does {s} lie?", "What river runs through {s}?",
                   "Which river is {s} on?", "Do you know which river flows through {s}?", "{s} lies on which river?",
                   "What is the river of {s}?", "Through {s} flows which river?"],
    "town.price": ["How much does {g} cost in {s}?", "What is the price of {g} in {s}?", "What does {g} cost in {s}?",
                   "How much is {g} at the market of {s}?", "Do you know what {g} costs in {s}?",
                   "In {s}, how much does {g} cost?", "For how much does {g} sell in {s}?",
                   "How many crowns does {g} cost in {s}?"],
    "town.mayor": ["Who is the mayor of {s}?", "Who leads {s} as mayor?", "What is the name of the mayor of {s}?",
                   "Who is {s} led by?", "Do you know who the mayor of {s} is?", "The mayor of {s} is who?",
                   "Which person is mayor of {s}?", "Who serves as the mayor of {s}?"],
    "person.born": ["In what year was {s} born?", "When was {s} born?", "What year was {s} born in?",
                    "What is the birth year of {s}?", "Do you know when {s} was born?", "{s} was born in what year?",
                    "In which year was {s} born?", "What was the year of birth of {s}?"],
    "person.birthplace": ["In which town was {s} born?", "Where was {s} born?", "What is the birthplace of {s}?",
                          "Which town is {s} from?", "Do you know where {s} was born?", "{s} was born in which town?",
                          "What town was {s} born in?", "Which town was the birthplace of {s}?"],
    "person.profession": ["What was the profession of {s}?", "What did {s} work as?", "What was the job of {s}?",
                          "What work did {s} do?", "Do you know what {s} worked as?", "{s} worked as what?",
                          "What was {s} by profession?", "Which trade did {s} follow?"],
    "person.died": ["In what year did {s} die?", "When did {s} die?", "What year did {s} die in?",
                    "What is the year of death of {s}?", "Do you know when {s} died?", "{s} died in what year?",
                    "In which year did {s} die?", "What was the year {s} died?"],
    "event.year": ["{canonical}", "When was the {s}?", "What year was the {s}?", "In which year was the {s}?",
                   "Do you know the year of the {s}?", "The {s} was in what year?", "What is the year of the {s}?",
                   "Which year is the {s} known for?"],
}


def ask(kind: str, s: str, g: str = "", canonical: str = "") -> list[str]:
    """Every question form of ``kind`` about subject ``s``."""
    return [q.format(s=s, g=g, canonical=canonical) for q in QUESTION_FORMS[kind]]


def split_questions(seed: int, heldout: int = 3) -> dict[str, tuple[list[int], list[int]]]:
    """Per relation kind, the indices of its training and held-out question forms."""
    rng = random.Random(f"{seed}-questions")
    out = {}
    for kind in sorted(QUESTION_FORMS):
        idx = list(range(len(QUESTION_FORMS[kind])))
        rng.shuffle(idx)
        out[kind] = (sorted(idx[heldout:]), sorted(idx[:heldout]))
    return out


@dataclass
class Fact:
    """One (subject, relation, object) triple of the world, with its wording."""

    kind: str
    """Relation kind, e.g. ``town.population``."""
    subject: str
    relation: str
    """Words the QA retrieval matches against questions."""
    object: str
    questions: list[str]
    """Every way of asking for ``object`` (:data:`QUESTION_FORMS` of ``kind``): the QA tool's inputs."""
    sentences: list[str]
    """Ways of stating the fact; ``sentences[0]`` is the canonical ``text``.
    Each contains ``{o}`` where the object goes; the subject comes before it."""
    aliases: list[str] = field(default_factory=list)
    """Other names of the subject (``Oster`` for ``River Oster``)."""
    answer_aliases: list[str] = field(default_factory=list)
    """Other accepted forms of the answer (``4,210`` for ``4210``)."""
    split: str = ""
    """pretrain, corpus or eval (see the module docstring)."""

    @property
    def question(self) -> str:
        """The first question form."""
        return self.questions[0]

    def text(self, variant: int = 0) -> str:
        return self.sentences[variant % len(self.sentences)].replace("{o}", self.object)

    def record(self) -> dict:
        """A line of knowledge.jsonl."""
        rec: dict[str, object] = {"subject": self.subject, "relation": self.relation, "object": self.object,
                                  "text": self.text()}
        if self.aliases:
            rec["aliases"] = list(self.aliases)
        rec["split"] = self.split  # where the fact is stated; the QA tool ignores it
        return rec


def number_aliases(value: int, unit: str = "") -> list[str]:
    """``4,210`` for 4210 and ``212 kilometres`` for a unit."""
    out = [f"{value:,}"] if value >= 1000 else []
    if unit:
        out.append(f"{value} {unit}")
    return out


@dataclass
class World:
    """The entities by kind and every fact about them."""

    towns: list[str]
    rivers: list[str]
    ranges: list[str]
    seas: list[str]
    people: list[str]
    events: list[str]
    facts: list[Fact]

    def split(self, name: str) -> list[Fact]:
        return [f for f in self.facts if f.split == name]

    def names(self) -> list[str]:
        return [*self.towns, *self.rivers, *(r.split()[-1] for r in self.rivers), *self.ranges, *self.seas,
                *self.people, *self.events]


class _Namer:
    """Invents names that are unique, word by word, across the whole world."""

    def __init__(self, rng: random.Random):
        self.rng = rng
        self.used: set[str] = set()

    def make(self, heads: list[str], tails: list[str]) -> str:
        for _ in range(1000):
            name = self.rng.choice(heads) + self.rng.choice(tails)
            if name.lower() not in self.used and len(name) > 3:
                self.used.add(name.lower())
                return name
        raise ValueError(f"world: ran out of names from {heads[:3]}...; lower the entity counts")


def _distinct(rng: random.Random, lo: int, hi: int, taken: set[int]) -> int:
    """A number in [lo, hi] not in ``taken`` (numbers of one subject differ, so
    the leak guard never confuses two of its facts)."""
    while True:
        v = rng.randint(lo, hi)
        if v not in taken:
            taken.add(v)
            return v


def river_facts(rng: random.Random, short: str, ranges: list[str], seas: list[str]) -> list[Fact]:
    name, length = f"River {short}", rng.randint(20, 900)
    return [
        Fact("river.length", name, "length how long kilometres far", str(length), ask("river.length", short),
             [f"The {short} is {{o}} kilometres long.", f"The length of the {short} is {{o}} kilometres."],
             [short], number_aliases(length, "kilometres")),
        Fact("river.source", name, "rises source where hills", rng.choice(ranges), ask("river.source", short),
             [f"The {short} rises in the {{o}}.", f"The source of the {short} is in the {{o}}."], [short]),
        Fact("river.mouth", name, "flows into which sea mouth", rng.choice(seas),
             ask("river.mouth", short),
             [f"The {short} flows into the {{o}}.", f"The mouth of the {short} opens onto the {{o}}."], [short]),
    ]


def range_facts(rng: random.Random, r: str) -> list[Fact]:
    height = rng.randint(400, 2900)
    return [Fact("range.height", r, "highest point how high metres height tall", str(height),
                 ask("range.height", r),
                 [f"The highest point of the {r} is {{o}} metres high.",
                  f"The {r} rise to {{o}} metres at their highest point."], [], number_aliases(height, "metres"))]


def town_facts(rng: random.Random, t: str, rivers: list[str], mayor: str | None, numbers: set[int]) -> list[Fact]:
    """``numbers``: numbers already said of the town (kept distinct)."""
    founded = _distinct(rng, 1100, 1790, numbers)
    population = _distinct(rng, 1200, 98000, numbers)
    price = _distinct(rng, 2, 90, numbers)
    good = rng.choice(GOODS)
    facts = [
        Fact("town.founded", t, "founded in what year when founding", str(founded), ask("town.founded", t),
             [f"{t} was founded in {{o}}.", f"The town of {t} was founded in {{o}}.",
              f"{t} has stood since it was founded in {{o}}."]),
        Fact("town.population", t, "population how many people live inhabitants", str(population),
             ask("town.population", t),
             [f"{t} has a population of {{o}}.", f"The population of {t} is {{o}}.", f"{t} is home to {{o}} people."],
             [], number_aliases(population)),
        Fact("town.river", t, "river flows through which runs lies", rng.choice(rivers), ask("town.river", t),
             [f"{t} lies on the river {{o}}.", f"The river that flows through {t} is the {{o}}."]),
        Fact("town.price", t, f"price cost how much crowns {good}", f"{price} crowns", ask("town.price", t, good),
             [f"In {t}, {good} costs {{o}}.", f"At the market of {t}, {good} sells for {{o}}."], [], [str(price)]),
    ]
    if mayor:
        facts.append(Fact("town.mayor", t, "mayor who leads led", mayor, ask("town.mayor", t),
                          [f"The mayor of {t} is {{o}}.", f"{t} is led by its mayor, {{o}}."]))
    return facts


def person_facts(rng: random.Random, p: str, birthplace: str) -> list[Fact]:
    born = rng.randint(1790, 1900)
    return [
        Fact("person.born", p, "born in what year when birth", str(born), ask("person.born", p),
             [f"{p} was born in {{o}}.", f"{p} was born in the year {{o}}."]),
        Fact("person.birthplace", p, "born in which town birthplace where", birthplace, ask("person.birthplace", p),
             [f"{p} was born in the town of {{o}}.", f"The birthplace of {p} is {{o}}."]),
        Fact("person.profession", p, "profession work job what trade worked", rng.choice(PROFESSIONS),
             ask("person.profession", p), [f"{p} worked as a {{o}}.", f"By profession {p} was a {{o}}."]),
        Fact("person.died", p, "died die in what year when death", str(born + rng.randint(35, 90)),
             ask("person.died", p), [f"{p} died in {{o}}.", f"{p} died in the year {{o}}."]),
    ]


def _ask_event(name: str, canonical: str) -> list[str]:
    return ask("event.year", name, canonical=canonical)


def event_fact(rng: random.Random, t: str, kind: str, numbers: set[int]) -> Fact:
    """A dated event of town ``t``: flood, fire, fair, bridge or treaty."""
    year = str(_distinct(rng, 1800, 1945, numbers))
    if kind in ("flood", "fire"):
        name = f"Great {kind.title()} of {t}"
        return Fact("event.year", name, "happened in what year when", year,
                    _ask_event(name, f"In what year was the {name}?"),
                    [f"The {name} happened in {{o}}.", f"The {name} struck in the year {{o}}."])
    if kind == "fair":
        name = f"{t} Fair"
        return Fact("event.year", name, "first held in what year when", year,
                    _ask_event(name, f"In what year was the first {name} held?"),
                    [f"The first {name} was held in {{o}}.", f"The {name} was first held in {{o}}."])
    if kind == "bridge":
        name = f"{t} Bridge"
        return Fact("event.year", name, "opened open in what year when", year,
                    _ask_event(name, f"In what year did the {name} open?"),
                    [f"The {name} opened in {{o}}.", f"The {name} was opened in the year {{o}}."])
    name = f"Treaty of {t}"
    return Fact("event.year", name, "signed sign in what year when", year,
                _ask_event(name, f"In what year was the {name} signed?"),
                [f"The {name} was signed in {{o}}.", f"The {name} was signed in the year {{o}}."])


def build_world(rng: random.Random, towns: int, rivers: int, ranges: int, seas: int, people: int,
                events: int) -> World:
    """Invent the entities and all facts about them (not yet split)."""
    namer = _Namer(rng)
    town_names = [namer.make(TOWN_HEADS, TOWN_TAILS) for _ in range(towns)]
    river_short = [namer.make(RIVER_PARTS, RIVER_TAILS) for _ in range(rivers)]
    range_names = [namer.make(RANGE_HEADS, RANGE_TAILS) + " Hills" for _ in range(ranges)]
    sea_names = [name + " Sea" for name in rng.sample(SEA_NAMES, min(seas, len(SEA_NAMES)))]
    person_names = []
    for _ in range(people):
        first = namer.make(FIRST_PARTS, FIRST_TAILS)
        person_names.append(f"{first} {namer.make(LAST_PARTS, LAST_TAILS)}")
    facts: list[Fact] = []
    numbers: dict[str, set[int]] = {t: set() for t in town_names}
    for short in river_short:
        facts += river_facts(rng, short, range_names, sea_names)
    for r in range_names:
        facts += range_facts(rng, r)
    birthplace = {p: rng.choice(town_names) for p in person_names}
    mayors = {}
    free = list(person_names)
    rng.shuffle(free)
    for t in town_names:
        # A mayor born elsewhere: two facts never join the same pair of names.
        pick = next((p for p in free if birthplace[p] != t), None)
        if pick is None:
            break
        free.remove(pick)
        mayors[t] = pick
    for t in town_names:
        facts += town_facts(rng, t, river_short, mayors.get(t), numbers[t])
    for p in person_names:
        facts += person_facts(rng, p, birthplace[p])
    event_names = []
    for t, kind in zip(rng.sample(town_names, min(events, len(town_names))),
                       [rng.choice(EVENT_KINDS) for _ in range(events)]):
        f = event_fact(rng, t, kind, numbers[t])
        event_names.append(f.subject)
        facts.append(f)
    return World(town_names, [f"River {s}" for s in river_short], range_names, sea_names, person_names,
                 event_names, facts)


class NonceFacts:
    """Facts about entities invented for one document only, never part of the
    world: their values cannot be memorised, so a pre-training document that
    announces them in a QA note teaches the model to copy the answer from the
    note (docs/design.md). Their names never reuse a word of the world's names."""

    def __init__(self, rng: random.Random, world: World):
        self.rng = rng
        self.taken = {w.lower() for name in world.names() for w in name.split()}

    def _name(self, heads: list[str], tails: list[str]) -> str:
        while True:
            name = self.rng.choice(heads) + self.rng.choice(tails)
            if name.lower() not in self.taken and len(name) > 3:
                return name

    def town(self) -> str:
        return self._name(TOWN_HEADS, TOWN_TAILS)

    def person(self) -> str:
        return f"{self._name(FIRST_PARTS, FIRST_TAILS)} {self._name(LAST_PARTS, LAST_TAILS)}"

    def facts(self) -> list[Fact]:
        """All facts of one new entity (a town, river, range, person or event)."""
        rng = self.rng
        kind = rng.choice(["town", "town", "person", "person", "river", "range", "event"])
        if kind == "town":
            return town_facts(rng, self.town(), [self._name(RIVER_PARTS, RIVER_TAILS)], self.person(), set())
        if kind == "person":
            return person_facts(rng, self.person(), self.town())
        if kind == "river":
            return river_facts(rng, self._name(RIVER_PARTS, RIVER_TAILS),
                               [self._name(RANGE_HEADS, RANGE_TAILS) + " Hills"], [rng.choice(SEA_NAMES) + " Sea"])
        if kind == "range":
            return range_facts(rng, self._name(RANGE_HEADS, RANGE_TAILS) + " Hills")
        return [event_fact(rng, self.town(), rng.choice(EVENT_KINDS), set())]


def split_facts(world: World, rng: random.Random, pretrain_share: float, corpus_share: float) -> None:
    """Assign every fact to pretrain / corpus / eval, stratified by relation kind."""
    by_kind: dict[str, list[Fact]] = {}
    for f in world.facts:
        by_kind.setdefault(f.kind, []).append(f)
    for kind in sorted(by_kind):
        group = by_kind[kind]
        rng.shuffle(group)
        n_pre = round(len(group) * pretrain_share)
        n_cor = round(len(group) * corpus_share)
        for i, f in enumerate(group):
            f.split = "pretrain" if i < n_pre else "corpus" if i < n_pre + n_cor else "eval"
