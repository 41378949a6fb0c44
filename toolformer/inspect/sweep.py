"""Kept calls against gold calls at other thresholds: what the filter would have kept at each tau_f, counted from
the L⁻ and L⁺ its records hold (no model runs), and how many of those calls are right
(:func:`toolformer.inspect.gold.match_gold`). ``python -m toolformer.smallworld.lab.gold_by_tau RUN_DIR`` prints it
for the small world."""

from __future__ import annotations

from pathlib import Path

from toolformer.inspect.gold import match_gold
from toolformer.inspect.view import read_stage
from toolformer.lm.losses import is_kept
from toolformer.rundir.folder import read_documents


def gold_by_tau(run_dir: str | Path, tool: str, taus: list[float]) -> list[dict]:
    """Per tau_f in ``taus``: ``{"tau", "kept", "kept_right", "precision", "recall"}`` of ``tool``'s calls had the
    filter kept those with L⁻ − L⁺ ≥ tau_f (the other tools' calls as they were). Raises FileNotFoundError
    without a filter stage, and ValueError when the run's documents hold no gold call of ``tool`` or a tau_f is
    below the run's where the filter left L(e(c, ε)) out (rerun the filter at the lowest tau_f to sweep from it)."""
    run_dir = Path(run_dir)
    filt = read_stage(run_dir, "filter")
    if filt.state == "missing":
        raise FileNotFoundError(f"{run_dir}: no filter stage (toolformer filter)")
    documents = read_documents(run_dir)
    bounded = [r["tau_filter"] for r in filt.records
               if r["tool"] == tool and r.get("loss_plus") is not None and r.get("loss_no_result") is None]
    if bounded and min(taus) < max(bounded):
        raise ValueError(f"{run_dir}: the filter did not compute L(e(c, ε)) for {len(bounded):,} {tool} calls that "
                         f"tau_f {max(bounded):g} rejects, so it cannot say what tau_f {min(taus):g} keeps; rerun "
                         f"the filter at tau_f {min(taus):g} (filter.per_tool_tau) and sweep from there")
    rows = []
    for tau in taus:
        calls = [r | {"kept": is_kept(r["loss_minus"], r["loss_plus"], tau)}
                 if r["tool"] == tool and r.get("loss_minus") is not None and r.get("loss_plus") is not None else r
                 for r in filt.records]
        matched = match_gold(calls, documents)
        if matched is None or tool not in matched["per_tool"]:
            raise ValueError(f"{run_dir}: the documents hold no gold call of {tool}")
        c = matched["per_tool"][tool]
        rows.append({"tau": tau, "kept": c["kept"], "kept_right": c["kept_right"], "precision": c["precision"],
                     "recall": c["recall"]})
    return rows
