"""``generate_world(cfg)``: write the small world's files into one folder.

Files (RUN_DIR/world/ unless ``world.output_dir`` says otherwise):

==================  ===========================================================
knowledge.jsonl     every fact: ``subject``, ``relation``, ``object``, ``text``,
                    ``aliases`` (what the QA tool reads)
collection.jsonl    one article per entity: ``id``, ``title``, ``text``
                    (what WikiSearch reads)
pretrain.jsonl      ``text``: the base model's pre-training corpus
corpus.jsonl        ``id``, ``date``, ``text``, ``gold_calls``: the annotation
                    corpus (``gold_calls``: the calls that give each answer,
                    ``tool``, ``input``, ``result``, ``char_start``); the
                    ``world.twostep_docs`` two-step problems with worked
                    answers come after the ``corpus_docs`` others
heldout.jsonl       ``text``: plain text for perplexity
eval_math_seen.json SVAMP format (``Body``, ``Question``, ``Answer``, ``Form``
                    ...): word problems in training forms and words
eval_math_unseen.json the same in held-out forms, half with held-out words
eval_qa_seen.jsonl  TriviaQA style (``question``, ``answer``, ``aliases``):
                    questions in training forms about facts only the tools
                    know
eval_qa_unseen.jsonl the same in held-out question forms
eval_math_twostep.json SVAMP format: two-step word problems in training forms
                    and words (only with ``world.eval_twostep``)
forms.json          which forms and words are held out (by ``world.seed``)
world.json          seed, counts, config hash: written last
==================  ===========================================================

No evaluation item appears in a training or annotation text: every document
is checked by a :class:`~toolformer.smallworld.corpora.LeakGuard` and rewritten
when it would state a fact it must not.

Each file draws from its own random stream, and so do the two-step documents
and problems: turning them on leaves every other file as it was, and
corpus.jsonl's first ``corpus_docs`` lines too.
"""

from __future__ import annotations

import json
import random
import time
from pathlib import Path

from toolformer.config.load import config_hash
from toolformer.rundir.files import atomic_write_text, dumps
from toolformer.smallworld.arithmetic import OPS, Split, split_forms
from toolformer.smallworld.config import SmallWorldConfig, WorldConfig
from toolformer.smallworld.corpora import (
    LeakGuard,
    Writer,
    corpus_doc,
    eval_math_item,
    eval_qa_item,
    eval_twostep_item,
    pretrain_doc,
    random_date,
)
from toolformer.smallworld.entities import QUESTION_FORMS, Fact, World, build_world, split_facts, split_questions
from toolformer.smallworld.twostep import TWOSTEP_FORMS

EVAL_SETS = ("math_seen", "math_unseen", "qa_seen", "qa_unseen")
TWOSTEP_SET = "math_twostep"  # written only with world.eval_twostep
FILE_NAMES = {"knowledge": "knowledge.jsonl", "collection": "collection.jsonl", "pretrain": "pretrain.jsonl",
              "corpus": "corpus.jsonl", "heldout": "heldout.jsonl", "eval_math_seen": "eval_math_seen.json",
              "eval_math_unseen": "eval_math_unseen.json", "eval_qa_seen": "eval_qa_seen.jsonl",
              "eval_qa_unseen": "eval_qa_unseen.jsonl", f"eval_{TWOSTEP_SET}": f"eval_{TWOSTEP_SET}.json",
              "forms": "forms.json", "summary": "world.json"}
FILES = tuple(FILE_NAMES)


def world_dir(cfg: SmallWorldConfig) -> Path:
    return Path(cfg.world.output_dir or Path(cfg.run_dir) / "world")


def base_model_dir(cfg: SmallWorldConfig) -> Path:
    """Where ``toolformer world pretrain`` puts the world's base model and its tokenizer."""
    return Path(cfg.pretrain.output_dir or Path(cfg.run_dir) / "base-model")


def world_paths(cfg: SmallWorldConfig) -> dict[str, Path]:
    """Where each file of the world goes (see the module docstring)."""
    root = world_dir(cfg)
    return {k: root / v for k, v in FILE_NAMES.items()}


def _guarded(make, guard: LeakGuard, what: str, tries: int = 200):
    """``make()`` until its text states no forbidden fact."""
    for _ in range(tries):
        out = make()
        if guard.ok(out if isinstance(out, str) else out[0]):
            return out
    raise RuntimeError(f"world: no {what} document without a held-out fact after {tries} tries; "
                       "lower the fact shares or raise the entity counts")


def _write_jsonl(path: Path, rows) -> int:
    lines = [dumps(r) + "\n" for r in rows]
    atomic_write_text(path, "".join(lines))
    return len(lines)


def collection_records(world: World) -> list[dict]:
    """One article per entity that has facts: its facts, canonical wording."""
    by_subject: dict[str, list[Fact]] = {}
    for f in world.facts:
        by_subject.setdefault(f.subject, []).append(f)
    return [{"id": f"w{i:04d}", "title": subject, "text": " ".join(f.text() for f in facts)}
            for i, (subject, facts) in enumerate(by_subject.items(), 1)]


def _corpus_fact_groups(rng: random.Random, facts: list[Fact]):
    """Endless groups of 1-3 corpus facts of one subject; every fact comes up
    once before any repeats."""
    while True:
        queue = list(facts)
        rng.shuffle(queue)
        for f in queue:
            same = [g for g in facts if g.subject == f.subject and g is not f]
            yield [f, *rng.sample(same, min(len(same), rng.randint(0, 2)))]


def _twostep_docs(world: World, wc: WorldConfig, split: Split, questions: dict, facts: list[Fact],
                  guard: LeakGuard) -> list[dict]:
    """The ``twostep_docs`` annotation documents (a two-step problem and its worked answer), from their own
    stream, numbered after the ``corpus_docs`` others."""
    rng = random.Random(f"{wc.seed}-twostep")
    w = Writer(world, rng, facts, split, questions, filler_share=wc.filler_share, separators=wc.separator_share,
               text_order=wc.text_order)
    rows = []
    for i in range(wc.twostep_docs):
        date = random_date(rng)
        text, gold = _guarded(w.twostep_doc, guard, "two-step")
        rows.append({"id": f"d{wc.corpus_docs + i:05d}", "date": date.isoformat(), "text": text, "gold_calls": gold})
    return rows


def _write_pretraining(path: Path, world: World, wc: WorldConfig, split: Split, train_q: dict, pre: list[Fact],
                       kept_out: list[Fact]) -> int:
    """The pre-training documents, from their own stream: the pre-training facts, none of ``kept_out``."""
    w = Writer(world, random.Random(f"{wc.seed}-pretrain"), pre, split, train_q, wc.note_share, wc.earlier_share,
               wc.problem_share, wc.filler_share, wc.nonce_share, wc.noise_share, wc.separator_share,
               text_order=wc.text_order, rewrite_share=wc.rewrite_share,
               rewrite_math_share=wc.rewrite_math_share)
    guard = LeakGuard(kept_out)
    make = lambda: pretrain_doc(w, wc.math_share, wc.quiz_share, wc.dated_share, wc.copy_share,  # noqa: E731
                                wc.induction_share, wc.copycall_share, wc.cuecall_share)
    return _write_jsonl(path, ({"text": _guarded(make, guard, "pre-training")} for _ in range(wc.pretrain_docs)))


def _write_corpus(path: Path, world: World, wc: WorldConfig, split: Split, train_q: dict, pre: list[Fact],
                  cor: list[Fact], held: list[Fact]) -> int:
    """The annotation corpus with its gold calls, from its own stream: arithmetic, dated and fact documents
    (the annotation facts, none held out), then the two-step documents."""
    rng = random.Random(f"{wc.seed}-corpus")
    w = Writer(world, rng, pre + cor, split, train_q, problem_share=wc.problem_share, filler_share=wc.filler_share,
               separators=wc.separator_share, text_order=wc.text_order)
    guard = LeakGuard(held)
    groups = _corpus_fact_groups(rng, cor)
    rows = []
    for i in range(wc.corpus_docs):
        date = random_date(rng)
        r = rng.random()
        kind = "math" if r < wc.math_share or not cor else "dated" if r < wc.math_share + wc.dated_share else "facts"
        chosen = next(groups) if kind == "facts" else []
        text, gold = _guarded(lambda k=kind, c=chosen, d=date: corpus_doc(w, k, c, d), guard, "annotation")
        rows.append({"id": f"d{i:05d}", "date": date.isoformat(), "text": text, "gold_calls": gold})
    rows += _twostep_docs(world, wc, split, train_q, pre + cor, LeakGuard(held))
    return _write_jsonl(path, rows)


def _write_heldout(path: Path, world: World, wc: WorldConfig, split: Split, train_q: dict, pre: list[Fact],
                   kept_out: list[Fact]) -> int:
    """The held-out documents (perplexity), from their own stream: the pre-training facts, none of ``kept_out``."""
    w = Writer(world, random.Random(f"{wc.seed}-heldout"), pre, split, train_q, problem_share=wc.problem_share,
               filler_share=wc.filler_share, separators=wc.separator_share, text_order=wc.text_order)
    guard = LeakGuard(kept_out)
    make = lambda: pretrain_doc(w, wc.math_share, wc.quiz_share, wc.dated_share)  # noqa: E731
    return _write_jsonl(path, ({"text": _guarded(make, guard, "held-out")} for _ in range(wc.heldout_docs)))


def _write_eval_sets(paths: dict[str, Path], world: World, wc: WorldConfig, split: Split, train_q: dict,
                     heldout_q: dict, held: list[Fact]) -> dict[str, int]:
    """The evaluation sets, each from its own stream: math and QA in training forms (seen) and in held-out
    forms (unseen), and the two-step problems (with ``world.eval_twostep``); returns their item counts."""
    counts: dict[str, int] = {}
    for unseen in (False, True):
        name = "unseen" if unseen else "seen"
        w = Writer(world, random.Random(f"{wc.seed}-eval-{name}"), [], split, heldout_q if unseen else train_q,
                   separators=wc.separator_share, heldout=unseen)
        problems = [eval_math_item(w, OPS[i % len(OPS)]) for i in range(wc.eval_math)]
        atomic_write_text(paths[f"eval_math_{name}"], json.dumps(problems, indent=1, ensure_ascii=False) + "\n")
        counts[f"eval_math_{name}"] = len(problems)
        asked = [held[i % len(held)] for i in range(wc.eval_qa)] if held else []
        counts[f"eval_qa_{name}"] = _write_jsonl(paths[f"eval_qa_{name}"], (eval_qa_item(w, f) for f in asked))
    if wc.eval_twostep:
        w = Writer(world, random.Random(f"{wc.seed}-eval-twostep"), [], split, train_q, separators=wc.separator_share)
        problems = [eval_twostep_item(w, TWOSTEP_FORMS[i % len(TWOSTEP_FORMS)]) for i in range(wc.eval_twostep)]
        atomic_write_text(paths[f"eval_{TWOSTEP_SET}"], json.dumps(problems, indent=1, ensure_ascii=False) + "\n")
        counts[f"eval_{TWOSTEP_SET}"] = len(problems)
    return counts


def _summary_line(cfg: SmallWorldConfig, world: World, facts: tuple[list, list, list], counts: dict,
                  seconds: float) -> str:
    """What ``toolformer world generate`` prints: facts per part, documents and items written, where and how fast."""
    wc = cfg.world
    pre, cor, held = facts
    return (f"world: {len(world.facts):,} facts ({len(pre):,} pre-training / {len(cor):,} annotation / "
            f"{len(held):,} tools only); wrote {counts['pretrain']:,} pre-training, {counts['corpus']:,} annotation, "
            f"{counts['heldout']:,} held-out documents, {counts['eval_math_seen']:,} math and "
            f"{counts['eval_qa_seen']:,} QA eval items per set (seen and unseen forms)"
            + (f", {wc.twostep_docs:,} two-step annotation documents (in the {counts['corpus']:,})" if wc.twostep_docs
               else "")
            + (f", {wc.eval_twostep:,} two-step problems" if wc.eval_twostep else "")
            + f" to {world_dir(cfg)} in {seconds:.1f} s")


def generate_world(cfg: SmallWorldConfig) -> dict[str, Path]:
    """Generate the world of ``cfg.world`` and write its files; return their paths."""
    wc = cfg.world
    t0 = time.perf_counter()
    world = build_world(random.Random(wc.seed), wc.towns, wc.rivers, wc.ranges, wc.seas, wc.people, wc.events)
    split_facts(world, random.Random(f"{wc.seed}-split"), wc.pretrain_fact_share, wc.corpus_fact_share)
    pre, cor, held = world.split("pretrain"), world.split("corpus"), world.split("eval")
    paths = world_paths(cfg)
    counts: dict[str, int] = {}

    counts["knowledge"] = _write_jsonl(paths["knowledge"], (f.record() for f in world.facts))
    counts["collection"] = _write_jsonl(paths["collection"], collection_records(world))

    split = split_forms(wc.seed, wc.heldout_forms_per_op, wc.heldout_vocabulary, wc.extra_train_forms,
                        wc.scene_forms)
    questions = split_questions(wc.seed, wc.heldout_questions)
    train_q = {k: tr for k, (tr, _ho) in questions.items()}
    heldout_q = {k: ho for k, (_tr, ho) in questions.items()}
    atomic_write_text(paths["forms"], json.dumps(split.record() | {"heldout_questions": {
        k: [QUESTION_FORMS[k][i] for i in ho] for k, ho in heldout_q.items()}}, indent=1) + "\n")

    # Each file draws from its own stream, so changing one count leaves the other files as they were.
    counts["pretrain"] = _write_pretraining(paths["pretrain"], world, wc, split, train_q, pre, cor + held)
    counts["corpus"] = _write_corpus(paths["corpus"], world, wc, split, train_q, pre, cor, held)
    counts["corpus_twostep"] = wc.twostep_docs
    counts["heldout"] = _write_heldout(paths["heldout"], world, wc, split, train_q, pre, cor + held)
    counts |= _write_eval_sets(paths, world, wc, split, train_q, heldout_q, held)

    seconds = round(time.perf_counter() - t0, 2)
    summary = {
        "seed": wc.seed, "config_hash": config_hash(wc),
        "entities": {"towns": len(world.towns), "rivers": len(world.rivers), "ranges": len(world.ranges),
                     "seas": len(world.seas), "people": len(world.people), "events": len(world.events)},
        "facts": {"total": len(world.facts), "pretrain": len(pre), "corpus": len(cor), "eval": len(held)},
        "files": {k: FILE_NAMES[k] for k in FILES if k != "summary" and (k in counts or k == "forms")},
        "counts": counts, "seconds": seconds,
        "heldout_forms": split.record()["heldout_forms"],
    }
    atomic_write_text(paths["summary"], json.dumps(summary, indent=2) + "\n")
    print(_summary_line(cfg, world, (pre, cor, held), counts, seconds))
    return paths


def ensure_world(cfg: SmallWorldConfig, force: bool = False, quiet: bool = False) -> bool:
    """Generate the world unless its files are there for this ``cfg.world``
    (the summary's config hash; ``quiet``: without saying so); return whether it was generated."""
    summary = world_paths(cfg)["summary"]
    done = json.loads(summary.read_text()) if summary.exists() else {}
    if not force and done.get("config_hash") == config_hash(cfg.world):
        if not quiet:
            print(f"world: already generated ({summary}), skipped")
        return False
    generate_world(cfg)
    return True
