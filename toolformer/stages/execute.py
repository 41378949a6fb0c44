"""Stage ``execute``: run every candidate call through the tool sandbox.

Adds ``result`` (string or null) and ``error`` (null or ``{code, message}``)
to each sample record. Identical (tool, input, date) calls run once.
"""

from __future__ import annotations

from collections import defaultdict

from tqdm.auto import tqdm

from toolformer.config.schema import PipelineConfig
from toolformer.records import ExecuteRecord
from toolformer.run.folder import Stage, fmt_pct, read_documents, run_sharded
from toolformer.stages import StageResult, start
from toolformer.stages.sample import check_tools
from toolformer.tools.sandbox import build_sandbox


def run_stage(cfg: PipelineConfig, force: bool = False) -> StageResult:
    upstream = Stage(cfg.run_dir, "sample")
    upstream.require(" (toolformer sample)")
    run = start(cfg, "execute", force)
    if run.skipped:
        return run.result()
    docs = read_documents(cfg.run_dir)
    candidates = list(upstream.records())
    check_tools(cfg)  # refuses unknown tools and those with side effects
    sandbox = build_sandbox(cfg, cache=cfg.execute.cache)

    def process(group: list[dict]) -> list[ExecuteRecord]:
        outcomes = sandbox.run_many([(r["tool"], r["input"], docs[r["doc_id"]]["date"]) for r in group])
        return [ExecuteRecord(**r, result=o.result, error=o.error) for r, o in zip(group, outcomes)]

    with tqdm(total=len(candidates), desc="execute", unit="call") as bar:
        run_sharded(run.stage, candidates, cfg.shard_size, run.first_shard, process, bar)
    per_tool: dict[str, dict] = {t: {"candidates": 0, "ok": 0, "failed": 0} for t in cfg.tools.enabled}
    errors: dict[str, int] = defaultdict(int)
    for r in run.stage.records():
        c = per_tool[r["tool"]]
        c["candidates"] += 1
        c["ok" if r["error"] is None else "failed"] += 1
        if r["error"] is not None:
            errors[r["error"]["code"]] += 1
    counts = {"per_tool": dict(per_tool), "errors": dict(errors), "unique_calls_run": sandbox.calls_executed}
    run.stage.finish(run.hash, cfg.seed, counts)
    total = sum(c["candidates"] for c in per_tool.values())
    ok = sum(c["ok"] for c in per_tool.values())
    parts = ", ".join(f"{t} {c['ok']:,}/{c['candidates']:,}" for t, c in per_tool.items())
    print(f"execute: {ok:,} of {total:,} calls returned a result ({fmt_pct(ok, total)}; {parts}); "
          f"{sandbox.calls_executed:,} unique calls run")
    return run.result()
