"""What the small world holds out: no evaluation item, held-out form, object word, first name or held-out
question is in any training text; the extra and scene forms keep that split; every held-out cue and scene word
is trained with more than one operation."""

import json
import re
from pathlib import Path

from worlds import records, small_cfg

from toolformer.smallworld import generate_world


def test_no_eval_item_appears_in_training_or_annotation_text(small_world):
    texts = [d["text"] for name in ("pretrain", "corpus", "heldout") for d in records(small_world[name])]
    blob = "\n".join(texts)
    problems = [json.loads(small_world[f"eval_{name}"].read_text())
                for name in ("math_seen", "math_unseen", "math_twostep")]
    for p in [p for ps in problems for p in ps]:
        assert f"{p['Body']} {p['Question']}".strip() not in blob
        numbers = [n for n in re.findall(r"\d+", p["Equation"])] + [str(p["Answer"])]  # a, b (, d), the answer
        for t in texts:
            assert not all(re.search(rf"(?<!\d){n}(?!\d)", t) for n in numbers), (p, t)
    facts = {(f["subject"], f["object"]): f for f in records(small_world["knowledge"])}
    for q in records(small_world["eval_qa_seen"]) + records(small_world["eval_qa_unseen"]):
        f = facts[(q["subject"], q["answer"])]
        names = [f["subject"], *f.get("aliases", [])]
        obj = re.compile(rf"(?<!\w){re.escape(f['object'])}(?!\w)")
        for t in texts:
            named = any(re.search(rf"(?<!\w){re.escape(n)}(?!\w)", t) for n in names)
            assert not (named and obj.search(t)), (q, t)


def _form_pattern(template: str) -> re.Pattern:
    """A regex for the text a form writes: its slots match any words within a sentence."""
    parts = re.split(r"\{\w+\}", template)
    return re.compile(r"[^.?!\n]*?".join(re.escape(p) for p in parts))


def test_heldout_forms_and_words_appear_in_no_training_text(small_world):
    """Held-out arithmetic forms, question forms, object words and first names
    are in no pre-training, annotation or held-out text (so in no fine-tuning
    text either: build draws from these), and only the unseen sets use them."""
    assert_heldout_unseen(small_world, train_forms=32)


def test_extra_train_forms_keep_the_heldout_split_and_reach_training_text(small_world, tmp_path):
    """world.extra_train_forms: the 48 forms that are never held out join the training forms; the held-out forms,
    objects and names stay those of the seed and are still in no training text, and the new forms are in the
    pre-training and annotation text."""
    from toolformer.smallworld.arithmetic import EXTRA_FORMS

    extra = generate_world(small_cfg(tmp_path, extra_train_forms=True))
    assert_heldout_unseen(extra, train_forms=80)
    forms, plain = (json.loads(w["forms"].read_text()) for w in (extra, small_world))
    for key in ("heldout_forms", "heldout_units", "heldout_names"):
        assert forms[key] == plain[key], key
    assert forms["train_forms"] == plain["train_forms"] + [f.key for f in EXTRA_FORMS]
    for name in ("pretrain", "corpus"):
        texts = [d["text"] for d in records(extra[name])]
        used = {f.key for f in EXTRA_FORMS if any(_form_pattern(f.story).search(t) or
                                                  _form_pattern(f"{f.body} {f.question}".strip()).search(t)
                                                  for t in texts)}
        assert len(used) >= 36, (name, sorted({f.key for f in EXTRA_FORMS} - used))


def test_scene_forms_keep_the_heldout_split_and_reach_training_text(tmp_path):
    """world.scene_forms: the 67 scene forms join the training forms after the extra ones; the held-out forms,
    words and unseen evaluation sets stay those of the seed, and the new forms are in the pre-training and
    annotation text."""
    from toolformer.smallworld.arithmetic import SCENE_FORMS

    extra = generate_world(small_cfg(tmp_path / "extra", extra_train_forms=True))
    scene = generate_world(small_cfg(tmp_path / "scene", extra_train_forms=True, scene_forms=True))
    assert_heldout_unseen(scene, train_forms=80 + len(SCENE_FORMS))
    forms, before = (json.loads(w["forms"].read_text()) for w in (scene, extra))
    for key in ("heldout_forms", "heldout_units", "heldout_names"):
        assert forms[key] == before[key], key
    assert forms["train_forms"] == before["train_forms"] + [f.key for f in SCENE_FORMS]
    for name in ("eval_math_unseen", "eval_qa_unseen"):
        assert scene[name].read_bytes() == extra[name].read_bytes(), name
    for name in ("pretrain", "corpus"):
        texts = [d["text"] for d in records(scene[name])]
        used = {f.key for f in SCENE_FORMS if any(_form_pattern(f.story).search(t) or
                                                  _form_pattern(f"{f.body} {f.question}".strip()).search(t)
                                                  for t in texts)}
        assert len(used) >= {"pretrain": 50, "corpus": 30}[name], (name, sorted({f.key for f in SCENE_FORMS} - used))


# Words that name no scene: articles, pronouns, prepositions and auxiliaries (and "two", said by every operation).
FUNCTION_WORDS = {"a", "an", "the", "and", "of", "in", "on", "to", "at", "for", "from", "with", "by", "is", "are",
                  "was", "were", "did", "do", "does", "how", "many", "much", "what", "so", "it", "its", "there", "that",
                  "this", "than", "be", "been", "has", "have", "had", "then", "if", "one", "other", "all", "they",
                  "them", "their", "as", "but", "only", "two"}


def _cue_words(form) -> set[str]:
    return {w for cue in form.cues for w in cue.split("_")}


def _scene_words(form) -> set[str]:
    """A form's words, less its placeholders, its cue words and function words."""
    words = set(re.findall(r"[a-z]+", re.sub(r"\{\w+\}", "", f"{form.story} {form.body} {form.question}").lower()))
    return words - FUNCTION_WORDS - _cue_words(form)


def test_scene_forms_say_every_word_of_a_heldout_form_with_two_operations():
    """Without them a held-out form's words can come with one operation only in training, often another one
    ("bought" only with + when mul-price is held out, for seed 0); with them every word of every held-out form
    other than its cues is said with two operations or more, for several seeds."""
    from toolformer.smallworld.arithmetic import split_forms

    def lonely(split):
        ops: dict[str, set[str]] = {}
        for f in split.train_forms:
            for w in _scene_words(f) | _cue_words(f):
                ops.setdefault(w, set()).add(f.op)
        return {(f.key, w) for f in split.heldout_forms for w in _scene_words(f) if len(ops.get(w, ())) < 2}

    assert ("mul-price", "bought") in lonely(split_forms(0, extra_train=True))
    for seed in range(8):
        assert len(lonely(split_forms(seed, extra_train=True))) >= 5, seed
        assert not lonely(split_forms(seed, extra_train=True, scene_train=True)), seed


def assert_heldout_unseen(world: dict[str, Path], train_forms: int) -> None:
    from toolformer.smallworld.arithmetic import FORM_KEYS, UNITS
    from toolformer.smallworld.entities import QUESTION_FORMS

    forms = json.loads(world["forms"].read_text())
    texts = [d["text"] for d in records(world["pretrain"]) + records(world["corpus"]) + records(world["heldout"])]
    words = set(re.findall(r"[A-Za-z]+", "\n".join(texts)))
    singular = dict(UNITS)
    for unit in forms["heldout_units"]:
        # "sheep", "fish": a held-out word whose singular is a training word is not checked.
        if singular[unit] not in {singular[u] for u in forms["train_units"]}:
            assert unit not in words and singular[unit] not in words, unit
    for name in forms["heldout_names"]:
        assert name not in words, name
    assert len(forms["heldout_forms"]) == 16 and len(forms["train_forms"]) == train_forms
    for key in forms["heldout_forms"]:
        form = FORM_KEYS[key]
        for template in (form.story, f"{form.body} {form.question}".strip()):
            pattern = _form_pattern(template)
            assert not any(pattern.search(t) for t in texts), (key, template)
    for kind, held in forms["heldout_questions"].items():
        assert len(held) == 3 and all(q in QUESTION_FORMS[kind] for q in held)
    held_questions = {q["question"] for q in records(world["eval_qa_unseen"])}
    assert not held_questions & {q["question"] for q in records(world["eval_qa_seen"])}
    # Every fact of the world (rebuilt as the generator builds it), asked in a held-out form: in no training text.
    import random

    from toolformer.smallworld.entities import build_world, split_questions

    wc = small_cfg(Path("unused")).world
    facts = build_world(random.Random(wc.seed), wc.towns, wc.rivers, wc.ranges, wc.seas, wc.people, wc.events).facts
    blob = "\n".join(texts)
    asked = [f.questions[i] for f in facts for i in split_questions(wc.seed, wc.heldout_questions)[f.kind][1]]
    assert held_questions <= set(asked) and len(asked) == 3 * len(facts)
    assert not [q for q in asked if q in blob]


def test_every_heldout_cue_is_trained():
    """A held-out form is a new composition of cues that training forms also use, and training keeps
    forms with the numbers in either order, for every operation and several seeds."""
    from toolformer.smallworld.arithmetic import OPS, split_forms

    for seed in range(5):
        split = split_forms(seed)
        for op in OPS:
            train, held = split.forms(op), split.forms(op, heldout=True)
            assert len(held) == 4 and len(train) == 8
            assert {c for f in held for c in f.cues} <= {c for f in train for c in f.cues}
            assert {f.reversed for f in train} == {True, False}


def test_extra_forms_say_every_scene_word_with_two_operations():
    """Without the extra forms most scene words come with one operation in training ("families" only with ÷ for
    seed 0); with them each of SCENE_WORDS is said with two or more, for several seeds."""
    from toolformer.smallworld.arithmetic import SCENE_WORDS, split_forms

    def ops_saying(word, forms):
        return {f.op for f in forms if word in re.findall(r"[a-z]+", f"{f.story} {f.body} {f.question}".lower())}

    single = [w for w in SCENE_WORDS if len(ops_saying(w, split_forms(0).train_forms)) < 2]
    assert "families" in single and len(single) >= len(SCENE_WORDS) // 2
    for seed in range(8):
        forms = split_forms(seed, extra_train=True).train_forms
        assert not [w for w in SCENE_WORDS if len(ops_saying(w, forms)) < 2], seed
