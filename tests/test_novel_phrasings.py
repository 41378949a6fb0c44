"""python -m toolformer.smallworld.lab.novel_phrasings: word problems in phrasings the world never writes."""

import json
import subprocess
import sys

import pytest

from toolformer.smallworld.arithmetic import EXTRA_FORMS, FORMS, SCENE_FORMS
from toolformer.smallworld.lab import novel_phrasings


def assert_right(items):
    """Each problem's answer follows from its equation, and both numbers are in its text."""
    for i in items:
        a, op, b = i["Equation"].strip("( )").split()
        assert i["Answer"] == {"+": int(a) + int(b), "-": int(a) - int(b), "*": int(a) * int(b),
                               "/": int(a) // int(b)}[op]
        if op == "/":
            assert int(a) % int(b) == 0
        text = f"{i['Body']} {i['Question']}"
        assert a in text and b in text and i["Question"]


@pytest.mark.slow
def test_novel_problems_are_right_and_in_phrasings_the_world_never_writes(tmp_path):
    out = tmp_path / "novel.json"
    done = subprocess.run([sys.executable, "-m", "toolformer.smallworld.lab.novel_phrasings", str(out),
                           "--per-form", "3"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "72 problems in 24 phrasings" in done.stdout
    items = json.loads(out.read_text())
    assert len({i["Form"] for i in items}) == 24 and len(items) == 72
    assert_right(items)
    assert items == novel_phrasings.items(3, 11)  # the seed fixes the set
    # No phrasing shares four words in a row (placeholders aside) with a story, body or question of the world's
    # arithmetic forms, held out or not.
    world = " | ".join(" ".join((f.story, f.body, f.question)) for f in (*FORMS, *EXTRA_FORMS, *SCENE_FORMS))
    for phrasings in (*novel_phrasings.PHRASINGS.values(), *novel_phrasings.PHRASINGS_B.values()):
        for p in phrasings:
            words = p.split()
            for k in range(len(words) - 3):
                window = words[k:k + 4]
                assert any("{" in w for w in window) or " ".join(window) not in world, (window, p)


def test_novel_set_b_is_other_phrasings_with_right_answers():
    b = novel_phrasings.items(2, 11, "b")
    assert len(b) == 48 and len({i["Form"] for i in b}) == 24 and all(i["Form"].startswith("novelb-") for i in b)
    assert_right(b)
    assert not {p for ps in novel_phrasings.PHRASINGS.values() for p in ps} & {
        p for ps in novel_phrasings.PHRASINGS_B.values() for p in ps}


@pytest.mark.slow
def test_novel_phrasings_rejects_a_bad_count(tmp_path):
    done = subprocess.run([sys.executable, "-m", "toolformer.smallworld.lab.novel_phrasings", str(tmp_path / "x.json"),
                           "--per-form", "0"], capture_output=True, text=True)
    assert done.returncode != 0 and "--per-form 0: must be at least 1" in done.stderr
