import json
import shutil
from pathlib import Path

import pytest
from helpers import ROOT, read_jsonl, write_jsonl
from scripted_lm import ScriptedLM, follow

from toolformer.config.load import ConfigError, from_dict
from toolformer.config.schema import PipelineConfig
from toolformer.stages import evaluate as ev_stage

FIX = ROOT / "tests" / "fixtures" / "eval"


@pytest.fixture
def run_dir(tmp_path, tiny_model_dir):
    """A run folder with the tiny model as base (outside) and as the tuned RUN_DIR/model."""
    shutil.copytree(tiny_model_dir, tmp_path / "base")
    shutil.copytree(tiny_model_dir, tmp_path / "run" / "model")
    heldout = ["The bridge over the Vessa opened in 1968.", "Aldermoor has 4,210 people.", "x"]
    write_jsonl(tmp_path / "heldout.jsonl", ({"text": t} for t in heldout))
    return tmp_path


def make_cfg(root: Path, **evaluate) -> PipelineConfig:
    data = {
        "run_dir": str(root / "run"),
        "model": {"path": str(root / "base"), "device": "cpu", "threads": 2},
        "tools": {"enabled": ["Calculator", "Calendar"]},
        "evaluate": {
            "tasks": [
                {"name": "svamp", "path": str(FIX / "SVAMP.json"), "kind": "math",
                 "prompt": "Question: {question}\nAnswer:"},
                {"name": "triviaqa", "path": str(FIX / "triviaqa.jsonl"), "kind": "qa", "max_items": 2},
                {"name": "lama", "path": str(FIX / "lama.jsonl"), "kind": "qa"},
            ],
            "extra_models": [{"name": "control", "path": str(root / "base")}],
            "perplexity_path": str(root / "heldout.jsonl"),
            "max_new_tokens": 6,
            "batch_size": 2,
            **evaluate,
        },
    }
    return from_dict(PipelineConfig, data, "<test>")


def assert_results_file(res: dict, summary, run_dir: Path, out: Path) -> None:
    """results.json: the summary, its rows, models, seed and versions, the tasks with their items in the file,
    scored and skipped (the reasons, and the skipped records on disk)."""
    assert res == json.loads(json.dumps(summary))
    assert list(res["rows"]) == ["base", "toolformer_disabled", "toolformer", "control"]
    assert res["models"]["toolformer"] == str(run_dir / "run" / "model")
    assert res["seed"] == 0 and "torch" in res["versions"]
    assert {t: v["n"] for t, v in res["tasks"].items()} == {"svamp": 3, "triviaqa": 2, "lama": 2}
    assert res["tasks"]["lama"]["max_words"] == 5 and res["tasks"]["triviaqa"]["max_words"] == 20
    # Items in the file, scored and skipped, with the reasons and the skipped records on disk.
    lama = res["tasks"]["lama"]
    assert (lama["in_file"], lama["n"], lama["left_out"]) == (3, 2, 1)
    assert lama["skip_reasons"] == {"[MASK] is not the last word": 1}
    assert [r["id"] for r in read_jsonl(out / "rejected" / "lama.jsonl")] == ["t-3"]
    assert read_jsonl(out / "rejected" / "svamp.jsonl") == []


def assert_cells_are_their_predictions(res: dict, out: Path) -> None:
    """Each row's cell per task: accuracy and call rate of its predictions file; the row's arithmetic and QA."""
    for name, row in res["rows"].items():
        assert set(row["tasks"]) == {"svamp", "triviaqa", "lama"}
        for task, cell in row["tasks"].items():
            preds = read_jsonl(out / "predictions" / name / f"{task}.jsonl")
            assert len(preds) == cell["n"]
            assert cell["accuracy"] == sum(p["correct"] for p in preds) / len(preds)
            assert cell["call_rate"] == sum(bool(p["calls"]) for p in preds) / len(preds)
            for p in preds:
                assert {"prompt", "output", "calls", "prediction", "gold", "correct"} <= set(p)
                if task == "svamp":
                    assert p["prompt"].startswith("Question: ") and p["prompt"].endswith("\nAnswer:")
        assert row["arithmetic"] == row["tasks"]["svamp"]["accuracy"]
        qa = (row["tasks"]["triviaqa"]["accuracy"] + row["tasks"]["lama"]["accuracy"]) / 2
        assert row["qa"] == pytest.approx(qa)


def assert_only_the_tool_row_calls(rows: dict, out: Path) -> None:
    assert rows["toolformer_disabled"]["call_rate"] == 0 and rows["base"]["call_rate"] == 0
    assert rows["control"]["call_rate"] == 0
    for name in rows:
        for task in ("svamp", "triviaqa", "lama"):
            for p in read_jsonl(out / "predictions" / name / f"{task}.jsonl"):
                # Only the tool row starts calls (the random model then writes no valid one).
                assert p["output"].lstrip(" ").startswith("[") == (name == "toolformer"), (name, p["output"])


def assert_perplexity_table_and_manifest(rows: dict, run_dir: Path, out: Path) -> None:
    # Perplexity: every row but toolformer; the same weights give the same number (to rel 1e-6: the thread count
    # may follow the machine's load between rows, and another count sums in another order).
    assert rows["toolformer"]["perplexity"] is None
    ppl = rows["base"]["perplexity"]
    assert ppl > 1
    assert rows["control"]["perplexity"] == pytest.approx(ppl, rel=1e-6)
    assert rows["toolformer_disabled"]["perplexity"] == pytest.approx(ppl, rel=1e-6)
    # Scored with the call-start tokens taken out (tools disabled): below the plain perplexity, which is kept.
    assert 1 < ppl < rows["base"]["perplexity_calls_allowed"]

    md = (out / "results.md").read_text()
    assert "| Model | svamp | triviaqa | lama | Arith. | QA | Perplexity |" in md
    assert "| Toolformer (disabled) |" in md and "| control |" in md

    manifest = json.loads((run_dir / "run" / "evaluate" / "manifest.json").read_text())
    assert manifest["counts"]["per_row"]["toolformer"] == {
        "items": 7, "correct": sum(c["correct"] for c in rows["toolformer"]["tasks"].values()),
        "with_calls": sum(c["with_calls"] for c in rows["toolformer"]["tasks"].values())}


def test_stage_writes_results_table_and_predictions(run_dir, capsys):
    # top_k_trigger = whole vocabulary: the tool row calls at the first step of every item.
    cfg = make_cfg(run_dir, top_k_trigger=600)
    summary = ev_stage.run_stage(cfg).output
    out = run_dir / "run" / "eval"
    res = json.loads((out / "results.json").read_text())
    assert_results_file(res, summary, run_dir, out)
    assert_cells_are_their_predictions(res, out)
    rows = res["rows"]
    assert_only_the_tool_row_calls(rows, out)
    assert_perplexity_table_and_manifest(rows, run_dir, out)
    printed = capsys.readouterr().out
    last = printed.strip().splitlines()[-1]
    assert last.startswith("evaluate: 4 row(s) × 3 task(s), 7 items per row; correct: base ")

    again = ev_stage.run_stage(cfg)
    assert again.skipped and again.output is None  # complete: skipped
    assert "already complete" in capsys.readouterr().out
    # The tuned model rewritten in place (a new fine-tune): evaluated again.
    weights = next((run_dir / "run" / "model").glob("*.safetensors"))
    weights.write_bytes(weights.read_bytes())
    assert not ev_stage.run_stage(cfg).skipped
    assert "already complete" not in capsys.readouterr().out


def test_missing_models(run_dir, capsys):
    shutil.rmtree(run_dir / "run" / "model")
    with pytest.raises(FileNotFoundError, match=r"row 'toolformer_disabled': tuned model folder .*run/model does not"):
        ev_stage.run_stage(make_cfg(run_dir))
    cfg = make_cfg(run_dir, require_tuned=False, rows=["base", "toolformer"], perplexity_path="",
                   tasks=[{"name": "svamp", "path": str(FIX / "SVAMP.json"), "kind": "math", "max_items": 1}])
    res = ev_stage.run_stage(cfg).output
    assert list(res["rows"]) == ["base", "control"] and "toolformer" in res["skipped_rows"]
    assert "row 'toolformer' skipped" in capsys.readouterr().out
    assert res["rows"]["base"]["perplexity"] is None
    cfg = make_cfg(run_dir, require_tuned=False, extra_models=[{"name": "ctl", "path": str(run_dir / "nope")}])
    with pytest.raises(FileNotFoundError, match=r"row 'ctl': model folder .*nope does not exist"):
        ev_stage.run_stage(cfg)


def test_config_errors_name_the_key(run_dir):
    with pytest.raises(ConfigError, match=r"evaluate\.tasks\[0\]: kind: 'maths' is not math or qa"):
        make_cfg(run_dir, tasks=[{"name": "a", "path": "a.json", "kind": "maths"}])
    with pytest.raises(ConfigError, match=r"prompt: the template must contain \{question\}"):
        make_cfg(run_dir, tasks=[{"name": "a", "path": "a.json", "prompt": "Q:"}])
    with pytest.raises(ConfigError, match="row name 'base' is already used"):
        make_cfg(run_dir, extra_models=[{"name": "base", "path": "x"}])
    with pytest.raises(ConfigError, match="duplicate task name"):
        make_cfg(run_dir, tasks=[{"name": "a", "path": "a.json"}, {"name": "a", "path": "b.json"}])


def test_task_file_error_before_any_model_work(run_dir, tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"question": "q", "answer": "seven"}\n')
    cfg = make_cfg(run_dir, tasks=[{"name": "m", "path": str(bad), "format": "triviaqa", "kind": "math"}])
    with pytest.raises(ValueError, match=r"bad\.jsonl: no item has a number as its answer \(task 'm' is math\)"):
        ev_stage.run_stage(cfg)
    assert not (run_dir / "run" / "evaluate").exists()


def _calculator_script(tok):
    """A "tuned" model: calls the calculator on the sum in the prompt and copies
    the result; without a result it guesses 7."""

    def script(text, prompt):
        expr = prompt.split("What is ")[1].split("?")[0]
        call = f" [Calculator({expr}) →"
        if "→" not in text and call.startswith(text):
            return [follow(tok, call, text)] if text else [" [", " 7"]
        if "[" not in text or text.endswith("→"):
            return [follow(tok, " 7.", text)] if "[" not in text else [" 7"]
        if "]" not in text:
            return ["]"]
        result = text[text.index("→") + 1 : text.index("]")].strip()
        tail = text[text.index("]") + 1 :]
        return [follow(tok, f" {result}.", tail)]

    return script


def test_stage_with_a_model_that_uses_the_calculator(run_dir, monkeypatch, tiny_model_dir):
    from toolformer.lm.modeling import load_tokenizer

    tok = load_tokenizer(tiny_model_dir)
    sums = run_dir / "sums.jsonl"
    write_jsonl(sums, ({"id": f"s{i}", "question": f"What is {a}+{b}?", "answer": str(a + b)}
                       for i, (a, b) in enumerate([(1234, 4321), (5, 2), (60, 7)])))
    monkeypatch.setattr(ev_stage, "_load_row_model",
                        lambda cfg, path: (ScriptedLM(tok, _calculator_script(tok), with_prompt=True), tok))
    cfg = make_cfg(run_dir, extra_models=[], perplexity_path="", max_new_tokens=24,
                   tasks=[{"name": "sums", "path": str(sums), "format": "triviaqa", "kind": "math"}])
    res = ev_stage.run_stage(cfg).output
    rows = res["rows"]
    no_malformed = {"unknown_tool": 0, "unparsable_input": 0, "no_result_marker": 0, "unclosed": 0}
    assert rows["toolformer"]["tasks"]["sums"] == {"accuracy": 1.0, "call_rate": 1.0, "n": 3, "correct": 3,
                                                   "with_calls": 3, "malformed_calls": 0, "calls": 3,
                                                   "malformed": no_malformed, "malformed_per_100_calls": 0.0}
    assert rows["toolformer"]["malformed_per_100_calls"] == 0.0 and rows["toolformer"]["calls"] == 3
    # Disabled, the same model guesses 7: right only for 5+2.
    assert rows["toolformer_disabled"]["tasks"]["sums"]["correct"] == 1
    assert rows["toolformer_disabled"]["call_rate"] == 0 and rows["base"]["arithmetic"] == pytest.approx(1 / 3)
    md = (run_dir / "run" / "eval" / "results.md").read_text()
    assert "| Toolformer | 100.0 (100 %) | 100.0 | – |" in md
    preds = run_dir / "run" / "eval" / "predictions" / "toolformer" / "sums.jsonl"
    pred = json.loads(preds.read_text().splitlines()[0])
    assert pred["calls"] == [{"tool": "Calculator", "input": "1234+4321", "result": "5555", "error": None}]
    assert pred["output_without_calls"] == " 5555." and pred["prediction"] == 5555.0 and pred["gold"] == "5555"


def test_perplexity_forwards_fit_the_vocabulary(tiny_model_dir, monkeypatch):
    """A large vocabulary takes fewer tokens a perplexity forward (the logits of 16,384 tokens of a 262,144-token
    vocabulary are 17 GiB); the perplexity is the same however the rows are batched (to float rounding)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    class Head(torch.nn.Module):
        def __init__(self, rows: int):
            super().__init__()
            self.head = torch.nn.Linear(4, rows, bias=False)

        def get_output_embeddings(self):
            return self.head

    assert ev_stage.ppl_token_budget(Head(262_144)) == 1024
    assert ev_stage.ppl_token_budget(Head(1_000)) == ev_stage.PPL_TOKENS
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir).eval()
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    texts = [f"Vell had {a} boats and bought {a + 3} more on the river." for a in range(40)]
    whole = ev_stage.perplexity(model, tok, texts, window=64)
    monkeypatch.setattr(ev_stage, "PPL_LOGIT_BYTES", 4 * model.config.vocab_size * 8)  # 8 tokens: a row a forward
    assert ev_stage.ppl_token_budget(model) == 8
    apart = ev_stage.perplexity(model, tok, texts, window=64)
    assert apart[1] == whole[1] and apart[0] == pytest.approx(whole[0], rel=1e-5)
    assert apart[2] == pytest.approx(whole[2], rel=1e-5)
