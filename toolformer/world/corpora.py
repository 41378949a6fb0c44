"""The texts of the small world: pre-training, annotation, held-out and eval.

The pre-training corpus teaches the base model what the filter needs it to
know (docs/design.md, "The small world"): to copy an answer stated earlier in the document. A share
of its arithmetic items and facts open the document with a note in the call
syntax, ``[Calculator(340 + 275) → 615] ...`` or ``[QA(question) → answer]
...``, exactly the prefix the filter puts before a text; another share state
the answer earlier in prose; filler sentences repeat earlier numbers. So the
tool names and the markers ``[ ] ( ) →`` are trained tokens too.

The annotation corpus has the same kinds of text with 3-4-digit arithmetic and
the facts the pre-training corpus left out, and no notes: that is where the
pipeline inserts calls. Its records carry the gold calls (``gold_calls``) for
the copy probe and for measuring what the filter kept. Two-step documents
(:meth:`Writer.twostep_doc`) add a problem whose worked answer needs two
calls, the second on the first one's result (chained calls).
"""

from __future__ import annotations

import datetime as dt
import functools
import random
import re
import string
from collections import defaultdict

from toolformer.tools.calendar import date_sentence
from toolformer.tools.calls import get_style
from toolformer.world.arithmetic import (
    FORMS,
    OP_NAMES,
    OPS,
    UNITS,
    Item,
    Split,
    earlier,
    filler,
    make_item,
    written,
)
from toolformer.world.entities import QUESTION_FORMS, TOWN_HEADS, TOWN_TAILS, Fact, NonceFacts, World
from toolformer.world.twostep import TWOSTEP_FORMS, TwoStepForm, TwoStepItem, make_twostep

STYLE = get_style("plain")  # the paper's `[tool(input) → result]`
NONCE_NOTE_SHARE = 0.8  # facts of invented entities announced by a QA note
INLINE_NOTE_SHARE = 0.5  # notes put inline, right before the answer, instead of at the document start
# Words inserted at random into a text (``noise_share``): they make the wording of a question or problem
# unpredictable, so a call that repeats it must be copied, not recalled from a template. None names an
# operation, a time or a place.
NOISE_WORDS = ("indeed", "perhaps", "quietly", "certainly", "old", "green", "famous", "busy", "bright", "simply",
               "really", "truly", "clearly", "happily", "oddly", "fine", "dear", "well", "plain", "good", "kind",
               "red", "blue", "quite", "rather", "surely", "anyway", "though", "sadly", "luckily")
_WORDS = re.compile(r"\w+")
NOTE_SEPARATOR = "\n"  # after a note, as the filter puts it after a call prefix (filter.prefix_separator)

DATE_SENTENCES = [
    "The council of {T} met on {d}.",
    "On {d}, the fair in {T} opened its gates.",
    "The new school in {T} was opened on {d}.",
    "A storm reached {T} on {d}.",
]


INDUCTION_MIDDLES = ["Once more:", "Again:", "The list was read twice.", "The clerk of {T} repeated it:",
                     "Then the same words again:", "Word for word:"]

COPY_TEMPLATES = [
    "The clerk of {T} read out {said}. The scribe wrote down {said}.",
    "Stock at {T}: {said}. Counted again the next day: {said}.",
    "The ledger of {T} lists {said}. The copy of the ledger lists {said}.",
]


def date_words(d: dt.date) -> str:
    """``Monday, March 3, 1921``: the date as the Calendar tool's result says it."""
    return f"{d:%A}, {d:%B} {d.day}, {d.year}"


def random_date(rng: random.Random, first: int = 1900, last: int = 1950) -> dt.date:
    start = dt.date(first, 1, 1).toordinal()
    return dt.date.fromordinal(rng.randint(start, dt.date(last, 12, 31).toordinal()))


class LeakGuard:
    """Says whether a text states a forbidden fact: the fact's subject (or an
    alias) and its object in the same document."""

    def __init__(self, facts: list[Fact]):
        self.by_word: dict[str, list[tuple[re.Pattern, str, re.Pattern]]] = defaultdict(list)
        for f in facts:
            obj = re.compile(rf"(?<!\w){re.escape(f.object)}(?!\w)")
            for name in (f.subject, *f.aliases):
                key = max(name.split(), key=len)
                self.by_word[key].append((re.compile(rf"(?<!\w){re.escape(name)}(?!\w)"), f.object, obj))

    def ok(self, text: str) -> bool:
        for word in set(_WORDS.findall(text)):
            for name, obj_text, obj in self.by_word.get(word, ()):
                # Substring tests first: the regexes only confirm word boundaries.
                if obj_text in text and name.search(text) and obj.search(text):
                    return False
        return True


class Writer:
    """Builds documents from a world; one instance per corpus."""

    def __init__(self, world: World, rng: random.Random, facts: list[Fact], split: Split,
                 questions: dict[str, list[int]], note_share: float = 0.0, earlier_share: float = 0.0,
                 problem_share: float = 0.3, filler_share: float = 0.5, nonce_share: float = 0.0,
                 noise_share: float = 0.0, separators: float = 0.0, heldout: bool = False, text_order: bool = False,
                 rewrite_share: float = 0.0, rewrite_math_share: float = 0.0):
        """``split`` and ``questions`` (kind -> indices of the question forms
        to use) say which forms and words this corpus may use; ``heldout``
        picks the held-out forms and, for half the items, held-out words."""
        self.world, self.rng = world, rng
        self.nonce = NonceFacts(rng, world) if nonce_share > 0 else None
        self.nonce_share = nonce_share
        self.facts = facts
        self.by_subject: dict[str, list[Fact]] = defaultdict(list)
        for f in facts:
            self.by_subject[f.subject].append(f)
        self.subjects = sorted(self.by_subject)
        self.split, self.questions, self.heldout = split, questions, heldout
        self.note_share, self.earlier_share = note_share, earlier_share
        self.problem_share, self.filler_share = problem_share, filler_share
        self.noise_share, self.separators = noise_share, separators
        self.text_order, self.rewrite_share = text_order, rewrite_share
        self.rewrite_math_share = rewrite_math_share

    def ask(self, fact: Fact) -> str:
        """One of the question forms this corpus may use for ``fact``."""
        return fact.questions[self.rng.choice(self.questions[fact.kind])]

    def noisy(self, text: str) -> str:
        """``text`` with 1-3 words of :data:`NOISE_WORDS` inserted between its words."""
        words = text.split(" ")
        for _ in range(self.rng.randint(1, 3)):
            words.insert(self.rng.randint(1, len(words)), self.rng.choice(NOISE_WORDS))
        return " ".join(words)

    # -- arithmetic ------------------------------------------------------------
    def call_input(self, item: Item) -> str:
        """The call of ``item`` as this corpus writes it: ``a op b``, or with ``text_order`` the numbers of + and *
        in the order the text states them (``b op a`` for a reversed form), as the filter keeps them (both orders
        give the same result, and the one the text shows comes first)."""
        if self.text_order and item.form.reversed and item.op in "+*":
            return f"{item.b} {item.op} {item.a}"
        return item.call_input

    def item(self, size: str, op: str | None = None) -> Item:
        sp, rng = self.split, self.rng
        op = op or rng.choice(OPS)
        new_words = self.heldout and rng.random() < 0.5
        units = list(sp.heldout_units if new_words else sp.train_units)
        names = list(sp.heldout_names if new_words else sp.train_names)
        return make_item(rng, size, self.world.towns, self.world.people, sp.forms(op, self.heldout), units, names,
                         self.separators)

    def twostep(self, form: TwoStepForm | None = None) -> TwoStepItem:
        """A two-step item in ``form`` (or a random one), in training words: every two-step form is a seen form."""
        sp = self.split
        return make_twostep(self.rng, self.world.towns, self.world.people, form or self.rng.choice(TWOSTEP_FORMS),
                            list(sp.train_units), list(sp.train_names), self.separators)

    def twostep_doc(self) -> tuple[str, list[dict]]:
        """A two-step problem with its worked answer (``The answer is c1 + d = c.``), maybe a filler sentence;
        gold calls: ``a op b`` before ``c1``, then ``c1 op d`` before ``c``: the second call's input holds the
        first call's result."""
        item = self.twostep()
        text, at_c1, at_c = item.problem()
        first, second = item.calls
        gold = [{"tool": "Calculator", "input": first, "result": item.c1, "offset": at_c1, "part": 0},
                {"tool": "Calculator", "input": second, "result": item.c, "offset": at_c, "part": 0}]
        parts = [text]
        if self.rng.random() < self.filler_share:
            parts.append(filler(self.rng, item.numbers(), self.world.towns))
        return self._join([], parts, gold)

    def math_doc(self, size: str, max_items: int = 3) -> tuple[str, list[dict]]:
        """1..max_items arithmetic items; notes or earlier statements by the shares."""
        rng = self.rng
        notes: list[str] = []
        parts: list[str] = []
        gold: list[dict] = []
        numbers: list[tuple[str, str]] = []
        for item in (self.item(size) for _ in range(rng.randint(1, max_items))):
            mode = rng.random()
            sentence, offset = item.problem() if rng.random() < self.problem_share else item.story()
            if rng.random() < self.noise_share:
                head = self.noisy(sentence[:offset].rstrip(" ")) + " "
                sentence, offset = head + sentence[offset:], len(head)
            if mode < self.note_share:
                sentence, offset = self._note(notes, sentence, offset,
                                              STYLE.render("Calculator", self.call_input(item), item.c))
            elif mode < self.note_share + self.earlier_share:
                parts.append(earlier(rng, item))
            parts.append(sentence)
            gold.append({"tool": "Calculator", "input": self.call_input(item), "result": item.c, "offset": offset,
                         "part": len(parts) - 1})
            numbers += item.numbers()
            if rng.random() < self.filler_share:
                parts.append(filler(rng, numbers, self.world.towns))
        if self.facts and rng.random() < 0.2:
            # A known fact between the sentences, as text around numbers would have; its gold call is marked
            # `aside` (the tokenizer and the probes read the corpus without those: see tokenizer_texts).
            k = rng.randint(0, len(parts))
            fact = rng.choice(self.facts)
            variant = rng.randrange(len(fact.sentences))
            parts.insert(k, fact.text(variant))
            for g in gold:
                g["part"] += g["part"] >= k
            gold.append({"tool": "QA", "input": fact.questions[self.questions[fact.kind][0]], "result": fact.object,
                         "offset": fact.sentences[variant].index("{o}"), "part": k, "aside": True})
        rng.shuffle(notes)
        return self._join(notes, parts, gold)

    def _note(self, notes: list[str], sentence: str, offset: int, note: str) -> tuple[str, int]:
        """A call note at the document start (the filter's prefix) or inline,
        right before the answer at ``offset`` (where a tuned model writes the
        call, after the words it copies its input from); returns the sentence
        and the answer's offset."""
        if self.rng.random() < INLINE_NOTE_SHARE:
            head = sentence[:offset] + note + " "
            return head + sentence[offset:], len(head)
        notes.append(note)
        return sentence, offset

    @staticmethod
    def _join(notes: list[str], parts: list[str], gold: list[dict]) -> tuple[str, list[dict]]:
        """Notes each on a line of their own (the filter's prefix + separator
        ``\n``), then the sentences joined by spaces; part offsets become text
        offsets."""
        head = "".join(n + NOTE_SEPARATOR for n in notes)
        starts, pos = [], len(head)
        for p in parts:
            starts.append(pos)
            pos += len(p) + 1
        text = head + " ".join(parts)
        out = []
        for g in gold:
            char_start = starts[g["part"]] + g["offset"]
            assert text.startswith(g["result"], char_start), (text, g)
            out.append({"tool": g["tool"], "input": g["input"], "result": g["result"], "char_start": char_start,
                        **({"aside": True} if g.get("aside") else {})})
        return text, out

    # -- facts ------------------------------------------------------------------
    def _fact_part(self, fact: Fact, quiz: bool, question: str = "") -> tuple[str, int]:
        if quiz:
            head = f"Question: {question or self.ask(fact)} Answer: "
            return f"{head}{fact.object}.", len(head)
        template = fact.sentences[self.rng.randrange(len(fact.sentences))]
        head, tail = template.split("{o}")
        return head + fact.object + tail, len(head)

    def fact_doc(self, quiz: bool, wiki_share: float = 0.0) -> tuple[str, list[dict]]:
        """Facts about one subject (or a quiz over several). With ``nonce_share``
        the subject is invented for this document and its facts come with QA
        notes; otherwise the facts are the Writer's own, without notes."""
        rng = self.rng
        if self.nonce is not None and rng.random() < self.nonce_share:
            if quiz:
                chosen = [rng.choice(self.nonce.facts()) for _ in range(rng.randint(1, 4))]
            else:
                own = self.nonce.facts()
                chosen = rng.sample(own, rng.randint(1, len(own)))
            return self.facts_text(chosen, quiz, NONCE_NOTE_SHARE, wiki_share)
        if quiz:
            chosen = rng.sample(self.facts, min(len(self.facts), rng.randint(1, 4)))
        else:
            own = self.by_subject[rng.choice(self.subjects)]
            chosen = rng.sample(own, rng.randint(1, len(own)))
        return self.facts_text(chosen, quiz)

    def facts_text(self, chosen: list[Fact], quiz: bool, note_share: float = 0.0,
                   wiki_share: float = 0.0) -> tuple[str, list[dict]]:
        rng = self.rng
        notes, parts, gold = [], [], []
        if not quiz and rng.random() < wiki_share:
            f = chosen[0]
            known = " ".join(g.text() for g in chosen if g.subject == f.subject)
            notes.append(STYLE.render("WikiSearch", f"{f.subject} {f.relation.split()[0]}", f"{f.subject} > {known}"))
        for f in chosen:
            question = self.ask(f)
            if quiz and rng.random() < self.noise_share:
                question = self.noisy(question)
            sentence, offset = self._fact_part(f, quiz, question)
            if rng.random() < note_share:
                sentence, offset = self._note(notes, sentence, offset, STYLE.render("QA", question, f.object))
            parts.append(sentence)
            gold.append({"tool": "QA", "input": question, "result": f.object, "offset": offset,
                         "part": len(parts) - 1})
        rng.shuffle(notes)
        return self._join(notes, parts, gold)

    # -- copying ------------------------------------------------------------------
    def copy_doc(self) -> str:
        """A list of numbers said twice: dense in-context copying, which makes
        the model's induction (copy) heads form within the pre-training budget."""
        rng = self.rng
        numbers = [str(rng.randint(10 ** (d - 1), 10 ** d - 1)) for d in rng.choices([2, 3, 4, 5], k=rng.randint(3, 7))]
        if rng.random() < 0.5:
            said = ", ".join(numbers[:-1]) + " and " + numbers[-1]
        else:
            units = rng.sample(self.split.train_units, len(numbers))
            said = ", ".join(f"{n} {u}" for n, (u, _) in zip(numbers, units))
        return rng.choice(COPY_TEMPLATES).format(T=rng.choice(self.world.towns), said=said)

    def induction_doc(self) -> str:
        """A run of ordinary words, new names and numbers, a sentence, then the
        same run again: the second run can only be predicted by copying the
        first, whatever its words (induction heads form on such text)."""
        rng = self.rng
        run = []
        for _ in range(rng.randint(5, 12)):
            r = rng.random()
            if r < 0.35:
                run.append(rng.choice(self.split.train_units)[rng.randrange(2)])
            elif r < 0.6:
                run.append(str(rng.randint(10, 99_999)))
            elif r < 0.8:
                run.append(rng.choice(TOWN_HEADS) + rng.choice(TOWN_TAILS).lower())
            else:
                run.append(rng.choice(NOISE_WORDS))
        said = " ".join(run)
        return f"{said}. {rng.choice(INDUCTION_MIDDLES).format(T=rng.choice(self.world.towns))} {said}."

    def scrambled(self, text: str, drop: bool = True) -> str:
        """``text`` with its wording broken up: 1-3 random words inserted, 1-2 pairs of neighbouring words
        swapped and, with ``drop``, maybe one word left out. Words with a digit or a capital (numbers, names)
        and the sentence's first and last words stay where they are, so the text still names what it asks."""
        rng = self.rng
        words = text.split(" ")
        free = lambda i: 0 < i < len(words) - 1 and not re.search(r"[0-9A-Z]", words[i])  # noqa: E731
        if drop and rng.random() < 0.5:
            gone = [i for i in range(len(words)) if free(i)]
            if gone:
                del words[rng.choice(gone)]
        for _ in range(rng.randint(1, 2)):
            pairs = [i for i in range(len(words) - 1) if free(i) and free(i + 1)]
            if pairs:
                i = rng.choice(pairs)
                words[i], words[i + 1] = words[i + 1], words[i]
        for _ in range(rng.randint(1, 3)):
            words.insert(rng.randint(1, len(words) - 1), rng.choice(NOISE_WORDS))
        return " ".join(words)

    def rewritten(self, text: str, keep: frozenset[str] = frozenset()) -> str:
        """``text`` with about half its small words (no digit, no capital, not in ``keep``; punctuation kept)
        replaced by words drawn from :data:`NOISE_WORDS`, :data:`LOOSE_WORDS`, the training object words, words
        built from town syllables and strings of random letters (split by the tokenizer into rare pieces, as a
        word no training text has): a question no form writes, whose every word can only be predicted by copying
        it."""
        rng = self.rng
        words = text.split(" ")
        for i, word in enumerate(words):
            core = word.rstrip("?.,!")
            if core and core not in keep and not re.search(r"[0-9A-Z]", core) and rng.random() < 0.5:
                r = rng.random()
                if r < 0.25:
                    new = rng.choice(NOISE_WORDS + LOOSE_WORDS)
                elif r < 0.45:
                    new = rng.choice(self.split.train_units)[rng.randrange(2)]
                elif r < 0.7:
                    new = (rng.choice(TOWN_HEADS) + rng.choice(TOWN_TAILS)).lower()
                else:  # letters at random: a word the tokenizer splits into rare pieces, as an unseen word
                    new = random_letters(rng)
                words[i] = new + word[len(core):]
        return " ".join(words)

    def copycall_doc(self) -> str:
        """Problems and questions in scrambled wording (:meth:`scrambled`), each with its call inline right where
        a tuned model writes it: a call's input can only be predicted here by copying it from the text, never by
        recalling a form. Half the documents are 1-3 quiz questions about invented entities (``Question: q
        Answer: [QA(q) → o] o.``, the question copied word for word; a ``rewrite_share`` of them
        :meth:`rewritten` instead of scrambled), half 1-2 word problems (``... The answer
        is [Calculator(a op b) → c] c.``; a ``rewrite_math_share`` of them :meth:`rewritten`, keeping the words of
        the operation's cues and the object words: a problem no form writes, whose operation its cue still names)."""
        rng = self.rng
        parts = []
        if rng.random() < 0.5:
            nonce = self.nonce or NonceFacts(rng, self.world)
            for _ in range(rng.randint(1, 3)):
                fact = rng.choice(nonce.facts())
                heldout = {q for i, q in enumerate(fact.questions) if i not in self.questions[fact.kind]}
                # Only a non-zero share draws from the stream here: a world without it writes the same text.
                change = self.rewritten if self.rewrite_share and rng.random() < self.rewrite_share else self.scrambled
                question = change(self.ask(fact))
                while question in heldout:
                    question = change(self.ask(fact))
                parts.append(f"Question: {question} Answer: {STYLE.render('QA', question, fact.object)} "
                             f"{fact.object}.")
            return " ".join(parts)
        for _ in range(rng.randint(1, 2)):
            item = self.item("small")
            if self.rewrite_math_share and rng.random() < self.rewrite_math_share:
                head = self.rewritten(item.prompt(), self._cue_words(item))
            else:
                head = self.scrambled(item.prompt(), drop=False)
            parts.append(f"{head} The answer is {STYLE.render('Calculator', self.call_input(item), item.c)} {item.c}.")
        return " ".join(parts)

    def _cue_words(self, item: Item) -> frozenset[str]:
        """The words a rewritten problem keeps: those of its operation's cue phrases (:func:`cue_phrases`) and
        its object words."""
        return frozenset(" ".join(cue_phrases(self.split)[item.op]).split()) | {item.slots["units"],
                                                                              item.slots["unit"]}

    def cuecall_doc(self) -> str:
        """1-2 word problems of loose words around two numbers and one cue of an operation (:func:`cue_phrases`:
        a phrase only that operation's training forms use), each with its call inline: the operation follows the
        cue, not a form; + and * take the numbers in the order the text gives them, - and / the larger first, in
        either order of the text."""
        rng = self.rng
        cues = cue_phrases(self.split)
        parts = []
        for _ in range(rng.randint(1, 2)):
            op = rng.choice([o for o in OPS if cues[o]])
            item = self.item("small", op)
            first, second = (item.a, item.b) if rng.random() < 0.5 else (item.b, item.a)
            units = item.slots["units"]
            loose = lambda lo, hi: [rng.choice(LOOSE_WORDS) for _ in range(rng.randint(lo, hi))]  # noqa: E731
            slots = [[], [], []]
            rng.choice(slots).append(rng.choice(cues[op]))
            a, b = written(first, item.separators), written(second, item.separators)
            words = [rng.choice([item.slots["T"], item.slots["P"]]), *loose(1, 2), *slots[0], a, units,
                     *loose(0, 3), *slots[1], b, units, *loose(0, 2), *slots[2]]
            call = f"{first} {op} {second}" if op in "+*" else item.call_input
            parts.append(f"{' '.join(words)}? The answer is {STYLE.render('Calculator', call, item.c)} {item.c}.")
        return " ".join(parts)

    # -- dates ------------------------------------------------------------------
    def dated_doc(self, date: dt.date) -> tuple[str, list[dict]]:
        """A date mention (the Calendar tool's territory), maybe with arithmetic."""
        rng = self.rng
        words = date_words(date)
        head, tail = rng.choice(DATE_SENTENCES).format(T=rng.choice(self.world.towns), d="{d}").split("{d}")
        notes = [STYLE.render("Calendar", "", date_sentence(date))] if rng.random() < self.note_share else []
        parts = [head + words + tail]
        gold = [{"tool": "Calendar", "input": "", "result": words, "offset": len(head), "part": 0}]
        if rng.random() < 0.5:
            item = self.item("small")
            sentence, offset = item.story()
            parts.append(sentence)
            gold.append({"tool": "Calculator", "input": self.call_input(item), "result": item.c, "offset": offset,
                         "part": 1})
        return self._join(notes, parts, gold)


@functools.cache
def _form_words() -> frozenset[str]:
    """Every word of the world's templates (arithmetic and question forms, held out or not, and object words)."""
    texts = [f"{f.story} {f.body} {f.question}" for f in FORMS] + [q for qs in QUESTION_FORMS.values() for q in qs]
    return frozenset(w.lower() for w in _WORDS.findall(" ".join(texts))) | {w for pair in UNITS for w in pair}


def random_letters(rng: random.Random) -> str:
    """3-9 random lowercase letters that are no word of the world's templates (so no held-out word either)."""
    while True:
        word = "".join(rng.choice(string.ascii_lowercase) for _ in range(rng.randint(3, 9)))
        if word not in _form_words():
            return word


# Cues of the operations, kept per split to those that only the operation's own training forms use.
CUE_PHRASES = {
    "+": ["in all", "in total", "altogether", "together", "the sum", "more", "received", "added", "collected"],
    "-": ["left", "remained", "remain", "away", "lost", "spent", "fewer", "the difference", "still"],
    "*": ["each", "every", "per", "times as many", "rows", "loaded", "packed", "carried", "earns"],
    "/": ["equally", "shared", "split", "divided", "equal", "among", "the same number"],
}
# Words with no arithmetic meaning, for cuecall_doc's loose problems.
LOOSE_WORDS = (*NOISE_WORDS[:12], "the", "and", "of", "at", "with", "then", "there", "were", "had", "has", "some")


@functools.cache
def cue_phrases(split: Split) -> dict[str, list[str]]:
    """Per operation, the phrases of :data:`CUE_PHRASES` that a training form of that operation contains and no
    training form of another operation does (held-out forms are not looked at)."""
    def text(f) -> str:
        return f" {f.story} {f.body} {f.question} ".lower()

    has = lambda phrase, forms: any(re.search(rf"\b{re.escape(phrase)}\b", text(f)) for f in forms)  # noqa: E731
    return {op: [c for c in CUE_PHRASES[op] if has(c, split.forms(op))
                 and not any(has(c, split.forms(o)) for o in OPS if o != op)] for op in OPS}


def pretrain_doc(w: Writer, math_share: float, quiz_share: float, dated_share: float, copy_share: float = 0.0,
                 induction_share: float = 0.0, copycall_share: float = 0.0, cuecall_share: float = 0.0) -> str:
    r, edge = w.rng.random(), 0.0
    for share, special in ((copy_share, w.copy_doc), (induction_share, w.induction_doc),
                           (copycall_share, w.copycall_doc), (cuecall_share, w.cuecall_doc)):
        edge += share
        if r < edge:
            return special()
    r = w.rng.random()
    if r < math_share:
        return w.math_doc("small")[0]
    if r < math_share + quiz_share:
        return w.fact_doc(quiz=True)[0]
    if r < math_share + quiz_share + dated_share:
        return w.dated_doc(random_date(w.rng))[0]
    return w.fact_doc(quiz=False, wiki_share=0.3)[0]


def corpus_doc(w: Writer, kind: str, facts: list[Fact], date: dt.date) -> tuple[str, list[dict]]:
    """An annotation document of ``kind``: math (3-4-digit arithmetic), facts
    (``facts``, the ones pre-training left out, as statements or a quiz) or
    dated (a mention of the document's date)."""
    if kind == "math":
        return w.math_doc("large", max_items=2)
    if kind == "dated":
        return w.dated_doc(date)
    return w.facts_text(facts, quiz=w.rng.random() < 0.4)


def eval_math_item(w: Writer, op: str) -> dict:
    """A SVAMP-style word problem whose answer needs a 3-4-digit operation, in
    one of the forms ``w`` may use (``Form``: its key)."""
    item = w.item("large", op)
    answer = float(item.c)
    return {"Body": item.body(), "Question": item.question(), "Equation": f"( {item.a} {op} {item.b} )",
            "Answer": int(answer) if answer.is_integer() else answer, "Type": OP_NAMES[op], "Form": item.form.key}


def eval_twostep_item(w: Writer, form: TwoStepForm) -> dict:
    """A SVAMP-style two-step word problem in ``form`` (``Equation``: both steps; ``Form``: the form's key)."""
    item = w.twostep(form)
    return {"Body": item.body(), "Question": item.question(),
            "Equation": f"( ( {item.a} {form.first} {item.b} ) {form.second} {item.d} )", "Answer": int(item.c),
            "Type": f"{OP_NAMES[form.first]}-{OP_NAMES[form.second]}", "Form": f"twostep-{form.key}"}


def eval_qa_item(w: Writer, fact: Fact) -> dict:
    """A TriviaQA-style question about a fact stated only in the tools' data,
    in one of the question forms ``w`` may use."""
    return {"question": w.ask(fact), "answer": fact.object, "aliases": list(fact.answer_aliases),
            "subject": fact.subject, "relation": fact.kind}


__all__ = ["LeakGuard", "OPS", "Writer", "corpus_doc", "date_words", "eval_math_item", "eval_qa_item",
           "eval_twostep_item", "pretrain_doc", "random_date"]
