"""Stage ``execute``: run every candidate call through the tool sandbox.

Adds ``result`` (string or null) and ``error`` (null or ``{code, message}``)
to each sample record. Identical (tool, input, date) calls run once. The MCP
servers of the enabled tools run for the stage and are stopped at its end.
"""

from __future__ import annotations

import json
from collections import defaultdict
from typing import Any

from toolformer.config.schema import PipelineConfig
from toolformer.corpus.records import ExecuteRecord, SampleRecord
from toolformer.rundir.files import atomic_write_text, read_json
from toolformer.rundir.folder import DocumentStore, StageFolder, fmt_pct
from toolformer.rundir.parallel import ranks
from toolformer.stages import StageResult, per_upstream_shard, stage_options, start
from toolformer.stages.sample import check_tools
from toolformer.tools.sandbox import build_sandbox


def run_stage(cfg: PipelineConfig, force: bool = False, **options: Any) -> StageResult:
    """Run every candidate call (see the module docstring); the stage takes no ``options``."""
    stage_options("execute", options)
    upstream = StageFolder(cfg.run_dir, "sample")
    upstream.require(" (toolformer sample)")
    run = start(cfg, "execute", force)
    if run.skipped:
        return run.result()
    docs = DocumentStore(cfg.run_dir)
    check_tools(cfg)  # refuses unknown tools and those with side effects
    sandbox = build_sandbox(cfg, cache=cfg.execute.cache)

    def process(g: int, group: list[SampleRecord]) -> list[ExecuteRecord]:
        """Shard g: the calls of upstream shard g."""
        dates = {d: docs[d]["date"] for d in {r["doc_id"] for r in group}}
        before = sandbox.calls_executed
        outcomes = sandbox.run_many([(r["tool"], r["input"], dates[r["doc_id"]]) for r in group])
        atomic_write_text(run.stage.part_path(g, RUN_PART), json.dumps({"calls_run": sandbox.calls_executed - before}))
        return [ExecuteRecord(**r, result=o.result, error=o.error) for r, o in zip(group, outcomes)]

    try:
        per_upstream_shard(run, upstream, process, cfg.tools.enabled)
    finally:
        sandbox.close()  # stops the MCP servers
    docs.close()
    if run.all_done():
        finish(cfg, run)
    return run.release()


RUN_PART = ".calls.json"  # tool calls a shard ran (the rest came from its process's cache)


def finish(cfg: PipelineConfig, run) -> None:
    """Main process, every shard written: counts and manifest."""
    calls_run = sum(read_json(p, run.stage.rebuild)["calls_run"] for p in run.stage.parts(RUN_PART))
    per_tool: dict[str, dict] = {t: {"candidates": 0, "ok": 0, "failed": 0} for t in cfg.tools.enabled}
    errors: dict[str, int] = defaultdict(int)
    for r in run.stage.records():
        c = per_tool[r["tool"]]
        c["candidates"] += 1
        c["ok" if r["error"] is None else "failed"] += 1
        if r["error"] is not None:
            errors[r["error"]["code"]] += 1
    counts = {"per_tool": dict(per_tool), "errors": dict(errors), "unique_calls_run": calls_run}
    run.stage.finish(run.hash, cfg.seed, counts, processes=ranks().world)
    total = sum(c["candidates"] for c in per_tool.values())
    ok = sum(c["ok"] for c in per_tool.values())
    parts = ", ".join(f"{t} {c['ok']:,}/{c['candidates']:,}" for t, c in per_tool.items())
    print(f"execute: {ok:,} of {total:,} calls returned a result ({fmt_pct(ok, total)}; {parts}); "
          f"{calls_run:,} tool calls run (the others from the cache)")
