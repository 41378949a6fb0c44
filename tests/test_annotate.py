"""sample → execute → filter on the shipped data with the tiny model."""

import json
import shutil

import pytest
from helpers import ROOT, approx_floats, shard_records

from toolformer.config.load import load_config
from toolformer.config.schema import PipelineConfig
from toolformer.corpus.records import STAGE_RECORDS, fields
from toolformer.lm.losses import is_kept
from toolformer.pipeline import run_pipeline
from toolformer.rundir.folder import StageFolder
from toolformer.stages import run_stage

# The whole module annotates the shipped corpus end to end (sample, execute, filter).
pytestmark = pytest.mark.slow



def conforms(record: dict, record_type: type) -> bool:
    """The record has exactly the declared fields, each of a declared type."""
    import typing

    declared = fields(record_type)
    if set(record) != set(declared):
        return False
    for name, (tp, _) in declared.items():
        members = (tp,) if typing.get_origin(tp) is list else typing.get_args(tp) or (tp,)  # list[str]: a list
        allowed = tuple(typing.get_origin(a) or a for a in members)
        allowed += (int,) if float in allowed else ()  # JSON writes 1.0 as 1
        if not isinstance(record[name], allowed):
            return False
    return True


def tiny_cfg(repo_root, model_dir, run_dir, *extra):
    return load_config(PipelineConfig, repo_root / "configs" / "tiny.yaml", [
        f"run_dir={run_dir}", f"model.path={model_dir}", f"corpus.path={repo_root / 'data' / 'corpus.jsonl'}",
        f"tools.collection={run_dir}/collection.jsonl", f"tools.knowledge={run_dir}/knowledge.jsonl",
        "filter.tau_filter=-0.05", "filter.per_tool_tau={}", "stages=[sample, execute, filter]", *extra])


@pytest.fixture(scope="module")
def annotated(tiny_model_dir, tmp_path_factory):
    repo_root = ROOT
    run_dir = tmp_path_factory.mktemp("run") / "tiny"
    run_dir.mkdir()
    for name in ("collection.jsonl", "knowledge.jsonl"):
        shutil.copy(repo_root / "data" / name, run_dir / name)
    cfg = tiny_cfg(repo_root, tiny_model_dir, run_dir)
    run_pipeline(cfg)
    return cfg, run_dir, repo_root


def test_filter_records_have_every_field_and_kept_follows_losses(annotated):
    cfg, run_dir, _ = annotated
    recs = shard_records(run_dir, "filter")
    assert len(recs) > 50
    assert {r["tool"] for r in recs} >= {"Calculator", "QA"}
    for stage, record_type in STAGE_RECORDS.items():
        bad = [r for r in shard_records(run_dir, stage) if not conforms(r, record_type)]
        assert not bad, (stage, bad[:2])
    for r in recs:  # exact: L⁻ is one of the record's own losses (a min in Python), not computed again
        if r["loss_plus"] is None:
            assert r["error"] is not None and r["kept"] is False
        elif r["loss_no_result"] is None:  # left out: L(ε) − L⁺ alone rejects the call
            assert r["loss_minus"] == r["loss_none"] and r["kept"] is False
            assert not is_kept(r["loss_none"], r["loss_plus"], r["tau_filter"])
        else:
            assert r["loss_minus"] == min(r["loss_none"], r["loss_no_result"])
            assert r["kept"] == is_kept(r["loss_minus"], r["loss_plus"], r["tau_filter"])
    assert any(r["kept"] for r in recs) and not all(r["kept"] for r in recs if r["loss_plus"] is not None)
    m = StageFolder(run_dir, "filter").manifest()
    assert m["model"] == cfg.model.path
    assert sum(c["candidates"] for c in m["counts"]["per_tool"].values()) == len(recs)
    assert (run_dir / "config.yaml").exists() and (run_dir / "sample" / "documents.jsonl").exists()


def test_filter_leaves_out_only_losses_that_cannot_keep_a_call(annotated):
    """L(e(c, ε)) is computed only where L(ε) − L⁺ reaches tau_f; with all_losses (preflight's) it is computed for every
    candidate, and the same calls are kept with the same L(ε) and L⁺."""
    from toolformer.lm.modeling import load
    from toolformer.rundir.folder import DocumentStore
    from toolformer.stages.filter import CandidateScorer

    cfg, run_dir, _ = annotated
    model, tok = load(cfg.model, cfg.calls)
    docs = DocumentStore(run_dir)
    executed = shard_records(run_dir, "execute")
    lean = CandidateScorer(cfg, model, tok, docs).score(executed)
    full = CandidateScorer(cfg, model, tok, docs, all_losses=True).score(executed)
    docs.close()
    scored = [r for r in lean if r["loss_plus"] is not None]
    left_out = [r for r in scored if r["loss_no_result"] is None]
    assert 0 < len(left_out) < len(scored)
    assert all(r["loss_no_result"] is not None for r in full if r["loss_plus"] is not None)
    for a, b in zip(lean, full):
        assert a["kept"] == b["kept"]
        if a["loss_plus"] is None:
            assert a == b  # a failed call: no loss in either record, nothing but strings and None to compare
            continue
        assert (a["loss_none"], a["loss_plus"]) == pytest.approx((b["loss_none"], b["loss_plus"]), abs=1e-5)
        if a["loss_no_result"] is None:  # the scorers batch other rows: their losses agree to 1e-5
            assert a["loss_minus"] == a["loss_none"] >= b["loss_minus"] - 1e-5
            assert b["loss_minus"] - b["loss_plus"] < b["tau_filter"] + 1e-5
        else:
            assert a["loss_minus"] == pytest.approx(b["loss_minus"], abs=1e-5)


def test_rerun_skips_and_redone_filter_gives_the_same_records(annotated, capsys):
    """A finished stage is skipped and its manifest kept byte for byte; the filter run again gives its records
    again, the losses to 1e-5 (a thread count that follows the machine's load may sum in another order)."""
    cfg, run_dir, _ = annotated
    before = {s: (run_dir / s / "manifest.json").read_text() for s in ("sample", "execute", "filter")}
    filter_before = shard_records(run_dir, "filter")
    run_pipeline(cfg)
    out = capsys.readouterr().out
    assert out.count("already complete") == 3
    assert {s: (run_dir / s / "manifest.json").read_text() for s in before} == before
    for name in before:  # the stage contract: a StageResult with the manifest on disk
        result = run_stage(name, cfg)
        assert (result.name, result.skipped) == (name, True)
        assert result.manifest == json.loads(before[name])
    capsys.readouterr()
    (run_dir / "filter" / "manifest.json").unlink()
    run_pipeline(cfg)
    out = capsys.readouterr().out
    assert out.count("already complete") == 2 and "filter: kept" in out
    assert shard_records(run_dir, "filter") == approx_floats(filter_before)


def test_interrupted_stage_resumes_from_complete_shards(annotated, capsys):
    cfg, run_dir, _ = annotated
    sample_before = shard_records(run_dir, "sample")
    shards = sorted((run_dir / "sample").glob("shard-*.jsonl"))
    assert len(shards) >= 3
    # As if killed while writing shard 2: later shards and the manifest are missing,
    # a half-written temporary file is left behind.
    for p in shards[2:]:
        p.unlink()
    (run_dir / "sample" / "manifest.json").unlink()
    (run_dir / "sample" / ".shard-00002.jsonl.tmp-999").write_text('{"half": ')
    run_pipeline(cfg)
    assert "resuming after 2 complete shard(s)" in capsys.readouterr().out
    assert shard_records(run_dir, "sample") == sample_before
    assert not list((run_dir / "sample").glob(".*.tmp-*"))


def test_changed_config_reruns_the_stage(annotated, capsys):
    cfg, run_dir, repo_root = annotated
    cfg2 = tiny_cfg(repo_root, cfg.model.path, run_dir, "filter.tau_filter=100.0")
    run_pipeline(cfg2)
    recs = shard_records(run_dir, "filter")
    assert not any(r["kept"] for r in recs) and "filter: kept 0 of" in capsys.readouterr().out
    run_pipeline(cfg)  # back to the original config for other tests
