"""A second round of self-training: the paper's sampler without a few-shot prompt (sample.prompt none) on a
model that writes calls by itself (sample.model), its calls judged by the base model or by that model
(filter.model). The round-1 model here is the tiny model tuned until it writes one QA call (slow)."""

import json
from pathlib import Path

import pytest
from helpers import ROOT, shard_records, write_build, write_jsonl

from toolformer.config.load import load_config
from toolformer.config.schema import PipelineConfig
from toolformer.rundir.folder import StageFolder
from toolformer.stages import run_stage

TEXT = "The Ketey is 484 kilometres long."
WITH_CALL = "The Ketey is [QA(How long is the Ketey?) → 484] 484 kilometres long."
KETEY = {"subject": "River Ketey", "relation": "length how long kilometres far", "object": "484",
         "text": TEXT, "aliases": ["Ketey"]}


def config(root: Path, *overrides) -> PipelineConfig:
    return load_config(PipelineConfig, ROOT / "configs" / "tiny.yaml",
                       [f"run_dir={root / 'run'}", f"tools.collection={ROOT / 'data' / 'collection.jsonl'}",
                        f"tools.knowledge={root / 'knowledge.jsonl'}", *overrides])


@pytest.fixture(scope="module")
def round1(tmp_path_factory, tiny_model_dir) -> tuple[Path, Path]:
    """(root with knowledge.jsonl, the round-1 model: the tiny model tuned on WITH_CALL)."""
    from toolformer.stages.finetune import run_stage as finetune

    root = tmp_path_factory.mktemp("round1")
    (root / "knowledge.jsonl").write_text((ROOT / "data" / "knowledge.jsonl").read_text() + json.dumps(KETEY) + "\n")
    write_build(root / "run", [WITH_CALL] * 16)
    finetune(config(root, f"model.path={tiny_model_dir}", "finetune.max_steps=60", "finetune.learning_rate=0.02",
                    "finetune.warmup_ratio=0", "finetune.dev_ratio=0", "finetune.max_length=64",
                    "finetune.save_every=0", "finetune.batch_size=4", "finetune.micro_batch_size=4"))
    return root, root / "run" / "model"


def round2_config(root: Path, tmp_path: Path, tiny_model_dir: str, model: Path, *overrides) -> PipelineConfig:
    corpus = tmp_path / "corpus.jsonl"
    write_jsonl(corpus, [{"id": "ketey", "text": TEXT}, {"id": "other", "text": "A quiet day at the farm."}])
    return config(root, f"run_dir={tmp_path / 'run'}", f"model.path={tiny_model_dir}", f"corpus.path={corpus}",
                  "tools.enabled=[Calculator,QA]", "sample.method={Calculator: sampler, QA: sampler}",
                  "sample.prompt=none", f"sample.model={model}", "sample.per_tool={}", "sample.tau_sample=0.0",
                  "sample.top_k=2", "sample.num_calls=3", "sample.max_new_tokens=16", "sample.temperature=0.1",
                  *overrides)


@pytest.mark.slow
def test_the_round1_model_proposes_its_own_call_without_a_prompt(round1, tmp_path, tiny_model_dir):
    root, model = round1
    cfg = round2_config(root, tmp_path, tiny_model_dir, model)
    run_stage("sample", cfg)
    records = shard_records(cfg.run_dir, "sample")
    qa = [r for r in records if r["tool"] == "QA" and r["doc_id"] == "ketey"]
    right = [r for r in qa if r["input"] == "How long is the Ketey?"]
    assert right and all(r["source"] == "sampler" and TEXT[r["char_start"]:].startswith("484") for r in right)
    assert right[0]["p_i"] > 0.5  # the tuned model puts its call-start there, with no prompt
    assert not any("→" in r["input"] or "484" in r["input"] for r in records)  # its own result is not taken
    sample = StageFolder(cfg.run_dir, "sample").manifest()
    assert sample["model"] == str(model)
    assert sample["counts"]["per_tool"]["QA"]["candidates"] == len([r for r in records if r["tool"] == "QA"])

    # Judged by the base model (the paper's filter), then by the round-1 model: a setting, and a rerun.
    run_stage("execute", cfg)
    run_stage("filter", cfg)
    base = {r["input"]: r for r in shard_records(cfg.run_dir, "filter") if r["tool"] == "QA"}
    assert StageFolder(cfg.run_dir, "filter").manifest()["model"] == tiny_model_dir
    judged = round2_config(root, tmp_path, tiny_model_dir, model, f"filter.model={model}")
    assert not run_stage("filter", judged).skipped
    by_round1 = {r["input"]: r for r in shard_records(cfg.run_dir, "filter") if r["tool"] == "QA"}
    assert StageFolder(cfg.run_dir, "filter").manifest()["model"] == str(model)
    call = "How long is the Ketey?"
    assert base[call]["result"] == by_round1[call]["result"] == "484"
    assert base[call]["loss_plus"] != pytest.approx(by_round1[call]["loss_plus"])
    assert run_stage("filter", judged).skipped  # the same model again: complete


def test_round2_settings_are_checked():
    with pytest.raises(ValueError, match="sample: prompt"):
        load_config(PipelineConfig, None, ["sample.prompt=zero-shot"])
    from toolformer.smallworld.config import load_smallworld

    with pytest.raises(ValueError, match="demo: rounds"):
        load_smallworld(None, ["demo.rounds=3"])
    with pytest.raises(ValueError, match="demo: round2_filters"):
        load_smallworld(None, ["demo.round2_filters=[base, base]"])


def test_a_sampled_call_counts_for_the_tool_it_names_at_that_tools_positions(tiny_model_dir):
    """sample.prompt none: one scoring pass for every tool; each tool keeps its own top-k positions, and a call
    is a candidate of the tool it names only where that tool kept the position."""
    import torch
    from scripted_lm import FixedCallLM
    from transformers import AutoTokenizer

    from toolformer.lm.sampler import Sampler
    from toolformer.lm.textpos import marker_token_ids
    from toolformer.stages.sample import ANY_TOOL, ToolSettings, annotate_group
    from toolformer.tools.calls import STYLES

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    cfg = load_config(PipelineConfig, None, ["sample.prompt=none", "sample.prefilter=false",
                                             "sample.max_new_tokens=12"])
    group = [{"doc_id": "d", "text": "The farm sold 340 eggs and 275 more, 615 in all."}]

    def candidates(script: str, k_calc: int, k_qa: int) -> list[tuple[str, int, str]]:
        lm = FixedCallLM(len(tok), tok(script, add_special_tokens=False)["input_ids"], marker_token_ids(tok, "["))
        samplers = {ANY_TOOL: Sampler(lm, tok, STYLES["plain"], None, [tok.bos_token_id])}
        settings = {"Calculator": ToolSettings(0.0, k_calc, 2, "sampler", "Calculator"),
                    "QA": ToolSettings(0.0, k_qa, 2, "sampler", "QA")}
        torch.manual_seed(0)
        records, counts = annotate_group(cfg, tok, settings, samplers, group)
        assert counts["Calculator"]["candidates"] + counts["QA"]["candidates"] == len(records)
        return sorted((r["tool"], r["position"], r["input"]) for r in records)

    # The double gives every position the same p(call-start): the top k are the first k positions.
    assert candidates("QA(Who sold eggs?)]", k_calc=3, k_qa=1) == [("QA", 0, "Who sold eggs?")]
    assert candidates("Calculator(340 + 275) → 615]", k_calc=3, k_qa=1) == [
        ("Calculator", i, "340 + 275") for i in range(3)]
    assert candidates("QA(Who sold eggs?)]", k_calc=3, k_qa=0) == []  # QA kept no position
