"""The small world's pre-training text: call notes of every tool, copy-call quizzes and word problems (their
wording scrambled or rewritten, the call's input copied from the text), loose word problems whose cue names the
operation, and calls that take the numbers in the text's order."""

import json
import re
from pathlib import Path

from worlds import records, small_cfg

from toolformer.smallworld import generate_world
from toolformer.tools import REGISTRY
from toolformer.tools.calculator import calculate
from toolformer.tools.calls import get_style, parse_calls


def test_pretraining_text_has_call_notes_of_every_tool(small_world):
    style = get_style("plain")
    texts = [d["text"] for d in records(small_world["pretrain"])]
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


def test_copycall_documents_copy_their_scrambled_wording_into_the_call(small_world):
    """Pre-training's copy-call documents: quizzes and word problems in broken-up wording, the call inline where a
    tuned model writes it, its input copied from the text (every word of a question, the numbers of a problem)."""
    style = get_style("plain")
    from toolformer.smallworld.copying import NOISE_WORDS

    quizzes = problems = noisy = 0
    for text in (d["text"] for d in records(small_world["pretrain"])):
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


def test_rewritten_problems_keep_numbers_cues_and_objects(small_world, tmp_path):
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
            assert path.read_bytes() == small_world[name].read_bytes(), name
    before, after = (path.read_text(encoding="utf-8") for path in (small_world["pretrain"], rewritten["pretrain"]))
    assert before != after
    vocabulary = set(re.findall(r"\b[a-z]+\b", before))  # every word of the corpus without rewriting
    problems = []  # (the text since the previous call's answer, the call's input)
    for doc in (d["text"] for d in records(rewritten["pretrain"])):
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


def test_rewritten_quiz_questions_are_copied_and_keep_their_names(small_world, tmp_path):
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
            assert path.read_bytes() == small_world[name].read_bytes(), name
    known = set(" ".join(QUESTION_FORMS[k][i] for k in QUESTION_FORMS for i in range(len(QUESTION_FORMS[k])))
                .replace("?", "").split())
    asked = new_words = 0
    for text in (d["text"] for d in records(rewritten["pretrain"])):
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


def test_cuecall_documents_take_the_operation_from_their_cue(small_world):
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
    assert sum("? The answer is [Calculator(" in d["text"] for d in records(small_world["pretrain"])) > 20


def test_text_order_writes_commutative_calls_as_the_text_says_them(tmp_path):
    """world.text_order: the notes and gold calls of + and * take the numbers in the order the text states them;
    - and / keep a op b; the texts themselves are unchanged."""
    plain = generate_world(small_cfg(tmp_path / "a"))
    ordered = generate_world(small_cfg(tmp_path / "b", text_order=True))
    swapped = 0
    for d0, d1 in zip(records(plain["corpus"]), records(ordered["corpus"])):
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
