"""What a point of :mod:`.scale` shows, and its figure: tool use against model size, in the shape of the paper's
Figure 4. Accuracies are pooled over a family's sets, each with its 95 % Wilson interval.

Top: one panel per benchmark family (:data:`FAMILIES`), accuracy against parameters (log x) for the
model with tools, the same model with tools disabled and the base model before tuning, each point with its
95 % Wilson interval; the paper's GPT-J (6.7B) point where the paper has one (without tools, Toolformer).
Bottom: per tool, the kept calls that are right (precision, with its interval), the calls kept per 1,000
candidates (yield) and the recall of the calls people placed, against parameters."""

from __future__ import annotations

import math
from pathlib import Path

from toolformer.published.demo import PAPER

ROWS = ("base", "toolformer_disabled", "toolformer")
FAMILIES = {"LAMA T-REx": ("lama",), "ASDiv + MAWPS": ("asdiv", "mawps"), "GSM8K": ("gsm8k",)}
"""The figure's panels: sets pooled (correct and items summed) into one accuracy each."""
GPTJ_PARAMETERS = 6.7e9
Z95 = 1.959964


def wilson(correct: int, n: int) -> list[float]:
    """The 95 % Wilson score interval of ``correct`` of ``n`` (fractions); [0, 1] when n is 0."""
    if n <= 0:
        return [0.0, 1.0]
    p, z2 = correct / n, Z95 * Z95
    centre = (p + z2 / (2 * n)) / (1 + z2 / n)
    half = Z95 * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / (1 + z2 / n)
    return [max(0.0, centre - half), min(1.0, centre + half)]


def pooled(record: dict, row: str, sets: tuple[str, ...]) -> tuple[float, list[float], int] | None:
    """(accuracy, 95 % interval, items) of ``row`` over ``sets`` pooled; None where the row or a set is missing."""
    r = record["rows"].get(row)
    if r is None or any(s not in r["sets"] for s in sets):
        return None
    correct = sum(r["sets"][s]["correct"] for s in sets)
    n = sum(r["sets"][s]["n"] for s in sets)
    return correct / n, wilson(correct, n), n


def display_name(record: dict) -> str:
    """A point's model as the table and figure show it: a model folder by its path, a pinned model by its name
    without the import's details."""
    spec = record["model"]["spec"]
    return spec if "/" in spec else record["model"]["name"].split(" (")[0]


LINES = {"toolformer": ("Toolformer (tools)", "o", "-", 1.0),
         "toolformer_disabled": ("Toolformer, tools disabled", "s", "--", 0.9),
         "base": ("base model, not tuned", "^", ":", 1.1)}
"""Per row: label, marker, line style and a factor on x that keeps the rows' intervals apart."""


def _paper_point(sets: tuple[str, ...]) -> tuple[float, float] | None:
    """The paper's GPT-J (without tools, Toolformer) averaged over ``sets``; None where it has no number."""
    if any(s not in PAPER for s in sets):
        return None
    return (sum(PAPER[s][0] for s in sets) / len(sets), sum(PAPER[s][1] for s in sets) / len(sets))


def _accuracy_panel(ax, records: list[dict], family: str, sets: tuple[str, ...]) -> None:
    for row, (label, marker, style, shift) in LINES.items():
        pts = [(rec["model"]["parameters"], a) for rec in records if (a := pooled(rec, row, sets)) is not None]
        if not pts:
            continue
        xs = [x * shift for x, _ in pts]
        ys = [100 * a[0] for _, a in pts]
        err = [[100 * (a[0] - a[1][0]) for _, a in pts], [100 * (a[1][1] - a[0]) for _, a in pts]]
        ax.errorbar(xs, ys, yerr=err, marker=marker, linestyle=style, capsize=3, label=label)
    paper = _paper_point(sets)
    if paper is not None:
        ax.scatter([GPTJ_PARAMETERS], [paper[1]], marker="*", s=120, color="black", label="paper: Toolformer (GPT-J)")
        ax.scatter([GPTJ_PARAMETERS], [paper[0]], marker="*", s=120, facecolors="none", edgecolors="black",
                   label="paper: GPT-J without tools")
    n = max((pooled(rec, "toolformer", sets) or (0, 0, 0))[2] for rec in records)
    ax.set_title(f"{family} (n={n})")
    ax.set_xscale("log")
    ax.set_ylabel("accuracy %")
    ax.set_ylim(bottom=0)


def _calls_panel(ax, records: list[dict], key: str, title: str, percent: bool) -> None:
    tools = sorted({t for rec in records for t in rec["calls"]})
    for tool in tools:
        pts = [(rec["model"]["parameters"], rec["calls"][tool]) for rec in records if tool in rec["calls"]]
        pts = [(x, c) for x, c in pts if c.get(key) is not None]
        if not pts:
            continue
        scale = 100 if percent else 1
        ys = [scale * c[key] for _, c in pts]
        if key == "precision":
            err = [[scale * (c[key] - c["precision_ci95"][0]) for _, c in pts],
                   [scale * (c["precision_ci95"][1] - c[key]) for _, c in pts]]
            ax.errorbar([x for x, _ in pts], ys, yerr=err, marker="o", capsize=3, label=tool)
        else:
            ax.plot([x for x, _ in pts], ys, marker="o", label=tool)
    ax.set_title(title)
    ax.set_xscale("log")
    ax.set_xlabel("parameters")
    ax.set_ylim(0, 100) if percent else ax.set_ylim(bottom=0)
    if tools:
        ax.legend(fontsize="small")


def figure(records: list[dict], out: Path) -> Path:
    """Write the PNG of the points ``records`` (:func:`.scale.read_records`) to ``out``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if not records:
        raise ValueError("no point to draw")
    fig, axes = plt.subplots(2, len(FAMILIES), figsize=(5 * len(FAMILIES), 8.5), constrained_layout=True)
    for ax, (family, sets) in zip(axes[0], FAMILIES.items()):
        _accuracy_panel(ax, records, family, sets)
    smallest = min(r["model"]["parameters"] for r in records)
    for ax in axes.flat:
        ax.set_xlim(smallest / 3, GPTJ_PARAMETERS * 3)
    axes[0][0].legend(fontsize="small")
    _calls_panel(axes[1][0], records, "precision", "kept calls that are right %", percent=True)
    _calls_panel(axes[1][1], records, "kept_per_1000_candidates", "calls kept per 1,000 candidates", percent=False)
    _calls_panel(axes[1][2], records, "recall", "calls people placed, found (recall %)", percent=True)
    names = ", ".join(f"{display_name(r)} ({r['model']['parameters'] / 1e6:,.1f}M)" for r in records)
    fig.suptitle(f"Tool use against model size on the published world: {names}", fontsize="medium")
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=90)
    plt.close(fig)
    return out
