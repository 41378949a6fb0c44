"""The filter's cost per candidate against where the call stands in its document.

The paper puts a call in front of the text as a prefix, so each candidate's three losses rerun the text from its
start up to the call's position and the five tokens after it: the cost per candidate grows with the position.
``python -m toolformer.published.lab cost RUN_DIR`` takes the run's executed calls (those with a result), cuts
them into ``--bins`` groups by position (tokens of the document before the call), and times the filter
(:class:`toolformer.stages.filter.CandidateScorer`, every loss computed) on ``--per-bin`` calls of each group
alone, with the run's model and settings: seconds and tokens per candidate, and the tokens a row had to read.
"""

from __future__ import annotations

import random
import time
from pathlib import Path
from typing import cast

from toolformer.corpus.records import ExecuteRecord


def filter_cost(run_dir: str, bins: int = 4, per_bin: int = 40, seed: int = 0) -> list[dict]:
    """Per group of positions (quantiles): the calls timed, their positions and document lengths (tokens), and
    the filter's seconds and tokens per candidate."""
    from toolformer.config.load import load_config
    from toolformer.config.schema import PipelineConfig
    from toolformer.lm.modeling import load
    from toolformer.rundir.folder import StageFolder, read_documents
    from toolformer.stages.filter import CandidateScorer

    config = Path(run_dir) / "config.yaml"
    if not config.is_file():
        raise ValueError(f"{run_dir}: no config.yaml (the run folder of a finished `execute` stage has one)")
    cfg = load_config(PipelineConfig, config, [])
    records = cast(list[ExecuteRecord], [r for r in StageFolder(run_dir, "execute").records()
                                         if r["result"] is not None and r["error"] is None])
    if len(records) < bins:
        raise ValueError(f"{run_dir}: {len(records)} executed calls with a result, fewer than --bins {bins}")
    model, tok = load(cfg.model, cfg.calls)
    scorer = CandidateScorer(cfg, model, tok, read_documents(run_dir), all_losses=True)
    records.sort(key=lambda r: r["position"])
    rng = random.Random(seed)
    scorer.score(records[:4])  # warm-up
    out = []
    for b in range(bins):
        group = records[b * len(records) // bins: (b + 1) * len(records) // bins]
        chosen = rng.sample(group, min(per_bin, len(group)))
        lengths = [len(scorer.text_ids(r["doc_id"])) for r in chosen]
        scorer.scorer.tokens_scored = 0
        t0 = time.perf_counter()
        scorer.score(chosen)
        secs = time.perf_counter() - t0
        out.append({"positions": [group[0]["position"], group[-1]["position"]], "calls": len(chosen),
                    "mean_position": round(sum(r["position"] for r in chosen) / len(chosen), 1),
                    "mean_document_tokens": round(sum(lengths) / len(lengths), 1),
                    "seconds_per_candidate": round(secs / len(chosen), 4),
                    "tokens_per_candidate": round(scorer.scorer.tokens_scored / len(chosen), 1)})
    return out


def print_cost(rows: list[dict]) -> None:
    print("| positions (tokens before the call) | calls | mean position | mean document tokens | s / candidate "
          "| tokens / candidate |")
    print("| --- | --- | --- | --- | --- | --- |")
    for r in rows:
        print(f"| {r['positions'][0]}–{r['positions'][1]} | {r['calls']} | {r['mean_position']} | "
              f"{r['mean_document_tokens']} | {r['seconds_per_candidate']} | {r['tokens_per_candidate']} |")
