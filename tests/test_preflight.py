"""``toolformer preflight``: the tokenizer check, the verdicts on a random model and on the small world's base
model, the README's list of its JSON keys, the work estimate and the exit codes. (One torch thread: the
timings are the report's, not the test's, and a shared machine's threads wait on each other.)"""

from __future__ import annotations

import json
import re
from pathlib import Path
from types import SimpleNamespace

import pytest
from helpers import ROOT, run_cli, write_jsonl

from toolformer.config.load import load_config
from toolformer.config.schema import PipelineConfig
from toolformer.preflight.check import KEYS, TOOL_KEYS, run_preflight, verdict
from toolformer.preflight.tokens import check_tokenizer
from toolformer.preflight.work import count_documents, estimate_work
from toolformer.stages.sample import ToolSettings
from toolformer.tools.calls import add_call_tokens, get_style

TOOLS = {"Calculator": "400 / 1400", "QA": "Where does the Danube end?"}


def merging_tokenizer():
    """A BPE trained in code on calls, with no pre-tokenizer split at brackets: ``[Cal`` and ``)]`` become tokens."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.decoder = decoders.Metaspace()
    texts = ["The total is [Calculator(400 / 1400)] 0.29 and [Calculator(3 * 4) → 12] here.",
             "It came to 1400[QA(Where does the Danube end?)] in all. It came to 1400."] * 100
    tok.train_from_iterator(texts, trainer=trainers.BpeTrainer(vocab_size=300, show_progress=False,
                                                               special_tokens=["<s>", "<pad>", "<unk>"]))
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="<s>", pad_token="<pad>",
                                   unk_token="<unk>")


def test_tokenizer_check_names_a_merging_marker_and_the_fix():
    tok = merging_tokenizer()
    assert any(t.startswith("[C") for t in tok.tokenize("It came to 1400[Calculator(400 / 1400)] in all."))
    report = check_tokenizer(tok, get_style("plain"), TOOLS)
    assert not report["ok"] and not report["start_ok"]  # the sampler cannot score `[` where the text writes it
    start = next(m for m in report["markers"] if m["role"] == "start")
    assert any(p.startswith("merges with its neighbours") and "'[Cal" in p for p in start["problems"])
    assert "calls.style: special" in start["fix"]
    assert any(line.startswith("start '['") and "merges" in line for line in report["problems"])
    # The fix works: the special style's markers are added tokens, whole in every context.
    special = get_style("special")
    add_call_tokens(tok, None, special)
    fixed = check_tokenizer(tok, special, TOOLS)
    assert fixed["start_ok"]
    assert not [m for m in fixed["markers"] if m["role"] in ("start", "end", "arrow") and m["problems"]]


def test_tokenizer_check_passes_the_tiny_tokenizer(tiny_model_dir):
    from toolformer.lm.modeling import load_tokenizer

    report = check_tokenizer(load_tokenizer(tiny_model_dir), get_style("plain"), TOOLS)
    assert report["ok"] and report["start_ok"] and report["problems"] == []
    start = next(m for m in report["markers"] if m["role"] == "start")
    assert start["contexts"]["word start"] == [" ["] and start["contexts"]["after a number"] == ["["]


@pytest.fixture(scope="module")
def tiny_run(tiny_model_dir, tmp_path_factory):
    """``toolformer preflight --json`` on configs/tiny.yaml with the tiny random model: (exit code, report, run
    folder it was given)."""
    run_dir = tmp_path_factory.mktemp("pf") / "run"
    proc = run_cli(["preflight", "--config", "configs/tiny.yaml", f"model.path={tiny_model_dir}",
                    f"run_dir={run_dir}", "model.threads=1", "--docs", "30", "--probe", "48", "--json"])
    assert proc.returncode in (0, 1), proc.stderr
    return proc.returncode, json.loads(proc.stdout), run_dir


@pytest.mark.slow
def test_tiny_random_model_has_no_tool_ready(tiny_run):
    """configs/tiny.yaml as it is: the sampler tools sample no usable call; the tools with rules have candidates,
    but the filter keeps as many with another document's result as with their own (noise); exit 1; and the run
    folder is never made."""
    code, report, run_dir = tiny_run
    assert code == 1 and report["ready"] == []
    tools = report["tools"]
    assert {t: e["verdict"] for t, e in tools.items()} == dict.fromkeys(tools, "no calls")
    for tool in ("Calendar", "WikiSearch"):  # sample.method sampler
        assert tools[tool]["sampled"]["drawn"] > 0 and tools[tool]["sampled"]["valid"] == 0
        assert tools[tool]["reason"].startswith("sampler: none of")
        assert any("rules" in f for f in tools[tool]["fix"])
    for tool in ("Calculator", "QA"):  # both and rules: candidates, and a probe that shows noise
        probe = tools[tool]["probe"]
        assert tools[tool]["rules"]["candidates"] > 0 and probe["controls"] > 0
        assert probe["kept_controls"] <= 2 * probe["kept_wrong_result"]
        assert "does not depend on the result" in tools[tool]["reason"]
    assert not run_dir.exists()


def test_tiny_random_model_with_the_sampler_for_every_tool(tiny_model_dir):
    cfg = load_config(PipelineConfig, ROOT / "configs" / "tiny.yaml", [f"model.path={tiny_model_dir}",
                                                                       "sample.method={}", "model.threads=1"])
    report = run_preflight(cfg, n_docs=12, n_probe=8)
    assert report["ready"] == []
    for entry in report["tools"].values():
        assert entry["method"] == "sampler" and entry["verdict"] == "no calls"
        assert entry["sampled"]["valid"] == 0 and entry["probe"] is None  # nothing to probe


def readme_keys() -> tuple[list[str], list[str]]:
    """The keys README.md lists for ``preflight --json``: the report's, then each tool's."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    m = re.search(r"^`--json` keys: (.*?);\nper tool: (.*?)\.$", text, re.M | re.S)
    assert m, "README.md: no line '`--json` keys: ...; per tool: ...'"
    return re.findall(r"`(\w+)`", m.group(1)), re.findall(r"`(\w+)`", m.group(2))


@pytest.mark.slow
def test_readme_lists_the_json_keys(tiny_run):
    _, report, _ = tiny_run
    top, per_tool = readme_keys()
    assert top == list(KEYS) == list(report)
    assert per_tool == list(TOOL_KEYS)
    assert all(list(e) == list(TOOL_KEYS) for e in report["tools"].values())


def fresh_small_world(tmp_path: Path) -> dict:
    from worlds import small_cfg

    from toolformer.smallworld import generate_world

    return generate_world(small_cfg(tmp_path / "w"))


@pytest.mark.slow  # over 5 s: a preflight probe of the shipped base model
def test_world_base_reads_results_so_the_rule_tools_have_calls(tmp_path):
    """The demo's config on a small world with the shipped base model: Calculator and QA come from the rules; the
    base model keeps calls with their own results and not with another document's, so neither is `no calls` (the
    small world's 180 documents are few: `few calls` or `ready`)."""
    world = fresh_small_world(tmp_path)
    cfg = load_config(PipelineConfig, ROOT / "configs" / "demo.yaml", [
        f"model.path={ROOT / 'data' / 'world-base'}", f"corpus.path={world['corpus']}",
        f"tools.knowledge={world['knowledge']}", f"run_dir={tmp_path / 'run'}", "model.threads=1"])
    report = run_preflight(cfg, n_docs=60, n_probe=128)
    assert report["tokenizer"]["ok"] and report["work"]["documents"] == 180
    assert report["sampler"]["prompt"] == "none"  # the few-shot prompts do not fit its 128-token window
    for tool in ("Calculator", "QA"):
        entry = report["tools"][tool]
        assert entry["method"] == "rules" and entry["rules"]["candidates"] > 0
        assert entry["probe"]["kept_controls"] > 2 * entry["probe"]["kept_wrong_result"]
        assert entry["verdict"] in ("ready", "few calls"), entry["reason"]
        assert entry["projected"]["kept"] > 0
    assert not (tmp_path / "run").exists()


@pytest.mark.slow
def test_world_base_on_the_demo_world_is_ready(tmp_path):
    """The README's command: the demo's world (2,400 documents), --docs 200: Calculator and QA are ready, exit 0."""
    gen = run_cli(["world", "generate", "--config", "configs/demo.yaml", f"run_dir={tmp_path}"])
    assert gen.returncode == 0, gen.stderr
    world = tmp_path / "world"
    proc = run_cli(["preflight", "--config", "configs/demo.yaml", "model.path=data/world-base",
                    f"corpus.path={world / 'corpus.jsonl'}", f"tools.knowledge={world / 'knowledge.jsonl'}",
                    "--docs", "200", "--json"])
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["ready"] == ["Calculator", "QA"]
    assert report["work"]["documents"] == 2400 and report["work"]["documents_how"] == "counted"


STATS = {"documents": 50, "windows": 60, "window": 100, "tokens": 4000, "free": False,
         "tools": {"Calculator": {"method": "both", "m": 4, "windows": 30, "kept_positions": 90, "rule_candidates": 120,
                                  "usable_share": 0.25, "kept_share": 0.1, "prompt_tokens": 300},
                   "QA": {"method": "rules", "m": 5, "windows": 60, "kept_positions": 0, "rule_candidates": 40,
                          "usable_share": 0.0, "kept_share": None, "prompt_tokens": 0}}}
TIMING = {"tokens_per_s": 1000.0, "seconds_per_step": 0.5, "generate_rows": 16, "seconds_per_call": 0.01}


def test_work_estimate_scales_with_the_corpus_size():
    cfg = PipelineConfig()
    cfg.build.max_per_tool = 0  # no cap: the kept calls scale too
    small, large = (estimate_work(cfg, STATS, n, TIMING) for n in (1_000, 3_000))
    assert small["documents"] == 1_000 and large["documents"] == 3_000
    for key in ("windows", "positions"):
        assert large[key] == 3 * small[key]
    for tool in ("Calculator", "QA"):
        for key in ("candidates", "usable_candidates", "rule_candidates", "sampled_calls", "kept_positions"):
            assert large["tools"][tool][key] == pytest.approx(3 * small["tools"][tool][key], abs=2)
    assert small["tools"]["Calculator"]["candidates"] == 90 * 20 * 4 + 120 * 20  # positions x m + rules, x 20
    assert small["tools"]["QA"]["kept"] is None  # no probe: unknown
    assert large["filter"]["rows"] == pytest.approx(3 * small["filter"]["rows"], abs=3)
    for stage in ("sample", "execute", "filter"):
        assert large["hours"][stage] == pytest.approx(3 * small["hours"][stage], rel=1e-2)
    assert large["finetune"] == {**small["finetune"], "dataset_tokens": large["finetune"]["dataset_tokens"]}
    assert large["hours"]["finetune"] == small["hours"]["finetune"]  # max_steps x batch x length bounds it


def test_count_documents_counts_a_small_corpus_and_estimates_a_large_one(tmp_path, monkeypatch):
    import toolformer.preflight.work as work

    path = tmp_path / "c.jsonl"
    write_jsonl(path, [{"id": f"{i:03d}", "text": f"Document {i:03d} says {i * 7:04d} things."} for i in range(500)])
    cfg = load_config(PipelineConfig, None, [f"corpus.path={path}"])
    assert count_documents(cfg, 50, False, 1500) == (500, "counted")
    assert count_documents(cfg, 500, True, 15000)[0] == 500
    monkeypatch.setattr(work, "COUNT_BYTES", 100)
    n, how = count_documents(cfg, 50, False, 1500)
    assert n == 500 and how.startswith("estimated from the size")  # lines of one length: exact
    cfg.corpus.max_docs = 200
    assert count_documents(cfg, 50, False, 1500)[0] == 200


def entry(candidates: int, kept: int | None, probe: dict | None) -> dict:
    return {"method": "rules", "windows": 10, "p_call_start": None, "rules": {"candidates": candidates},
            "sampled": {"drawn": 0, "parsed": 0, "closed": 0, "valid": 0}, "probe": probe,
            "projected": {"candidates": candidates, "kept": kept, "candidates_per_100": None, "kept_per_100": None}}


def probe(ok: int, kept: int, controls: int, own: int, wrong: int) -> dict:
    return {"probed": ok, "ok": ok, "errors": {}, "kept": kept, "controls": controls, "kept_controls": own,
            "kept_wrong_result": wrong, "best_margin": 1.0, "result_effect": 1.0}


def test_verdict_thresholds():
    cfg = PipelineConfig()
    setting = ToolSettings(tau=0.05, top_k=5, num_calls=5, method="rules", rules="Calculator")

    scan = SimpleNamespace(documents=100, windows=[{}] * 100, prompt="few-shot", note="")

    def judge(e, documents=10_000):
        return verdict(cfg, scan, "Calculator", setting, e, documents)[0]

    assert judge(entry(0, None, None)) == "no calls"
    assert judge(entry(5_000, 0, probe(40, 0, 40, 0, 0))) == "no calls"  # the filter keeps none
    assert judge(entry(5_000, 500, probe(40, 4, 40, 4, 2))) == "no calls"  # no better than another's result
    assert judge(entry(5_000, 499, probe(40, 4, 40, 4, 1))) == "few calls"
    assert judge(entry(5_000, 500, probe(40, 4, 40, 4, 1))) == "ready"
    assert judge(entry(5_000, 500, probe(40, 4, 0, 0, 0))) == "ready"  # no control possible: the counts decide


def test_bad_config_exits_2(tmp_path, capsys):
    from toolformer.cli.app import main

    assert main(["preflight", "--config", "configs/tiny.yaml", f"model.path={tmp_path / 'none'}"]) == 2
    assert "model.path" in capsys.readouterr().err
    assert main(["preflight", "--config", "configs/tiny.yaml", "sample.nope=1"]) == 2
    assert main(["preflight", "--config", "configs/tiny.yaml", "--docs", "0"]) == 2
