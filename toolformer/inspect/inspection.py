"""One inspection of a run folder: the funnel, the calls that pass
``toolformer inspect``'s filters, their margins and rankings, and the kept
calls against gold; :mod:`toolformer.stages.inspect` prints it and
:mod:`toolformer.inspect.report` writes it as HTML."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from toolformer.corpus.records import margin
from toolformer.inspect.gold import gold_quality
from toolformer.inspect.view import RunView, by_tool, compute_funnel, load_run, margin_quantiles, ranking, select


@dataclass
class Inspection:
    view: RunView
    funnel: dict  # compute_funnel(view): every tool, unfiltered
    tools: list[str]  # tools shown (--tool)
    filters: dict  # {"tool", "kept", "min_margin", "max_margin"}
    selected: dict[str, list[dict]]  # tool -> calls that pass the filters
    quantiles: dict[str, dict | None]  # tool -> margin_quantiles of the selected calls
    rankings: dict[str, tuple[list[dict], list[dict]]]  # tool -> (top, bottom)
    style: object  # CallStyle of the run
    separator: str
    gold: dict | None  # gold_quality of the kept calls (every tool, unfiltered); None without gold calls

    def tau(self, tool: str) -> float | None:
        t = self.funnel["per_tool"][tool]["tau_filter"]
        return t if isinstance(t, (int, float)) or t is None else t[0]


def inspect_run(run_dir: str | Path, style, separator: str, top: int, width: int, tool: str | None = None,
                kept: str = "all", min_margin: float | None = None, max_margin: float | None = None) -> Inspection:
    """The run folder read and filtered; ``width``: characters of context on
    each side of a wrong kept call in the gold section."""
    view = load_run(run_dir)
    funnel = compute_funnel(view)
    chosen = select(view, tool, kept, min_margin, max_margin)
    tools = [tool] if tool is not None else view.tools
    selected = {t: calls for t, calls in by_tool(chosen, tools).items() if t in tools}
    quantiles = {t: margin_quantiles([m for r in selected[t] if (m := margin(r)) is not None]) for t in tools}
    rankings = {t: ranking(selected[t], top, kept) for t in tools}
    filters = {"tool": tool, "kept": kept, "min_margin": min_margin, "max_margin": max_margin}
    gold = None
    if view.stages["filter"].state != "missing":
        gold = gold_quality(view.stages["filter"].records, view.documents, style, separator, width)
    return Inspection(view, funnel, tools, filters, selected, quantiles, rankings, style, separator, gold)
