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
import random
import re
from collections import defaultdict

from toolformer.smallworld.arithmetic import (
    OP_NAMES,
    OPS,
    Item,
    Split,
    earlier,
    filler,
    make_item,
)
from toolformer.smallworld.copying import NOISE_WORDS, STYLE, CopyingDocs
from toolformer.smallworld.entities import Fact, NonceFacts, World
from toolformer.smallworld.twostep import TWOSTEP_FORMS, TwoStepForm, TwoStepItem, make_twostep
from toolformer.tools.calendar import date_sentence

NONCE_NOTE_SHARE = 0.8  # facts of invented entities announced by a QA note
INLINE_NOTE_SHARE = 0.5  # notes put inline, right before the answer, instead of at the document start
_WORDS = re.compile(r"\w+")
NOTE_SEPARATOR = "\n"  # after a note, as the filter puts it after a call prefix (filter.prefix_separator)

DATE_SENTENCES = [
    "The council of {T} met on {d}.",
    "On {d}, the fair in {T} opened its gates.",
    "The new school in {T} was opened on {d}.",
    "A storm reached {T} on {d}.",
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


class Writer(CopyingDocs):
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
        """A two-step problem with its worked answer (``The answer is c1 + d, which is c.``), maybe a filler sentence;
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
