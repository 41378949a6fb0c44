"""lm-evaluation-harness tasks of local files (``toolformer tasks lmeval``, toolformer/integrations/lmeval_tasks.py):
what they hold, a user's files left alone without --force, the shipped tasks of the small world's evaluation sets,
and the same accuracy through ``toolformer evaluate``, ``toolformer score`` and ``lm_eval`` with the toolformer
model."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from helpers import ROOT, read_jsonl

from toolformer.cli.app import main
from toolformer.integrations.lmeval_tasks import process_results, write_task
from toolformer.tasks import load_task
from toolformer.tasks.score import score_file

FIX = ROOT / "tests" / "fixtures" / "eval"
SHIPPED = ROOT / "data" / "lmeval"


def lmeval_argv(tc, out: Path) -> list[str]:
    """``toolformer tasks lmeval`` of one ``evaluate.tasks`` entry, with its settings."""
    argv = ["tasks", "lmeval", tc.path, "--format", tc.format, "--kind", tc.kind, "--name", tc.name,
            "--prompt", tc.prompt, "--out", str(out)]
    return argv + (["--max-new-tokens", str(tc.max_new_tokens)] if tc.max_new_tokens else [])


@pytest.fixture(scope="module")
def demo_world(tmp_path_factory):
    """The demo config's small world (its evaluation sets) and its pipeline config pointed at it."""
    from toolformer.smallworld.config import load_smallworld
    from toolformer.smallworld.demo import world_config
    from toolformer.smallworld.generator import ensure_world

    run_dir = tmp_path_factory.mktemp("demo")
    sw = load_smallworld(ROOT / "configs" / "demo.yaml", [f"run_dir={run_dir}"])
    ensure_world(sw, quiet=True)
    return world_config(sw).pipeline


def task_yaml(folder: Path, name: str) -> dict:
    """A written task's YAML (``!function X`` read as the string X)."""

    class Loader(yaml.SafeLoader):
        pass

    Loader.add_constructor("!function", lambda loader, node: f"!function {loader.construct_scalar(node)}")
    return yaml.load((folder / f"{name}.yaml").read_text(encoding="utf-8"), Loader)


def docs_of(folder: Path, name: str) -> list[dict]:
    """The documents lm-eval reads for task ``name`` written in ``folder``: its ``custom_dataset`` hook called
    as lm-eval calls it (the task's dataset_kwargs and metadata, the model's arguments)."""
    from toolformer.integrations.lmeval_tasks import load_docs

    spec = task_yaml(folder, name)
    assert spec["custom_dataset"] == "!function utils.load_docs" and spec["test_split"] == "test"
    return list(load_docs(folder, **spec["metadata"], **spec["dataset_kwargs"], pretrained="ignored")["test"])


@pytest.mark.parametrize("path,kind,outputs", [
    ("SVAMP.json", "math", ["[Calculator(8 + 5) → 13] 13.", "The answer is 12 cakes.", "x = 7 + 6 = 13",
                            "[Calculator(8 + 5"]),
    ("triviaqa.jsonl", "qa", ["The Vessa flows there.", "[QA(Which river?) → Vessa] Vessa River", "1968", "Rome"]),
    ("lama.jsonl", "lama", ["Brackenford is", "one two three four five Brackenford", "Aldermoor"]),
])
def test_a_written_task_scores_every_output_as_toolformer_score(tmp_path, path, kind, outputs):
    """The written items are the loaded ones; each output scores through the task's hook exactly as
    ``toolformer score`` scores it (the same metric, word window and call removal)."""
    report = write_task(FIX / path, tmp_path, "t", kind=kind)
    fmt, data = load_task(FIX / path)
    assert [i["id"] for i in read_jsonl(tmp_path / "t.jsonl")] == [i.id for i in data.items]
    docs = docs_of(tmp_path, "t")
    assert docs[0]["prompt"] == report["prompt"].replace("{question}", data.items[0].question)
    assert report["max_words"] == (5 if kind == "lama" else 20)
    seen = set()
    for out in outputs:
        records, _ = score_file(data, {i.id: out for i in data.items}, report["kind"], fmt, report["max_words"])
        accs = [process_results(d, [out])["acc"] for d in docs]
        assert accs == [float(r["correct"]) for r in records], out
        seen.update(accs)
        called = out.startswith(("[Calculator(", "[QA("))
        assert {process_results(d, [out])["call_rate"] for d in docs} == {float(called)}
    assert seen == {0.0, 1.0}  # right and wrong answers among them


def test_task_yaml_holds_the_prompt_metric_and_decoding(tmp_path):
    main(["tasks", "lmeval", str(FIX / "SVAMP.json"), "--name", "svamp", "--out", str(tmp_path),
          "--prompt", 'Q: "{question}" {{A}}:\n', "--max-new-tokens", "40", "--max-items", "2"])
    spec = task_yaml(tmp_path, "svamp")
    assert spec["output_type"] == "generate_until" and spec["process_results"] == "!function utils.process_results"
    assert spec["generation_kwargs"] == {"until": [], "do_sample": False, "max_gen_toks": 40}
    assert spec["doc_to_text"] == "{{prompt}}" and spec["dataset_kwargs"]["toolformer_task"]["kind"] == "math"
    docs = docs_of(tmp_path, "svamp")
    assert len(docs) == 2 and docs[0]["prompt"].startswith('Q: "') and docs[0]["prompt"].endswith('" {{A}}:\n')
    assert (tmp_path / "utils.py").read_text().count("def load_docs") == 1


def test_a_qa_file_as_math_keeps_the_numbers_and_bad_input_is_named(tmp_path, capsys):
    from toolformer.tasks import gold_numbers

    assert main(["tasks", "lmeval", str(FIX / "triviaqa.jsonl"), "--name", "t", "--out", str(tmp_path),
                 "--kind", "math"]) == 0
    _, data = load_task(FIX / "triviaqa.jsonl")
    numbers = [i.id for i in data.items if gold_numbers(i.answers[0])]
    assert 0 < len(numbers) < len(data.items)
    assert [d["id"] for d in read_jsonl(tmp_path / "t.jsonl")] == numbers
    assert f"{len(data.items) - len(numbers)} without a number left out" in capsys.readouterr().out
    assert main(["tasks", "lmeval", str(FIX / "SVAMP.json"), "--name", "a b", "--out", str(tmp_path)]) == 2
    assert "--name 'a b'" in capsys.readouterr().err
    assert main(["tasks", "lmeval", str(FIX / "SVAMP.json"), "--name", "t", "--out", str(tmp_path),
                 "--prompt", "no placeholder"]) == 2
    assert "{question}" in capsys.readouterr().err
    assert main(["tasks", "lmeval", str(tmp_path / "missing.json"), "--name", "t", "--out", str(tmp_path)]) == 2
    assert "missing.json" in capsys.readouterr().err


def test_a_folder_of_the_users_is_not_overwritten_without_force(tmp_path, capsys):
    argv = ["tasks", "lmeval", str(FIX / "SVAMP.json"), "--name", "svamp", "--out", str(tmp_path)]
    own = {"utils.py": b"# my own hooks\n", "svamp.yaml": b"my: yaml\n", "notes.txt": b"keep\n"}
    for name, data in own.items():
        (tmp_path / name).write_bytes(data)
    capsys.readouterr()
    assert main(argv) == 2
    assert capsys.readouterr().err == (f"toolformer: error: {tmp_path / 'svamp.yaml'}: exists and is not the unchanged "
                                       "output of `toolformer tasks lmeval`; --force replaces it\n")
    assert {n: (tmp_path / n).read_bytes() for n in own} == own and not (tmp_path / "svamp.jsonl").exists()
    assert main([*argv, "--force"]) == 0 and (tmp_path / "notes.txt").read_bytes() == b"keep\n"
    # Its own unchanged output is rewritten freely: the same task again, another task beside it (one utils.py).
    assert main([*argv, "--max-new-tokens", "40", "--prompt", 'Q: "{question}"\nA:']) == 0
    assert main([*argv, "--max-new-tokens", "40"]) == 0
    assert main(["tasks", "lmeval", str(FIX / "triviaqa.jsonl"), "--name", "trivia", "--out", str(tmp_path)]) == 0
    spec = tmp_path / "svamp.yaml"
    spec.write_text(spec.read_text().replace("do_sample: false", "do_sample: true"))  # edited by hand: theirs now
    capsys.readouterr()
    assert main(argv) == 2 and f"{spec}: exists" in capsys.readouterr().err
    (tmp_path / "trivia.yaml").unlink()
    assert main(["tasks", "lmeval", str(FIX / "triviaqa.jsonl"), "--name", "trivia", "--out", str(tmp_path)]) == 2
    assert f"{tmp_path / 'trivia.jsonl'}: exists" in capsys.readouterr().err  # items without the task that names them
    from toolformer.integrations.lmeval_tasks import own_yaml

    assert all(own_yaml(p.read_text(encoding="utf-8"), p.stem) for p in SHIPPED.glob("*.yaml"))  # the shipped tasks


@pytest.mark.slow  # over 5 s: the demo_world fixture, only these two use it
def test_shipped_small_world_tasks_are_what_the_command_writes_now(demo_world, tmp_path):
    """data/lmeval holds the tasks of the demo config's evaluation sets exactly as the command writes them from
    the world generated now (so neither can drift from the other)."""
    tasks = demo_world.evaluate.tasks
    assert {t.name for t in tasks} == {"math_seen", "math_unseen", "qa_seen", "qa_unseen", "math_twostep"}
    for tc in tasks:
        assert main(lmeval_argv(tc, tmp_path)) == 0
    written = sorted(p.name for p in tmp_path.iterdir())
    assert sorted(p.name for p in SHIPPED.iterdir() if p.name != "__pycache__") == written
    for name in written:
        assert (SHIPPED / name).read_bytes() == (tmp_path / name).read_bytes(), name


@pytest.mark.slow  # over 5 s: the demo_world fixture, only these two use it
def test_same_accuracy_through_evaluate_score_and_lm_eval(demo_world, tmp_path):
    """The shipped base model (it writes calls), saved as a model folder with the world's tools, on the first
    items of math_unseen and qa_unseen: the evaluate stage, ``toolformer score`` on its predictions and lm_eval
    with the toolformer model decode the same outputs and give the same accuracy."""
    pytest.importorskip("lm_eval")
    import dataclasses

    import lm_eval
    from lm_eval.tasks import TaskManager

    from toolformer.api import ToolformerModel
    from toolformer.integrations.lmeval_model import ToolformerLM
    from toolformer.stages import evaluate as ev_stage

    cfg = dataclasses.replace(demo_world, run_dir=str(tmp_path / "run"))
    cfg.model.path, cfg.model.threads = str(ROOT / "data" / "world-base"), 1
    folder = ToolformerModel.from_pretrained(cfg.model.path, config=cfg, warn=lambda m: None).save_pretrained(
        tmp_path / "model")
    subsets = {}
    for tc in cfg.evaluate.tasks:
        if tc.name in ("math_unseen", "qa_unseen"):
            src = Path(tc.path)
            sub = tmp_path / src.name
            if src.suffix == ".json":
                sub.write_text(json.dumps(json.loads(src.read_text())[:24]))
            else:
                sub.write_text("".join(src.read_text().splitlines(keepends=True)[:24]))
            subsets[tc.name] = dataclasses.replace(tc, path=str(sub))
    cfg.evaluate.tasks = list(subsets.values())
    cfg.evaluate.rows, cfg.evaluate.extra_models, cfg.evaluate.perplexity_path = ["toolformer"], [], ""
    cfg.evaluate.batch_size, cfg.finetune.output_dir = 8, str(folder)
    rows = ev_stage.run_stage(cfg).output["rows"]

    for tc in subsets.values():
        assert main(lmeval_argv(tc, tmp_path / "lmeval")) == 0
    lm = ToolformerLM(pretrained=str(folder), batch_size=8)
    tasks = TaskManager(include_path=str(tmp_path / "lmeval"), include_defaults=False)  # lm-eval's own: not needed
    out = lm_eval.simple_evaluate(model=lm, tasks=list(subsets), log_samples=True, task_manager=tasks)
    for name, tc in subsets.items():
        preds = tmp_path / "run" / "eval" / "predictions" / "toolformer" / f"{name}.jsonl"
        evaluated = read_jsonl(preds)
        samples = sorted(out["samples"][name], key=lambda s: s["doc_id"])
        assert [s["resps"][0][0] for s in samples] == [r["output"] for r in evaluated]
        assert any(r["calls"] for r in evaluated)  # the tools fired
        assert main(["score", tc.path, "--predictions", str(preds), "--kind", tc.kind, "--json",
                     "--out", str(tmp_path / f"{name}.scores.jsonl")]) == 0
        scored = read_jsonl(tmp_path / f"{name}.scores.jsonl")
        accuracy = rows["toolformer"]["tasks"][name]["accuracy"]
        assert sum(r["correct"] for r in scored) / len(scored) == accuracy
        assert out["results"][name]["acc,none"] == pytest.approx(accuracy, abs=1e-12)
        call_rate = rows["toolformer"]["tasks"][name]["call_rate"]  # one definition: tasks.score.holds_call
        assert out["results"][name]["call_rate,none"] == pytest.approx(call_rate, abs=1e-12) and call_rate > 0
