import json
import re
from pathlib import Path

import pytest

from toolformer.config.load import ConfigError
from toolformer.smallworld import generate_world
from toolformer.smallworld.config import SmallWorldConfig, WorldConfig, load_smallworld
from toolformer.smallworld.corpora import LeakGuard, date_words
from toolformer.smallworld.entities import Fact
from toolformer.tools import REGISTRY
from toolformer.tools.calculator import calculate
from toolformer.tools.calls import get_style, parse_calls
from toolformer.tools.qa import QA

SMALL = dict(towns=14, rivers=3, ranges=2, seas=2, people=18, events=6, pretrain_docs=400, corpus_docs=150,
             heldout_docs=40, eval_math=24, eval_qa=30, twostep_docs=30, eval_twostep=16,
             copycall_share=0.2, cuecall_share=0.1,
             # the plainer world each test below switches its feature on in (the shipped world has them all)
             note_share=0.3, induction_share=0.0, noise_share=0.0, rewrite_share=0.0, rewrite_math_share=0.0,
             text_order=False, extra_train_forms=False, scene_forms=False)


def small_cfg(out: Path, **kw) -> SmallWorldConfig:
    cfg = SmallWorldConfig(world=WorldConfig(**{**SMALL, **kw}))
    cfg.pipeline.run_dir = str(out)
    return cfg


def jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> dict[str, Path]:
    return generate_world(small_cfg(tmp_path_factory.mktemp("world")))


def test_same_seed_same_files_other_seed_other_world(world, tmp_path):
    again = generate_world(small_cfg(tmp_path / "a"))
    for name, path in world.items():
        if name != "summary":
            assert path.read_bytes() == again[name].read_bytes(), name
    other = generate_world(small_cfg(tmp_path / "b", seed=1))
    assert other["knowledge"].read_bytes() != world["knowledge"].read_bytes()
    assert other["pretrain"].read_bytes() != world["pretrain"].read_bytes()


def test_files_have_their_fields(world):
    summary = json.loads(world["summary"].read_text())
    assert summary["seed"] == 0 and summary["counts"]["pretrain"] == SMALL["pretrain_docs"]
    facts = jsonl(world["knowledge"])
    assert len(facts) == summary["facts"]["total"] and summary["facts"]["eval"] > 0
    assert all({"subject", "relation", "object", "text"} <= set(f) and f["object"] in f["text"] for f in facts)
    assert all({"id", "title", "text"} <= set(d) for d in jsonl(world["collection"]))
    assert all(set(d) == {"text"} and d["text"] for d in jsonl(world["pretrain"]))
    assert all(set(d) == {"text"} for d in jsonl(world["heldout"]))
    corpus = jsonl(world["corpus"])
    assert len(corpus) == SMALL["corpus_docs"] + SMALL["twostep_docs"]
    assert len({d["id"] for d in corpus}) == len(corpus)
    for d in corpus:
        assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", d["date"]) and d["text"] and d["gold_calls"]
    forms = json.loads(world["forms"].read_text())
    for name in ("seen", "unseen"):
        problems = json.loads(world[f"eval_math_{name}"].read_text())
        assert len(problems) == SMALL["eval_math"]
        assert {p["Type"] for p in problems} == {"Addition", "Subtraction", "Multiplication", "Common-Division"}
        for p in problems:
            assert isinstance(p["Answer"], (int, float)) and p["Question"].endswith("?")
            assert (p["Form"] in forms["heldout_forms"]) == (name == "unseen")
            numbers = [int(n.replace(",", "")) for n in re.findall(r"\d[\d,]*", f"{p['Body']} {p['Question']}")]
            assert max([*numbers, p["Answer"]]) >= 100  # 3-4-digit operations
        qa = jsonl(world[f"eval_qa_{name}"])
        assert len(qa) == SMALL["eval_qa"]
        assert all(isinstance(q["question"], str) and q["answer"] and isinstance(q["aliases"], list) for q in qa)


def test_gold_calls_are_right_and_point_at_the_answer(world):
    style = get_style("plain")
    for d in jsonl(world["corpus"]):
        for g in d["gold_calls"]:
            assert d["text"].startswith(g["result"], g["char_start"])
            if g["tool"] == "Calculator":
                assert calculate(g["input"]) == g["result"]
            if g["tool"] == "Calendar":
                import datetime as dt

                assert g["result"] == date_words(dt.date.fromisoformat(d["date"]))
        assert not parse_calls(d["text"], style, set(REGISTRY))  # the annotation corpus has no calls yet


def test_twostep_problems_and_documents(world):
    """Two-step problems (SVAMP format, training forms and words) and annotation documents whose second gold call
    starts with the first one's result, written at the answer of a worked solution."""
    from toolformer.smallworld.twostep import TWOSTEP_KEYS
    from toolformer.tasks import load_task

    forms = json.loads(world["forms"].read_text())
    problems = json.loads(world["eval_math_twostep"].read_text())
    assert len(problems) == SMALL["eval_twostep"]
    assert {p["Form"] for p in problems} == {f"twostep-{k}" for k in TWOSTEP_KEYS}  # 16 items: each form twice
    fmt, data = load_task(world["eval_math_twostep"], "svamp")
    assert fmt == "svamp" and len(data.items) == len(problems) and not data.skipped
    for p, item in zip(problems, data.items):
        a, op1, b, op2, d = p["Equation"].replace("(", " ").replace(")", " ").split()
        c1 = calculate(f"{a} {op1} {b}")
        assert calculate(f"{c1} {op2} {d}") == str(p["Answer"]) == item.answers[0]
        assert [n.replace(",", "") for n in re.findall(r"\d[\d,]*", item.question)] == [a, b, d]
        assert item.question == f"{p['Body']} {p['Question']}" and p["Question"].endswith("?")
        assert not set(re.findall(r"[A-Za-z]+", item.question)) & set(forms["heldout_names"] + forms["heldout_units"])
    docs = jsonl(world["corpus"])[SMALL["corpus_docs"]:SMALL["corpus_docs"] + SMALL["twostep_docs"]]
    assert [d["id"] for d in docs] == [f"d{SMALL['corpus_docs'] + i:05d}" for i in range(SMALL["twostep_docs"])]
    for d in docs:
        first, second = d["gold_calls"]
        assert second["input"].startswith(f"{first['result']} ") and first["char_start"] < second["char_start"]
        assert d["text"][first["char_start"]:].startswith(f"{first['result']} {second['input'].split()[1]} ")
        assert "The answer is " in d["text"][:first["char_start"]]


def test_twostep_documents_leave_every_other_file_as_it_was(world, tmp_path):
    """The two-step documents and problems draw from their own streams: without them every file is the same,
    and the annotation corpus is the same up to them."""
    without = generate_world(small_cfg(tmp_path, twostep_docs=0, eval_twostep=0))
    assert not without["eval_math_twostep"].exists()
    for name, path in without.items():
        if name not in ("summary", "corpus", "eval_math_twostep"):
            assert path.read_bytes() == world[name].read_bytes(), name
    assert world["corpus"].read_bytes().startswith(without["corpus"].read_bytes())
    assert "eval_math_twostep" not in json.loads(without["summary"].read_text())["files"]


def test_qa_tool_answers_every_eval_question_and_gold_call(world):
    qa = QA(world["knowledge"])
    for q in jsonl(world["eval_qa_seen"]) + jsonl(world["eval_qa_unseen"]):
        assert qa.run(q["question"]) == q["answer"], q
    for d in jsonl(world["corpus"]):
        for g in d["gold_calls"]:
            if g["tool"] == "QA":
                assert qa.run(g["input"]) == g["result"], g


def test_pretraining_text_has_call_notes_of_every_tool(world):
    style = get_style("plain")
    texts = [d["text"] for d in jsonl(world["pretrain"])]
    found = {}
    for t in texts:
        for pc in parse_calls(t, style, set(REGISTRY)):
            found.setdefault(pc.call.tool, []).append((pc, t))
    assert {"Calculator", "QA", "Calendar", "WikiSearch"} <= set(found)
    for pc, text in found["Calculator"]:
        assert pc.closed and calculate(pc.call.input) == pc.call.result
        assert re.search(rf"(?<!\d){pc.call.result}(?!\d)", text[pc.end :])  # the note's result is used later
    notes = sum(len(v) for v in found.values())
    assert notes > 0.15 * len(texts)
    assert any(t.startswith("[Calculator(") and "\n" in t for t in texts)
    assert sum(" [" in t for t in texts) > 0  # some notes stand right before their sentence
    problems = [t for t in texts if "The answer is" in t]
    assert len(problems) > 0.05 * len(texts)
    assert sum(t.startswith("Question: ") or "\nQuestion: " in t for t in texts) > 0


def test_copycall_documents_copy_their_scrambled_wording_into_the_call(world):
    """Pre-training's copy-call documents: quizzes and word problems in broken-up wording, the call inline where a
    tuned model writes it, its input copied from the text (every word of a question, the numbers of a problem)."""
    style = get_style("plain")
    from toolformer.smallworld.copying import NOISE_WORDS

    quizzes = problems = noisy = 0
    for text in (d["text"] for d in jsonl(world["pretrain"])):
        for m in re.finditer(r"Question: ([^\n?]*\?) Answer: \[QA\(", text):
            quizzes += 1
            noisy += bool(set(m.group(1).replace("?", "").split()) & set(NOISE_WORDS))
            call = parse_calls(text[m.end() - 4:], style, {"QA"})[0].call
            assert call.input == m.group(1) and text[m.end() - 4:].split("] ", 1)[1].startswith(call.result)
        for m in re.finditer(r"The answer is \[Calculator\(([^)]*)\) → (\d+)\] (\d+)\.", text):
            problems += 1
            a, _op, b = m.group(1).split()
            head = text[: m.start()].replace(",", "")
            assert re.search(rf"(?<!\d){a}(?!\d)", head) and re.search(rf"(?<!\d){b}(?!\d)", head)
            assert m.group(2) == m.group(3) == calculate(m.group(1))
    assert quizzes > 20 and problems > 20
    assert noisy > 20  # SMALL has no noise_share: only the scrambled questions hold random words


def test_rewritten_problems_keep_numbers_cues_and_objects(world, tmp_path):
    """world.rewrite_math_share: the copy-call word problems get about half their small words replaced, but never
    a number, a name, an object word or a word of the operation's cues; the call still takes the problem's
    numbers. Only pretrain.jsonl changes."""
    import random

    from toolformer.smallworld.arithmetic import split_forms
    from toolformer.smallworld.copying import cue_phrases
    from toolformer.smallworld.corpora import Writer
    from toolformer.smallworld.entities import build_world, split_questions

    rewritten = generate_world(small_cfg(tmp_path, rewrite_math_share=1.0))
    for name, path in rewritten.items():
        if name not in ("summary", "pretrain"):
            assert path.read_bytes() == world[name].read_bytes(), name
    before, after = (path.read_text(encoding="utf-8") for path in (world["pretrain"], rewritten["pretrain"]))
    assert before != after
    vocabulary = set(re.findall(r"\b[a-z]+\b", before))  # every word of the corpus without rewriting
    problems = []  # (the text since the previous call's answer, the call's input)
    for doc in (d["text"] for d in jsonl(rewritten["pretrain"])):
        start = 0
        for m in re.finditer(r"The answer is \[Calculator\(([^)]*)\) → [^\]]*\] [^ ]*\.", doc):
            problems.append((doc[start:m.start()], m.group(1)))
            start = m.end()
    assert len(problems) > 20
    new_words = 0
    for text, call in problems:
        stated = [n.replace(",", "") for n in re.findall(r"\d[\d,]*\d|\d", text)]
        assert all(n in stated for n in re.findall(r"\d+", call)), (text, call)
        new_words += bool(set(re.findall(r"\b[a-z]+\b", text)) - vocabulary)
    assert new_words > 0.25 * len(problems)  # the copy-call problems among them; 0 by definition without rewriting

    wc = small_cfg(Path("unused")).world
    split = split_forms(wc.seed, wc.heldout_forms_per_op, wc.heldout_vocabulary)
    w = Writer(build_world(random.Random(1), 14, 3, 2, 2, 18, 6), random.Random(2), [], split,
               {k: tr for k, (tr, _ho) in split_questions(wc.seed, wc.heldout_questions).items()})
    changed = 0
    for _ in range(200):
        item = w.item("small")
        text = item.prompt()
        out = w.rewritten(text, w._cue_words(item))
        keep = set(" ".join(cue_phrases(split)[item.op]).split()) | {item.slots["units"], item.slots["unit"]}
        pairs = list(zip(text.split(" "), out.split(" "), strict=True))
        changed += any(a != b for a, b in pairs)
        for a, b in pairs:
            if re.search(r"[0-9A-Z]", a) or a.rstrip("?.,!") in keep:
                assert a == b, (text, out)
    assert changed > 150


def test_rewritten_quiz_questions_are_copied_and_keep_their_names(world, tmp_path):
    """world.rewrite_share: that share of the copy-call quizzes have about half their small words replaced by
    random ones; each call still copies its question word for word. Only pretrain.jsonl changes, and a share of 0
    draws nothing from the stream (the shipped base model's pretrain.jsonl stays the same)."""
    import random

    from toolformer.smallworld.arithmetic import split_forms
    from toolformer.smallworld.corpora import Writer
    from toolformer.smallworld.entities import QUESTION_FORMS, build_world, split_questions

    style = get_style("plain")
    rewritten = generate_world(small_cfg(tmp_path, rewrite_share=1.0))
    for name, path in rewritten.items():
        if name not in ("summary", "pretrain"):
            assert path.read_bytes() == world[name].read_bytes(), name
    known = set(" ".join(QUESTION_FORMS[k][i] for k in QUESTION_FORMS for i in range(len(QUESTION_FORMS[k])))
                .replace("?", "").split())
    asked = new_words = 0
    for text in (d["text"] for d in jsonl(rewritten["pretrain"])):
        for m in re.finditer(r"Question: ([^\n?]*\?) Answer: \[QA\(", text):
            asked += 1
            assert parse_calls(text[m.end() - 4:], style, {"QA"})[0].call.input == m.group(1)
            new_words += bool(set(m.group(1).replace("?", "").split()) - known)
    assert asked > 20 and new_words > 0.7 * asked
    # The same world's facts asked in a held-out form: in no rewritten text either.
    wc = small_cfg(Path("unused")).world
    facts = build_world(random.Random(wc.seed), wc.towns, wc.rivers, wc.ranges, wc.seas, wc.people, wc.events).facts
    blob = rewritten["pretrain"].read_text(encoding="utf-8")
    assert not [q for f in facts for i in split_questions(wc.seed, wc.heldout_questions)[f.kind][1]
                if (q := f.questions[i]) in blob]
    # The random words are no held-out object word or name (test_heldout_forms_and_words_appear_in_no_training_text).
    split = json.loads(rewritten["forms"].read_text())
    words = set(re.findall(r"[A-Za-z]+", blob))
    assert not words & (set(split["heldout_units"]) - set(split["train_units"])) - {"sheep", "fish"}
    assert not words & set(split["heldout_names"])
    # Words with a capital or a digit and the punctuation stay in place; about half the others change.
    w = build_world(random.Random(0), wc.towns, wc.rivers, wc.ranges, wc.seas, wc.people, wc.events)
    writer = Writer(w, random.Random(1), [], split_forms(0), {k: tr for k, (tr, _) in split_questions(0).items()})
    text = "How many of the 4,725 people in Morfield Hills were born before the year of the fire there?"
    changed = total = 0
    for _ in range(50):
        out = writer.rewritten(text).split(" ")
        assert len(out) == len(text.split(" ")) and out[-1].endswith("?")
        for old, new in zip(text.split(" "), out):
            if re.search(r"[0-9A-Z]", old):
                assert new == old
            else:
                total += 1
                changed += new != old
    assert 0.3 < changed / total < 0.7


def test_cuecall_documents_take_the_operation_from_their_cue(world):
    """Loose word problems: two numbers, one cue that only one operation's training forms use, the call inline; + and
    * in the text's order, - and / the larger number first; cues are never words of held-out forms alone."""
    from toolformer.smallworld.arithmetic import split_forms
    from toolformer.smallworld.copying import CUE_PHRASES, cue_phrases

    cues = cue_phrases(split_forms(0))
    assert all(cues[op] and set(cues[op]) <= set(CUE_PHRASES[op]) for op in cues)
    assert not set(cues["+"]) & set(cues["-"]) and "each" not in cues["*"] + cues["/"]  # "each" is in both
    import random

    from toolformer.smallworld.corpora import Writer
    from toolformer.smallworld.entities import build_world, split_questions

    wc = small_cfg(Path("unused")).world
    w = build_world(random.Random(0), wc.towns, wc.rivers, wc.ranges, wc.seas, wc.people, wc.events)
    questions = {k: tr for k, (tr, _) in split_questions(0).items()}
    writer = Writer(w, random.Random(1), [], split_forms(0), questions)
    ops = set()
    for doc in (writer.cuecall_doc() for _ in range(200)):
        for m in re.finditer(r"([^?.]*)\? The answer is \[Calculator\((\d+) (.) (\d+)\) → (\d+)\] \5\.", doc):
            head, x, op, y = m.group(1).replace(",", ""), m.group(2), m.group(3), m.group(4)
            ops.add(op)
            said = re.findall(r"\d+", head)
            assert calculate(f"{x} {op} {y}") == m.group(5)
            assert [x, y] == (said if op in "+*" else sorted(said, key=int, reverse=True)), m.group(0)
            assert [c for c in cues[op] if re.search(rf"\b{c}\b", head)], m.group(0)
    assert ops == set("+-*/")
    assert sum("? The answer is [Calculator(" in d["text"] for d in jsonl(world["pretrain"])) > 20


def test_text_order_writes_commutative_calls_as_the_text_says_them(tmp_path):
    """world.text_order: the notes and gold calls of + and * take the numbers in the order the text states them;
    - and / keep a op b; the texts themselves are unchanged."""
    plain = generate_world(small_cfg(tmp_path / "a"))
    ordered = generate_world(small_cfg(tmp_path / "b", text_order=True))
    swapped = 0
    for d0, d1 in zip(jsonl(plain["corpus"]), jsonl(ordered["corpus"])):
        assert d0["text"] == d1["text"]
        for g0, g1 in zip(d0["gold_calls"], d1["gold_calls"]):
            if g0["tool"] != "Calculator" or g0["input"] == g1["input"]:
                continue
            a, op, b = g0["input"].split()
            assert op in "+*" and g1["input"] == f"{b} {op} {a}" and g1["result"] == g0["result"]
            head = d1["text"][: g1["char_start"]].replace(",", "")
            assert head.rindex(b) < head.rindex(a)  # the text says b first
            swapped += 1
    assert swapped > 3


def test_no_eval_item_appears_in_training_or_annotation_text(world):
    texts = [d["text"] for d in jsonl(world["pretrain"]) + jsonl(world["corpus"]) + jsonl(world["heldout"])]
    blob = "\n".join(texts)
    problems = [json.loads(world[f"eval_{name}"].read_text()) for name in ("math_seen", "math_unseen", "math_twostep")]
    for p in [p for ps in problems for p in ps]:
        assert f"{p['Body']} {p['Question']}".strip() not in blob
        numbers = [n for n in re.findall(r"\d+", p["Equation"])] + [str(p["Answer"])]  # a, b (, d), the answer
        for t in texts:
            assert not all(re.search(rf"(?<!\d){n}(?!\d)", t) for n in numbers), (p, t)
    facts = {(f["subject"], f["object"]): f for f in jsonl(world["knowledge"])}
    for q in jsonl(world["eval_qa_seen"]) + jsonl(world["eval_qa_unseen"]):
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


def test_heldout_forms_and_words_appear_in_no_training_text(world):
    """Held-out arithmetic forms, question forms, object words and first names
    are in no pre-training, annotation or held-out text (so in no fine-tuning
    text either: build draws from these), and only the unseen sets use them."""
    assert_heldout_unseen(world, train_forms=32)


def test_extra_train_forms_keep_the_heldout_split_and_reach_training_text(world, tmp_path):
    """world.extra_train_forms: the 48 forms that are never held out join the training forms; the held-out forms,
    objects and names stay those of the seed and are still in no training text, and the new forms are in the
    pre-training and annotation text."""
    from toolformer.smallworld.arithmetic import EXTRA_FORMS

    extra = generate_world(small_cfg(tmp_path, extra_train_forms=True))
    assert_heldout_unseen(extra, train_forms=80)
    forms, plain = (json.loads(w["forms"].read_text()) for w in (extra, world))
    for key in ("heldout_forms", "heldout_units", "heldout_names"):
        assert forms[key] == plain[key], key
    assert forms["train_forms"] == plain["train_forms"] + [f.key for f in EXTRA_FORMS]
    for name in ("pretrain", "corpus"):
        texts = [d["text"] for d in jsonl(extra[name])]
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
        texts = [d["text"] for d in jsonl(scene[name])]
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
    texts = [d["text"] for d in jsonl(world["pretrain"]) + jsonl(world["corpus"]) + jsonl(world["heldout"])]
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
    held_questions = {q["question"] for q in jsonl(world["eval_qa_unseen"])}
    assert not held_questions & {q["question"] for q in jsonl(world["eval_qa_seen"])}
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


def _states(text: str, fact: dict) -> bool:
    named = any(re.search(rf"(?<!\w){re.escape(n)}(?!\w)", text) for n in [fact["subject"], *fact.get("aliases", [])])
    return named and re.search(rf"(?<!\w){re.escape(fact['object'])}(?!\w)", text) is not None


def test_each_fact_is_stated_where_its_split_says(world):
    pre = [d["text"] for d in jsonl(world["pretrain"])]
    corpus = [d["text"] for d in jsonl(world["corpus"])]
    facts = jsonl(world["knowledge"])
    assert {f["split"] for f in facts} == {"pretrain", "corpus", "eval"}
    for f in facts:
        if f["split"] != "pretrain":
            assert not any(_states(t, f) for t in pre), f
    stated = [f for f in facts if f["split"] == "corpus" and any(_states(t, f) for t in corpus)]
    assert len(stated) == sum(f["split"] == "corpus" for f in facts)  # every corpus fact is stated there
    stated = [f for f in facts if f["split"] == "pretrain" and any(_states(t, f) for t in pre)]
    assert len(stated) > 0.6 * sum(f["split"] == "pretrain" for f in facts)  # 400 documents state most


def test_leak_guard():
    fact = Fact("town.population", "Dunmere", "population", "4210", "What is the population of Dunmere?",
                ["{o}"], ["Dun Mere"])
    guard = LeakGuard([fact])
    assert guard.ok("Dunmere sold 4211 sacks.") and guard.ok("Kessford has 4210 people.")
    assert not guard.ok("In Dunmere, 4210 people live.") and not guard.ok("Dun Mere: 4210.")


def test_config_checks(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text("world:\n  note_share: 0.8\n  earlier_share: 0.5\n")
    with pytest.raises(ConfigError, match="world: note_share \\+ earlier_share exceeds 1"):
        load_smallworld(p)
    p.write_text("world:\n  events: 100\n  towns: 10\n")
    with pytest.raises(ConfigError, match="events"):
        load_smallworld(p)


def test_cli_generate(tmp_path, capsys):
    from toolformer.cli import main

    overrides = [f"world.{k}={str(v).lower()}" for k, v in SMALL.items()]
    assert main(["world", "generate", f"run_dir={tmp_path}", *overrides]) == 0
    assert "world: " in capsys.readouterr().out and (tmp_path / "world" / "world.json").exists()
    assert main(["world", "generate", "world.towns=1"]) == 2
