"""python -m toolformer.world.lab.novel_phrasings (word problems in phrasings the world never writes) and
python -m toolformer.world.lab.merge_sweep."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from test_finetune import write_sums

from toolformer.world.arithmetic import EXTRA_FORMS, FORMS, SCENE_FORMS
from toolformer.world.lab import novel_phrasings

ROOT = Path(__file__).resolve().parent.parent


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


def test_novel_problems_are_right_and_in_phrasings_the_world_never_writes(tmp_path):
    out = tmp_path / "novel.json"
    done = subprocess.run([sys.executable, "-m", "toolformer.world.lab.novel_phrasings", str(out), "--per-form", "3"],
                          capture_output=True, text=True)
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


def test_novel_phrasings_rejects_a_bad_count(tmp_path):
    done = subprocess.run([sys.executable, "-m", "toolformer.world.lab.novel_phrasings", str(tmp_path / "x.json"),
                           "--per-form", "0"], capture_output=True, text=True)
    assert done.returncode != 0 and "--per-form 0: must be at least 1" in done.stderr


def test_merge_sweep_needs_a_run_folder(tmp_path):
    done = subprocess.run([sys.executable, "-m", "toolformer.world.lab.merge_sweep", str(tmp_path), "0.5"],
                          capture_output=True, text=True)
    assert done.returncode != 0 and "config.yaml: not found" in done.stderr


@pytest.mark.slow
def test_merge_sweep_evaluates_each_weight_and_puts_the_run_back(tmp_path, tiny_model_dir):
    run = tmp_path / "run"
    write_sums(run)
    (tmp_path / "sums.json").write_text(json.dumps(
        [{"Body": f"Vell had {a} boats and bought {a + 1} more.", "Question": "How many boats?",
          "Equation": f"( {a} + {a + 1} )", "Answer": 2 * a + 1} for a in range(10, 14)]))
    config = tmp_path / "ft.yaml"
    config.write_text(
        f"run_dir: {run}\nstages: [finetune]\nmodel: {{path: {tiny_model_dir}}}\ntools: {{enabled: [Calculator]}}\n"
        "finetune: {learning_rate: 0.003, batch_size: 4, micro_batch_size: 2, max_steps: 2, max_length: 32,\n"
        "           eval_every: 2, save_every: 2, dev_ratio: 0.25, merge: 0.5}\n"
        f"evaluate: {{max_new_tokens: 4, tasks: [{{name: sums, path: {tmp_path / 'sums.json'}, format: svamp, "
        "kind: math}]}\n")
    done = subprocess.run([sys.executable, "-m", "toolformer.cli", "run", "--config", str(config)],
                          capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    record = json.loads((run / "model" / "merge.json").read_text())
    done = subprocess.run([sys.executable, "-m", "toolformer.world.lab.merge_sweep", str(run), "1.0", "0.25"],
                          capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.strip().splitlines()
    assert lines[-4:-2] == ["| merge | sums | disabled perplexity |", "| ---: | ---: | ---: |"]
    assert lines[-2].startswith("| 1 | ") and lines[-1].startswith("| 0.25 | ")
    for alpha in ("1", "0.25"):
        rows = json.loads((run / f"eval-merge-{alpha}" / "results.json").read_text())["rows"]
        assert set(rows) == {"toolformer", "toolformer_disabled"}
    # The run's own weight again: the same merged weights as before the sweep.
    assert json.loads((run / "model" / "merge.json").read_text())["merged_sha256"] == record["merged_sha256"]
