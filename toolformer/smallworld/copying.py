"""Pre-training documents whose next words can only be predicted by copying them from earlier in the text.

A base model trained from scratch has to learn to copy a span of its prompt (numbers, names, a question)
into a call: the method needs it at inference on text it has never seen (docs/design.md, "What the base
model needs"). :class:`CopyingDocs`, mixed into :class:`~toolformer.smallworld.corpora.Writer`, writes the
documents that teach it: numbers said twice (``copy_doc``), runs of arbitrary words said twice
(``induction_doc``), problems and questions in scrambled or rewritten wording with the call inline
(``copycall_doc``) and loose words around one operation's cue with the call inline (``cuecall_doc``).
"""

from __future__ import annotations

import functools
import random
import re
import string
from typing import TYPE_CHECKING

from toolformer.smallworld.arithmetic import EXTRA_FORMS, FORMS, OPS, SCENE_FORMS, UNITS, Item, Split, written
from toolformer.smallworld.entities import QUESTION_FORMS, TOWN_HEADS, TOWN_TAILS, Fact, NonceFacts, World
from toolformer.tools.calls import get_style

STYLE = get_style("plain")  # the paper's `[tool(input) → result]`
_WORDS = re.compile(r"\w+")
# Words inserted at random into a text (``noise_share``): they make the wording of a question or problem
# unpredictable, so a call that repeats it must be copied, not recalled from a template. None names an
# operation, a time or a place.
NOISE_WORDS = ("indeed", "perhaps", "quietly", "certainly", "old", "green", "famous", "busy", "bright", "simply",
               "really", "truly", "clearly", "happily", "oddly", "fine", "dear", "well", "plain", "good", "kind",
               "red", "blue", "quite", "rather", "surely", "anyway", "though", "sadly", "luckily")

INDUCTION_MIDDLES = ["Once more:", "Again:", "The list was read twice.", "The clerk of {T} repeated it:",
                     "Then the same words again:", "Word for word:"]

COPY_TEMPLATES = [
    "The clerk of {T} read out {said}. The scribe wrote down {said}.",
    "Stock at {T}: {said}. Counted again the next day: {said}.",
    "The ledger of {T} lists {said}. The copy of the ledger lists {said}.",
]


class CopyingDocs:
    """The copying documents of a :class:`~toolformer.smallworld.corpora.Writer` (its ``rng``, ``world``, ``split``,
    shares and item makers)."""

    if TYPE_CHECKING:  # what the Writer provides
        rng: random.Random
        world: World
        split: Split
        nonce: NonceFacts | None
        questions: dict[str, list[int]]
        rewrite_share: float
        rewrite_math_share: float

        def ask(self, fact: Fact) -> str: ...

        def item(self, size: str, op: str | None = None) -> Item: ...

        def call_input(self, item: Item) -> str: ...

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
                    new = random_letters(rng, self.split.extra, self.split.scene)
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
            slots: list[list[str]] = [[], [], []]
            rng.choice(slots).append(rng.choice(cues[op]))
            a, b = written(first, item.separators), written(second, item.separators)
            words = [rng.choice([item.slots["T"], item.slots["P"]]), *loose(1, 2), *slots[0], a, units,
                     *loose(0, 3), *slots[1], b, units, *loose(0, 2), *slots[2]]
            call = f"{first} {op} {second}" if op in "+*" else item.call_input
            parts.append(f"{' '.join(words)}? The answer is {STYLE.render('Calculator', call, item.c)} {item.c}.")
        return " ".join(parts)


@functools.cache
def _form_words(extra: bool = False, scene: bool = False) -> frozenset[str]:
    """Every word of the world's templates (arithmetic and question forms, held out or not, with ``extra`` the
    :data:`EXTRA_FORMS` too, with ``scene`` the :data:`SCENE_FORMS`, and object words)."""
    forms = (*FORMS, *(EXTRA_FORMS if extra else ()), *(SCENE_FORMS if scene else ()))
    texts = [f"{f.story} {f.body} {f.question}" for f in forms] + [q for qs in QUESTION_FORMS.values() for q in qs]
    return frozenset(w.lower() for w in _WORDS.findall(" ".join(texts))) | {w for pair in UNITS for w in pair}


def random_letters(rng: random.Random, extra: bool = False, scene: bool = False) -> str:
    """3-9 random lowercase letters that are no word of the world's templates (so no held-out word either; with
    ``extra`` or ``scene``, no word of those training forms either)."""
    while True:
        word = "".join(rng.choice(string.ascii_lowercase) for _ in range(rng.randint(3, 9)))
        if word not in _form_words(extra, scene):
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
