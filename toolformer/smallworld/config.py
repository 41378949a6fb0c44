"""Configuration of the small world (the CPU demo): its generator (``world``), the base model trained on it
(``pretrain``) and the demo's own settings (``demo``), around the pipeline's :class:`PipelineConfig`.

Every default is the shipped world (what ``configs/demo.yaml`` runs and ``data/world-base`` was trained on).
A small-world config file is a pipeline config with these three sections added; :func:`load_smallworld`
reads it into a :class:`SmallWorldConfig`, whose ``pipeline`` is what the stages get."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from toolformer.config.load import at_least, between
from toolformer.config.schema import PipelineConfig
from toolformer.worlds.config import PretrainConfig, WorldSettings, dump_world, load_world


@dataclass
class WorldConfig:
    output_dir: str = ""
    """Folder of the generated small world's files; empty = RUN_DIR/world."""
    seed: int = 0
    """Seed of the world: the same seed and counts write the same files."""
    towns: int = 60
    """Towns (founding year, population, river, mayor, a price each)."""
    rivers: int = 12
    """Rivers (length, source, mouth)."""
    ranges: int = 5
    """Hill ranges (height of the highest point)."""
    seas: int = 4
    """Seas the rivers flow into (at most 6)."""
    people: int = 90
    """People (birth year and town, profession, death year); mayors are drawn from them."""
    events: int = 40
    """Dated events (floods, fires, fairs, bridges, treaties), at most one per town."""
    pretrain_fact_share: float = 0.5
    """Share of the facts that the pre-training corpus states."""
    corpus_fact_share: float = 0.25
    """Share of the facts stated only in the annotation corpus; the rest only in the tools' data
    (eval_qa asks those)."""
    pretrain_docs: int = 120000
    """Documents in pretrain.jsonl."""
    note_share: float = 0.45
    """Pre-training: share of arithmetic items and dates announced by a call note at the document start."""
    earlier_share: float = 0.3
    """Pre-training: share of arithmetic items whose answer is stated earlier in prose."""
    problem_share: float = 0.3
    """Share of arithmetic items written as a word problem ending `The answer is N.`"""
    filler_share: float = 0.5
    """Chance of a sentence repeating an earlier number after each arithmetic item."""
    nonce_share: float = 0.5
    """Pre-training: share of fact documents about an entity invented for that document, with QA notes to copy from."""
    copy_share: float = 0.15
    """Pre-training: share of documents that list numbers and repeat them (they teach in-context copying)."""
    induction_share: float = 0.15
    """Pre-training: share of documents that say a run of arbitrary words, names and numbers twice."""
    copycall_share: float = 0.3
    """Pre-training: share of documents with word problems or quiz questions in scrambled wording (words dropped,
    swapped, inserted) and each one's call inline, where a tuned model writes it: a call's input that can only be
    copied from the text, not recalled from a form."""
    text_order: bool = True
    """Calls of + and * state their numbers in the order the text does (`b + a` for a form that says b first), in
    pre-training notes and gold calls, as the filter keeps them; false: always `a op b`."""
    cuecall_share: float = 0.3
    """Pre-training: share of documents with word problems of loose words around two numbers and one cue of an
    operation (a phrase only that operation's training forms use), the call inline: + and * in the text's order,
    - and / the larger number first."""
    rewrite_share: float = 0.5
    """Pre-training: share of the quiz questions of copycall documents with about half their small words replaced
    by random ones (the rest scrambled): a question no form writes, copied word for word into its call."""
    rewrite_math_share: float = 0.5
    """Pre-training: share of the word problems of copycall documents with about half their small words replaced
    by random ones, the words of the operation's cues and the object words kept (the rest scrambled): a problem no
    form writes, its numbers copied into the call."""
    extra_train_forms: bool = True
    """Training text also uses the 32 arithmetic forms that are never held out (other verbs, a number in the
    question, two sentences, bare operation words, comparisons): the held-out forms and words stay those of the
    seed, and become a new composition of more known wordings."""
    scene_forms: bool = True
    """Training text also uses the 67 arithmetic forms of SCENE_FORMS, never held out: each says words that the
    other forms say with one operation only ("bought", "trips", "Monday") with another, so that for every seed each
    word of a held-out form other than its cue words is said with two operations or more in training."""
    noise_share: float = 0.5
    """Pre-training: share of word problems and quiz questions with 1-3 random words inserted (their wording
    becomes unpredictable, so a call that repeats it is copied, not recalled)."""
    separator_share: float = 0.25
    """Share of arithmetic items that write numbers of 1,000 and more with thousands separators."""
    heldout_forms_per_op: int = 4
    """Arithmetic forms of each operation (of 12) held out of all training text: only math_unseen uses them."""
    heldout_questions: int = 3
    """Question forms of each relation (of 8) held out of all training text: only qa_unseen uses them."""
    heldout_vocabulary: float = 0.25
    """Share of object words and first names held out of training text (half of math_unseen uses them)."""
    math_share: float = 0.55
    """Share of arithmetic documents in every corpus (after the copy documents of pre-training)."""
    quiz_share: float = 0.12
    """Share of `Question: ... Answer: ...` documents in pre-training and held-out text."""
    dated_share: float = 0.08
    """Share of documents that mention a date."""
    corpus_docs: int = 2000
    """Documents in corpus.jsonl, the pipeline's annotation corpus."""
    heldout_docs: int = 500
    """Documents in heldout.jsonl (plain text for perplexity)."""
    eval_math: int = 300
    """Word problems in each of eval_math_seen.json and eval_math_unseen.json (3-4-digit operations, the four
    operations balanced)."""
    eval_qa: int = 300
    """Questions in each of eval_qa_seen.jsonl and eval_qa_unseen.jsonl, about the facts only the tools' data
    states (each asked more than once when there are fewer)."""
    twostep_docs: int = 400
    """Annotation documents with a two-step word problem and its worked answer (`The answer is 888 + 150 =
    1038.`), appended to corpus.jsonl after the corpus_docs others; their gold calls are the two steps, the second's
    input starting with the first's result (chained calls)."""
    eval_twostep: int = 300
    """Two-step word problems in eval_math_twostep.json (training forms and words; SVAMP format): a first
    operation on two numbers, then a second on its result and a third number; 0 = no such file."""

    retired: ClassVar[dict[str, str]] = {
        "cue_number_first": "removed in 0.2.0: opening cue-call problems with a number did not help the calls "
                            "(docs/lab-notes.md); delete the key",
        "noisy_docs": "removed in 0.2.0: annotation documents with random words taught the tuned model to copy the "
                      "noise (docs/lab-notes.md); noise_share adds such words to pre-training; delete the key",
        "problem_docs": "removed in 0.2.0: one-step problem documents made more wrong operations, not fewer "
                        "(docs/lab-notes.md); delete the key"}

    def validate(self) -> None:
        between(self, 0, 2**32 - 1, "seed")
        between(self, 0.0, 1.0, "pretrain_fact_share", "corpus_fact_share", "note_share", "earlier_share",
                "problem_share", "filler_share", "nonce_share", "copy_share", "math_share", "quiz_share",
                "dated_share", "induction_share", "copycall_share", "cuecall_share",
                "rewrite_share", "rewrite_math_share", "noise_share", "separator_share", "heldout_vocabulary")
        if not 1 <= self.heldout_forms_per_op <= 6:
            raise ValueError(f"heldout_forms_per_op: {self.heldout_forms_per_op} is not between 1 and 6 (of 12)")
        if not 1 <= self.heldout_questions <= 4:
            raise ValueError(f"heldout_questions: {self.heldout_questions} is not between 1 and 4 (of 8)")
        for a, b in (("pretrain_fact_share", "corpus_fact_share"), ("note_share", "earlier_share"),
                     ("copy_share", "induction_share")):
            if getattr(self, a) + getattr(self, b) > 1.0:
                raise ValueError(f"{a} + {b} exceeds 1")
        if self.copy_share + self.induction_share + self.copycall_share + self.cuecall_share > 1.0:
            raise ValueError("copy_share + induction_share + copycall_share + cuecall_share exceeds 1")
        if self.math_share + self.quiz_share + self.dated_share > 1.0:
            raise ValueError("math_share + quiz_share + dated_share exceeds 1")
        at_least(self, 2, "towns")
        at_least(self, 1, "rivers", "ranges", "people", "pretrain_docs", "corpus_docs")
        between(self, 1, 6, "seas")
        at_least(self, 0, "events", "heldout_docs", "eval_math", "eval_qa")
        if self.events > self.towns:
            raise ValueError(f"events: {self.events} exceeds towns ({self.towns}); at most one event per town")
        for name in ("twostep_docs", "eval_twostep"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name}: must be 0 or more, got {getattr(self, name)}")


@dataclass
class DemoConfig:
    math_prompt: str = "{question} The answer is"
    """Prompt template of the small world's arithmetic evaluation set."""
    qa_prompt: str = "Question: {question} Answer:"
    """Prompt template of the small world's QA evaluation set."""
    plain_from_pretraining: bool = True
    """Let the build stage's plain mix draw from the world's pre-training text too (build.plain_path): the paper's
    C* is pre-training-like text with sparse calls, while the annotation corpus has a call in most documents."""
    max_calls_row: int = 2
    """Also evaluate the tuned model with at most this many calls per item, as the row `toolformer_<n>calls` (a
    later call may copy an earlier call's result from the text); 0 = no such row. The `toolformer` row keeps
    evaluate.max_calls."""
    max_calls_row_top_k: int = 1
    """That row starts a call only when the call-start token is among this many most likely tokens (the paper's 10
    stays for the other rows): with 10 the second call opened right after an operator (`6080 + [Calculator(`) in
    141 of 300 two-step problems; with 1 math_twostep went from 49.3 to 78.3 % and the single-step sets matched
    the toolformer row (docs/lab-notes.md, "Chained calls"); 0 = evaluate.top_k_trigger."""
    twostep_max_new_tokens: int = 56
    """Tokens generated per item of math_twostep (world.eval_twostep): two calls and a worked answer take about 45."""
    rounds: int = 1
    """Rounds of self-training (`toolformer demo --rounds 2`). Round 2 samples calls with the round-1 model (the
    paper's sampler, sample.prompt none: p(call-start) from the text alone, the paper's tau_s, k and m), executes
    them, filters them, and fine-tunes the base model on them, in RUN_DIR/round2 (one folder per judge). Round 2
    runs no chain round (chain.rounds 1): that would be a second sampling pass over every document with a call."""
    round2_filters: list[str] = field(default_factory=lambda: ["base", "round1"])
    """Models whose losses judge round 2's calls, one tuned model and one table row each: `base` (the paper's
    filter; row toolformer_round2) and/or `round1` (the round-1 model; row toolformer_round2_judged_by_round1)."""

    def validate(self) -> None:
        at_least(self, 0, "max_calls_row", "max_calls_row_top_k")
        at_least(self, 1, "twostep_max_new_tokens")
        if self.rounds not in (1, 2):
            raise ValueError(f"rounds: {self.rounds} is not 1 or 2")
        bad = [f for f in self.round2_filters if f not in ("base", "round1")]
        if bad or not self.round2_filters or len(set(self.round2_filters)) < len(self.round2_filters):
            raise ValueError(f"round2_filters: {self.round2_filters} must list base and/or round1, each once")


SECTIONS = {"world": WorldConfig, "pretrain": PretrainConfig, "demo": DemoConfig}
"""The small world's sections of a config file, beside the pipeline's."""


@dataclass
class _File(PipelineConfig):
    """A small-world config file as it is written: the pipeline's keys and the three sections (read, checked,
    then split into a :class:`SmallWorldConfig`)."""

    world: WorldConfig = field(default_factory=WorldConfig)
    pretrain: PretrainConfig = field(default_factory=PretrainConfig)
    demo: DemoConfig = field(default_factory=DemoConfig)


@dataclass
class SmallWorldConfig(WorldSettings):
    """The small world's settings around a pipeline config: the stages get ``pipeline`` only."""

    SECTIONS: ClassVar[tuple[str, ...]] = tuple(SECTIONS)
    world: WorldConfig = field(default_factory=WorldConfig)
    pretrain: PretrainConfig = field(default_factory=PretrainConfig)
    demo: DemoConfig = field(default_factory=DemoConfig)


def load_smallworld(path: str | Path | None, overrides: list[str] | None = None) -> SmallWorldConfig:
    """A small-world config file (or the defaults) with ``key=value`` overrides, checked as
    :func:`~toolformer.config.load.load_config` checks a pipeline config (errors name the key and its source)."""
    return load_world(SmallWorldConfig, _File, path, overrides)


def dump_smallworld(cfg: SmallWorldConfig) -> str:
    """``cfg`` as YAML that :func:`load_smallworld` reads back."""
    return dump_world(cfg)
