"""Chained calls: a later call whose input holds an earlier call's result,
copied from the text. The data path (the filter keeps both calls of a
two-step document, one call at a time), decoding with ``max_calls`` 2, the
evaluate row that allows it, and the prompt cut that leaves room for it."""

import json
import re

import pytest
from helpers import ROOT, read_jsonl, shard_records, write_jsonl
from scripted_lm import ScriptedLM, follow

from toolformer.config.load import from_dict, load_config
from toolformer.config.schema import PipelineConfig
from toolformer.lm.generate import generate_with_tools
from toolformer.stages import evaluate as ev_stage
from toolformer.tasks.score import score_output
from toolformer.tools import build_tool
from toolformer.tools.calls import get_style
from toolformer.tools.sandbox import Sandbox

STYLE = get_style("plain")
STEPS = re.compile(r"(\d+) (\S) (\d+), then (\S) (\d+)")


def chain_script(tok):
    """A "tuned" model for prompts ``... A op B, then op D ...``: it calls ``A op B``, copies the result r1 that
    the loop inserted from the text into ``r1 op D = [Calculator(r1 op D) →``, then copies r2. A call it may not
    make (``max_calls``) becomes a guess, ` 9`."""

    def script(text, prompt):
        a, op1, b, op2, d = STEPS.search(prompt).groups()
        results = re.findall(r"→ (\d+)\]", text)
        if not results:
            target = f" [Calculator({a} {op1} {b}) →"
        elif len(results) == 1:
            r1 = results[0]
            target = text[: text.index("]") + 1] + f" {r1} {op2} {d} = [Calculator({r1} {op2} {d}) →"
        else:
            target = text[: text.rindex("]") + 1] + f" {results[1]}."
        return [follow(tok, target, text), " 9"]

    return script


@pytest.mark.parametrize("max_calls", [1, 2])
def test_a_second_call_copies_the_first_result(tok, max_calls):
    sandbox = Sandbox({"Calculator": build_tool("Calculator")}, timeout_s=5.0)
    model = ScriptedLM(tok, chain_script(tok), with_prompt=True)
    (g,) = generate_with_tools(model, tok, ["Jars: 24 * 37, then + 150. The answer is"], sandbox, STYLE,
                               max_new_tokens=48, top_k_trigger=1, max_calls=max_calls)
    first = {"tool": "Calculator", "input": "24 * 37", "result": "888", "error": None}
    if max_calls == 1:  # the second call is refused: the model guesses
        assert g.calls == [first] and g.text == " [Calculator(24 * 37) → 888] 888 + 150 = 9"
        return
    assert g.calls == [first, {"tool": "Calculator", "input": "888 + 150", "result": "1038", "error": None}]
    assert g.text == " [Calculator(24 * 37) → 888] 888 + 150 = [Calculator(888 + 150) → 1038] 1038."
    assert g.text_without_calls == " 888 + 150 = 1038."
    from toolformer.tasks import TaskItem

    scored = score_output(TaskItem("0", "q", ["1038"]), g.text, "math", 20, 2, STYLE)
    assert scored["prediction"] == 1038.0 and scored["correct"]  # the number after `=`


def test_a_two_call_answer_keeps_its_prompt_in_a_small_window(tok):
    """In a 128-token window, 32 new tokens and room for two results must not cut a 41-token prompt (the
    reservation for results was 64 tokens a call: 1 token of the prompt was kept)."""
    prompt = " ".join(["word"] * 15) + " 24 * 37, then + 150."
    n = len(tok.encode(prompt, add_special_tokens=False))
    assert 41 <= n <= 71  # longer than 128 - 32 - 64 tokens, shorter than the room the new tokens leave
    model = ScriptedLM(tok, lambda text: [tok.eos_token_id], window=128)
    for max_calls in (1, 2):
        (g,) = generate_with_tools(model, tok, [prompt], None, STYLE, max_new_tokens=32, max_calls=max_calls,
                                   disabled=True, window=128)
        assert g.prompt_tokens_cut == 0, max_calls
    (g,) = generate_with_tools(model, tok, [" ".join(["word"] * 120)], None, STYLE, max_new_tokens=32, disabled=True,
                               window=128)
    assert g.prompt_tokens_cut > 0  # a prompt longer than the room is still cut


def test_evaluate_row_with_its_own_max_calls(tmp_path, tiny_model_dir, monkeypatch, tok):
    """An extra row of the tuned model with ``max_calls: 2`` next to the ``toolformer`` row (1 call), on a task
    with its own ``max_new_tokens``: only the two-call row answers; results.json and results.md say which is which."""
    import shutil

    shutil.copytree(tiny_model_dir, tmp_path / "run" / "model")
    items = [{"ID": f"t{i}", "Body": f"Jars: {a} * {b}, then + {d}.", "Question": "How many?",
              "Answer": a * b + d} for i, (a, b, d) in enumerate([(24, 37, 150), (12, 15, 7)])]
    (tmp_path / "twostep.json").write_text(json.dumps(items))
    monkeypatch.setattr(ev_stage, "_load_row_model",
                        lambda cfg, path: (ScriptedLM(tok, chain_script(tok), with_prompt=True), tok))
    cfg = from_dict(PipelineConfig, {
        "run_dir": str(tmp_path / "run"), "model": {"path": tiny_model_dir, "device": "cpu"},
        "tools": {"enabled": ["Calculator"]},
        "evaluate": {"rows": ["toolformer"], "max_new_tokens": 6, "top_k_trigger": 1,
                     "extra_models": [{"name": "toolformer_2calls", "path": str(tmp_path / "run" / "model"),
                                       "tools": True, "max_calls": 2}],
                     "tasks": [{"name": "twostep", "path": str(tmp_path / "twostep.json"), "kind": "math",
                                "prompt": "{question} The answer is", "max_new_tokens": 48}]}}, "<test>")
    rows = ev_stage.run_stage(cfg).output["rows"]
    assert rows["toolformer"]["max_calls"] == 1 and rows["toolformer_2calls"]["max_calls"] == 2
    assert rows["toolformer"]["tasks"]["twostep"]["correct"] == 0
    assert rows["toolformer_2calls"]["tasks"]["twostep"]["accuracy"] == 1.0
    assert rows["toolformer_2calls"]["perplexity"] is None  # a decoding variant of the tuned model
    preds = read_jsonl(tmp_path / "run" / "eval" / "predictions" / "toolformer_2calls" / "twostep.jsonl")
    assert [c["input"] for c in preds[1]["calls"]] == ["12 * 15", "180 + 7"]
    md = (tmp_path / "run" / "eval" / "results.md").read_text()
    assert "(`toolformer_2calls`)" in md and "at most 2 call(s) per item" in md


def test_evaluate_row_with_its_own_trigger(tmp_path, tiny_model_dir, monkeypatch, tok):
    """An extra row with ``top_k_trigger`` decodes with it, the other rows with evaluate.top_k_trigger; results.json
    and results.md record it, and the row is a decoding variant (no perplexity of its own)."""
    import shutil

    shutil.copytree(tiny_model_dir, tmp_path / "run" / "model")
    (tmp_path / "t.json").write_text(json.dumps([{"ID": "t0", "Body": "Jars: 24 * 37.", "Question": "How many?",
                                                  "Answer": 888}]))
    (tmp_path / "plain.jsonl").write_text(json.dumps({"text": "Some plain text for the perplexity."}) + "\n")
    triggers: list[int] = []
    real = ev_stage.generate_with_tools

    def spy(*args, **kwargs):
        triggers.append(kwargs["top_k_trigger"])
        return real(*args, **kwargs)

    monkeypatch.setattr(ev_stage, "generate_with_tools", spy)
    cfg = from_dict(PipelineConfig, {
        "run_dir": str(tmp_path / "run"), "model": {"path": tiny_model_dir, "device": "cpu"},
        "tools": {"enabled": ["Calculator"]},
        "evaluate": {"rows": ["toolformer"], "max_new_tokens": 4, "top_k_trigger": 10,
                     "perplexity_path": str(tmp_path / "plain.jsonl"),
                     "extra_models": [{"name": "greedy_calls", "path": str(tmp_path / "run" / "model"),
                                       "tools": True, "top_k_trigger": 1}],
                     "tasks": [{"name": "t", "path": str(tmp_path / "t.json"), "kind": "math",
                                "prompt": "{question} The answer is"}]}}, "<test>")
    rows = ev_stage.run_stage(cfg).output["rows"]
    assert triggers == [10, 1]
    assert rows["toolformer"]["top_k_trigger"] == 10 and rows["greedy_calls"]["top_k_trigger"] == 1
    assert rows["greedy_calls"]["perplexity"] is None
    md = (tmp_path / "run" / "eval" / "results.md").read_text()
    assert "(`greedy_calls`)" in md and "call-start token is in the top 1" in md
    with pytest.raises(ValueError, match="top_k_trigger"):
        from_dict(PipelineConfig, {"evaluate": {"extra_models": [{"name": "x", "path": "p", "top_k_trigger": -1}]}},
                  "<test>")


def test_inline_calls_and_offsets_back():
    from toolformer.stages.chain import inline, original_offset

    doc = {"doc_id": "d", "text": "Had 24 at 37. The answer is 888 + 150 = 1038.", "date": None}
    at = doc["text"].index("888")
    call = {"char_start": at, "call_text": "[Calculator(24 * 37) → 888]"}
    out = inline(doc, [call], " ")
    assert out["text"] == "Had 24 at 37. The answer is [Calculator(24 * 37) → 888] 888 + 150 = 1038."
    (s, e), = out["spans"]
    assert out["text"][s:e] == call["call_text"] + " "
    assert original_offset(out["spans"], out["text"].index("1038")) == doc["text"].index("1038")
    assert original_offset(out["spans"], e) == at and original_offset(out["spans"], s + 3) is None
    assert original_offset(out["spans"], 4) == 4  # before the call


def twostep_run(tmp_path, n_docs: int, *overrides):
    """A run folder of the demo config on ``n_docs`` two-step documents of a small world, the shipped base model,
    Calculator rules only, filtered at the paper's tau_f 0.5 for the calculator; returns (config, documents)."""
    from worlds import small_cfg

    from toolformer.smallworld import generate_world

    wcfg = small_cfg(tmp_path / "w", twostep_docs=n_docs)
    world = generate_world(wcfg)
    first = wcfg.world.corpus_docs  # the two-step documents come right after the corpus documents
    docs = read_jsonl(world["corpus"])[first : first + n_docs]
    assert all(len(d["gold_calls"]) == 2 for d in docs)
    write_jsonl(tmp_path / "twostep.jsonl", docs)
    cfg = load_config(PipelineConfig, ROOT / "configs" / "demo.yaml", [
        f"run_dir={tmp_path / 'run'}", f"model.path={ROOT / 'data' / 'world-base'}",
        f"corpus.path={tmp_path / 'twostep.jsonl'}", "tools.enabled=[Calculator]", "sample.method={Calculator: rules}",
        "build.plain_ratio=0", "shard_size=3", "filter.per_tool_tau={Calculator: 0.5}", *overrides])
    return cfg, docs


def test_chain_round_proposes_the_second_step_on_the_text_with_the_first_call(tmp_path):
    """sample (rules) → execute → filter → chain (round 2) → build with the shipped base model on two-step
    documents: the filter keeps the first step before its result; round 2 proposes the second step, whose input
    holds that result, at the answer (offsets back in the original text), scored with the first call inline;
    documents whose two calls were both kept (if any) carry them in the built text as the gold calls say."""
    from toolformer.smallworld.demo import chained_documents
    from toolformer.stages import run_stage

    cfg, docs = twostep_run(tmp_path, 8, "chain.rounds=2")
    for stage in ("sample", "execute", "filter", "chain", "build"):
        run_stage(stage, cfg)
    round2 = shard_records(tmp_path / "run" / "chain", "round-2")
    first_round = shard_records(tmp_path / "run", "filter")
    gold = {d["id"]: d["gold_calls"] for d in docs}

    def kept(records, doc_id, g):
        return any(r["doc_id"] == doc_id and r["input"] == g["input"] and r["char_start"] == g["char_start"]
                   and r["kept"] for r in records)

    for d in docs:
        first, second = gold[d["id"]]
        assert kept(first_round, d["id"], first), d["id"]  # the base model copies a result after "The answer is"
        # Where round 1 kept any call at the second step's position (at tau_f 0.5 sometimes a wrong one, `384 + 3`
        # for `384 / 3`), that position is taken; elsewhere round 2 proposes the second step there.
        taken = any(r["doc_id"] == d["id"] and r["char_start"] == second["char_start"] and r["kept"]
                    for r in first_round)
        if not taken:
            assert any(r["doc_id"] == d["id"] and r["input"] == second["input"]
                       and r["char_start"] == second["char_start"] and r["loss_plus"] is not None
                       for r in round2), d["id"]
    assert round2 and all(r["char_start"] > gold[r["doc_id"]][0]["char_start"] for r in round2)
    built = {r["doc_id"]: r for r in read_jsonl(tmp_path / "run" / "build" / "augmented.jsonl")}
    both = [d for d in docs if [(c["input"], c["result"], c["char_start"]) for c in built[d["id"]]["calls"]]
            == [(g["input"], g["result"], g["char_start"]) for g in gold[d["id"]]]]
    # Whether round 2 keeps a second step is the base model's: the shipped one gains too little from it at
    # tau_f 0.5 (docs/lab-notes.md, "Chained calls"); test_build_inserts_the_calls_of_later_rounds covers the insertion.
    for d in both:
        first, second = gold[d["id"]]
        assert second["input"].startswith(first["result"] + " ")
        assert f"[Calculator({first['input']}) → {first['result']}] {first['result']} " in built[d["id"]]["text"]
        assert f" [Calculator({second['input']}) → {second['result']}] {second['result']}." in built[d["id"]]["text"]
    summary = chained_documents(tmp_path / "run")
    # A chain counts whether or not its calls are right (round 1 may keep `384 + 3` at the second step).
    assert summary["gold_documents"] == 8 and summary["gold_documents_chained"] >= len(both)
    assert summary["calls_right"] >= 2 * len(both)
    manifest = json.loads((tmp_path / "run" / "build" / "manifest.json").read_text())
    assert manifest["counts"]["kept_in_later_rounds"] == sum(r["kept"] for r in round2)


def test_build_inserts_the_calls_of_later_rounds(tmp_path):
    """A call the chain stage kept in round 2 goes into the original text with the filter's calls."""
    from helpers import filter_record, write_filter_run

    from toolformer.rundir.folder import StageFolder
    from toolformer.stages import run_stage

    text = "Had 24 jars at 37 coins and a fee of 150. The answer is 888 + 150 = 1038."
    at1, at2 = text.index("888"), text.index("1038")
    first = filter_record("d1", "Calculator", "24 * 37", "888", at1, 3.0, 1.0)
    write_filter_run(tmp_path, [{"doc_id": "d1", "text": text}], [first])
    chain = StageFolder(tmp_path, "chain")
    chain.begin("x")
    StageFolder(chain.dir, "round-2").write_shard(0, [
        filter_record("d1", "Calculator", "888 + 150", "1038", at2, 2.0, 1.0),
        filter_record("d1", "Calculator", "888 * 150", "133200", at2, 2.0, 3.0, kept=False)])
    chain.finish("x", 0, {})
    cfg = from_dict(PipelineConfig, {"run_dir": str(tmp_path), "chain": {"rounds": 2}}, "<test>")
    counts = run_stage("build", cfg).manifest["counts"]
    assert counts["calls"] == 2 and counts["kept_in_later_rounds"] == 1
    (row,) = read_jsonl(tmp_path / "build" / "augmented.jsonl")
    assert row["text"] == ("Had 24 jars at 37 coins and a fee of 150. The answer is [Calculator(24 * 37) → 888] 888 "
                           "+ 150 = [Calculator(888 + 150) → 1038] 1038.")
    one = from_dict(PipelineConfig, {"run_dir": str(tmp_path), "chain": {"rounds": 1}}, "<test>")
    assert run_stage("build", one).manifest["counts"]["calls"] == 1  # one round: the filter's calls only


def test_chain_stage_resumes_and_does_nothing_with_one_round(tmp_path, capsys):
    """An interrupted round resumes after its complete shards and writes the same records (the losses to 1e-5: the
    thread count may follow the machine's load); with chain.rounds 1 the stage writes only its manifest and build
    reads the filter alone."""
    from helpers import approx_floats

    from toolformer.stages import run_stage

    cfg, _ = twostep_run(tmp_path, 6, "chain.rounds=2")
    for stage in ("sample", "execute", "filter", "chain"):
        run_stage(stage, cfg)
    round_dir = tmp_path / "run" / "chain"
    before = shard_records(round_dir, "round-2")
    shards = sorted((round_dir / "round-2").glob("shard-*.jsonl"))
    assert len(shards) == 2  # 6 documents, 3 a shard
    for f in (shards[-1], round_dir / "round-2" / "manifest.json", round_dir / "manifest.json"):
        f.unlink()
    capsys.readouterr()
    run_stage("chain", cfg)
    assert "round 2: resuming after 1 complete shard(s)" in capsys.readouterr().out
    assert shard_records(round_dir, "round-2") == approx_floats(before)
    one = load_config(PipelineConfig, ROOT / "configs" / "demo.yaml", [f"run_dir={tmp_path / 'one'}",
                                                                     "chain.rounds=1"])
    manifest = run_stage("chain", one).manifest
    assert manifest["counts"] == {"rounds": {}} and not (tmp_path / "one" / "chain" / "round-2").exists()
