"""The small world's files (toolformer.smallworld.generate_world): the same seed gives the same bytes, every file
has its fields, gold calls are right and point at their answers, every fact is stated where its split says, the
two-step documents, the config's checks and ``toolformer world generate``. (Its pre-training text:
test_world_pretrain_text.py; what it holds out: test_world_heldout.py.)"""

import json
import re

import pytest
from worlds import SMALL, records, small_cfg

from toolformer.config.load import ConfigError
from toolformer.smallworld import generate_world
from toolformer.smallworld.config import load_smallworld
from toolformer.smallworld.corpora import LeakGuard, date_words
from toolformer.smallworld.entities import Fact
from toolformer.tools import REGISTRY
from toolformer.tools.calculator import calculate
from toolformer.tools.calls import get_style, parse_calls
from toolformer.tools.qa import QA


def test_same_seed_same_files_other_seed_other_world(small_world, tmp_path):
    again = generate_world(small_cfg(tmp_path / "a"))
    for name, path in small_world.items():
        if name != "summary":
            assert path.read_bytes() == again[name].read_bytes(), name
    other = generate_world(small_cfg(tmp_path / "b", seed=1))
    assert other["knowledge"].read_bytes() != small_world["knowledge"].read_bytes()
    assert other["pretrain"].read_bytes() != small_world["pretrain"].read_bytes()


def test_files_have_their_fields(small_world):
    summary = json.loads(small_world["summary"].read_text())
    assert summary["seed"] == 0 and summary["counts"]["pretrain"] == SMALL["pretrain_docs"]
    facts = records(small_world["knowledge"])
    assert len(facts) == summary["facts"]["total"] and summary["facts"]["eval"] > 0
    assert all({"subject", "relation", "object", "text"} <= set(f) and f["object"] in f["text"] for f in facts)
    assert all({"id", "title", "text"} <= set(d) for d in records(small_world["collection"]))
    assert all(set(d) == {"text"} and d["text"] for d in records(small_world["pretrain"]))
    assert all(set(d) == {"text"} for d in records(small_world["heldout"]))
    corpus = records(small_world["corpus"])
    assert len(corpus) == SMALL["corpus_docs"] + SMALL["twostep_docs"]
    assert len({d["id"] for d in corpus}) == len(corpus)
    for d in corpus:
        assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", d["date"]) and d["text"] and d["gold_calls"]
    forms = json.loads(small_world["forms"].read_text())
    for name in ("seen", "unseen"):
        problems = json.loads(small_world[f"eval_math_{name}"].read_text())
        assert len(problems) == SMALL["eval_math"]
        assert {p["Type"] for p in problems} == {"Addition", "Subtraction", "Multiplication", "Common-Division"}
        for p in problems:
            assert isinstance(p["Answer"], (int, float)) and p["Question"].endswith("?")
            assert (p["Form"] in forms["heldout_forms"]) == (name == "unseen")
            numbers = [int(n.replace(",", "")) for n in re.findall(r"\d[\d,]*", f"{p['Body']} {p['Question']}")]
            assert max([*numbers, p["Answer"]]) >= 100  # 3-4-digit operations
        qa = records(small_world[f"eval_qa_{name}"])
        assert len(qa) == SMALL["eval_qa"]
        assert all(isinstance(q["question"], str) and q["answer"] and isinstance(q["aliases"], list) for q in qa)


def test_gold_calls_are_right_and_point_at_the_answer(small_world):
    style = get_style("plain")
    for d in records(small_world["corpus"]):
        for g in d["gold_calls"]:
            assert d["text"].startswith(g["result"], g["char_start"])
            if g["tool"] == "Calculator":
                assert calculate(g["input"]) == g["result"]
            if g["tool"] == "Calendar":
                import datetime as dt

                assert g["result"] == date_words(dt.date.fromisoformat(d["date"]))
        assert not parse_calls(d["text"], style, set(REGISTRY))  # the annotation corpus has no calls yet


def test_twostep_problems_and_documents(small_world):
    """Two-step problems (SVAMP format, training forms and words) and annotation documents whose second gold call
    starts with the first one's result, written at the answer of a worked solution."""
    from toolformer.smallworld.twostep import TWOSTEP_KEYS
    from toolformer.tasks import load_task

    forms = json.loads(small_world["forms"].read_text())
    problems = json.loads(small_world["eval_math_twostep"].read_text())
    assert len(problems) == SMALL["eval_twostep"]
    assert {p["Form"] for p in problems} == {f"twostep-{k}" for k in TWOSTEP_KEYS}  # 16 items: each form twice
    fmt, data = load_task(small_world["eval_math_twostep"], "svamp")
    assert fmt == "svamp" and len(data.items) == len(problems) and not data.skipped
    for p, item in zip(problems, data.items):
        a, op1, b, op2, d = p["Equation"].replace("(", " ").replace(")", " ").split()
        c1 = calculate(f"{a} {op1} {b}")
        assert calculate(f"{c1} {op2} {d}") == str(p["Answer"]) == item.answers[0]
        assert [n.replace(",", "") for n in re.findall(r"\d[\d,]*", item.question)] == [a, b, d]
        assert item.question == f"{p['Body']} {p['Question']}" and p["Question"].endswith("?")
        assert not set(re.findall(r"[A-Za-z]+", item.question)) & set(forms["heldout_names"] + forms["heldout_units"])
    docs = records(small_world["corpus"])[SMALL["corpus_docs"]:SMALL["corpus_docs"] + SMALL["twostep_docs"]]
    assert [d["id"] for d in docs] == [f"d{SMALL['corpus_docs'] + i:05d}" for i in range(SMALL["twostep_docs"])]
    for d in docs:
        first, second = d["gold_calls"]
        assert second["input"].startswith(f"{first['result']} ") and first["char_start"] < second["char_start"]
        assert d["text"][first["char_start"]:].startswith(f"{first['result']} {second['input'].split()[1]} ")
        assert "The answer is " in d["text"][:first["char_start"]]


def test_twostep_documents_leave_every_other_file_as_it_was(small_world, tmp_path):
    """The two-step documents and problems draw from their own streams: without them every file is the same,
    and the annotation corpus is the same up to them."""
    without = generate_world(small_cfg(tmp_path, twostep_docs=0, eval_twostep=0))
    assert not without["eval_math_twostep"].exists()
    for name, path in without.items():
        if name not in ("summary", "corpus", "eval_math_twostep"):
            assert path.read_bytes() == small_world[name].read_bytes(), name
    assert small_world["corpus"].read_bytes().startswith(without["corpus"].read_bytes())
    assert "eval_math_twostep" not in json.loads(without["summary"].read_text())["files"]


def test_qa_tool_answers_every_eval_question_and_gold_call(small_world):
    qa = QA(small_world["knowledge"])
    for q in records(small_world["eval_qa_seen"]) + records(small_world["eval_qa_unseen"]):
        assert qa.run(q["question"]) == q["answer"], q
    for d in records(small_world["corpus"]):
        for g in d["gold_calls"]:
            if g["tool"] == "QA":
                assert qa.run(g["input"]) == g["result"], g



def _states(text: str, fact: dict) -> bool:
    named = any(re.search(rf"(?<!\w){re.escape(n)}(?!\w)", text) for n in [fact["subject"], *fact.get("aliases", [])])
    return named and re.search(rf"(?<!\w){re.escape(fact['object'])}(?!\w)", text) is not None


def test_each_fact_is_stated_where_its_split_says(small_world):
    pre = [d["text"] for d in records(small_world["pretrain"])]
    corpus = [d["text"] for d in records(small_world["corpus"])]
    facts = records(small_world["knowledge"])
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
    from toolformer.cli.app import main

    overrides = [f"world.{k}={str(v).lower()}" for k, v in SMALL.items()]
    assert main(["world", "generate", f"run_dir={tmp_path}", *overrides]) == 0
    assert "world: " in capsys.readouterr().out and (tmp_path / "world" / "world.json").exists()
    assert main(["world", "generate", "world.towns=1"]) == 2
