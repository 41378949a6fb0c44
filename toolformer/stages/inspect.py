"""``toolformer inspect RUN_DIR``: what survived the filter, and why.

Reads any run folder (sample only, sample + execute, or a full run; a stage
interrupted half-way is read as "partial") and never writes into another
stage's folder. Prints, per tool, the funnel (documents passing the tool's
pre-filter → positions → candidates → executed without error → kept), the
quantiles of L⁻ − L⁺ and the top and bottom ``inspect.top`` calls by that
margin, each inserted in its sentence; when the documents carry gold calls
(``gold_calls``), the kept calls' precision and recall against them per tool
and the wrong kept calls (:func:`toolformer.inspect.gold.match_gold`). Writes into
``RUN_DIR/inspect/``:

    funnel.json          the funnel of every tool (ignores the filters); with
                         gold calls a ``gold`` key: gold_quality's numbers per
                         tool and wrong kept calls
    margin-<tool>.png    histogram of L⁻ − L⁺ of the shown calls, tau_f marked
    report.html          self-contained report; report-2.html ... further pages
    manifest.json        counts and filters, written last

The filters (``tool``, ``kept``, ``min_margin``, ``max_margin``) restrict
everything but the funnel. Inspect is cheap and always reruns (``force`` is
accepted for symmetry with the other stages); every file is written atomically.
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Any

from toolformer.config.schema import PipelineConfig
from toolformer.corpus.records import margin
from toolformer.inspect.inspection import Inspection, inspect_run
from toolformer.inspect.report import margin_histogram, write_report
from toolformer.inspect.view import QUANTILES, STEP_LABELS, in_context, run_config
from toolformer.rundir.files import atomic_write_bytes, atomic_write_text
from toolformer.rundir.folder import StageFolder, fmt_pct
from toolformer.stages import StageResult, stage_hash, stage_options
from toolformer.tools.calls import get_style

if TYPE_CHECKING:
    from rich.console import JustifyMethod


def run_call_format(cfg: PipelineConfig) -> tuple[object, str, str | None]:
    """Call style and separator the run used (its saved config.yaml), else
    those of ``cfg``; plus a warning when the saved config cannot be read."""
    run_cfg, note = run_config(cfg)
    if note:
        note = f"{note} (calls.style={cfg.calls.style!r})"
    return get_style(run_cfg.calls.style), run_cfg.calls.separator, note


# (header, justification) of the funnel table's columns
FUNNEL_COLUMNS: tuple[tuple[str, JustifyMethod], ...] = (("tool", "left"), ("step", "left"), ("count", "right"),
                                                        ("of previous", "right"))
TERMINAL_WRONG = 5  # wrong kept calls printed per tool (funnel.json and report.html hold up to GOLD_EXAMPLES)


def _file_name(tool: str) -> str:
    return "margin-" + re.sub(r"[^A-Za-z0-9_.-]", "_", tool) + ".png"


def funnel_table(f: dict, tools: list[str]):
    """The terminal's funnel table: per tool, each step's count and its share of (or rate over) the one before."""
    from rich import box
    from rich.table import Table

    funnel = Table(title="Funnel per tool", box=box.SIMPLE, title_justify="left")
    for col, just in FUNNEL_COLUMNS:
        funnel.add_column(col, justify=just, no_wrap=True)
    for tool in tools:
        for i, step in enumerate(f["per_tool"][tool]["steps"]):
            r = step["of_previous"]
            prev = "–" if r is None else (fmt_pct(r) if step["unit"] == "share" else f"{r:.2f} {step['unit']}")
            count = "–" if step["count"] is None else f"{step['count']:,}"
            funnel.add_row(tool if i == 0 else "", STEP_LABELS[step["step"]], count, prev,
                           end_section=i == len(f["per_tool"][tool]["steps"]) - 1)
    return funnel


def print_read_ahead(console, funnel: dict, tools: list[str]) -> None:
    """Per tool, the candidates that passed tau_f but read ahead of their position (filter.lookahead), with
    examples."""
    for tool in tools:
        t = funnel["per_tool"][tool]
        n, ra = t["counts"].get("read_ahead"), t.get("read_ahead") or {}
        if not n:
            continue
        verb = {"drop": "dropped", "flag": "kept, flagged"}.get(ra.get("mode") or "", "")
        console.print(f"{tool}: {n:,} calls passed tau_f but read ahead of their position ({verb}; "
                      "filter.lookahead), e.g.")
        for e in ra["examples"][:3]:
            console.print(f"  {e['doc_id']} at character {e['char_start']}: {tool}({e['input']}) reads "
                          + ", ".join(e["read_ahead"]) + " from later in the text", markup=False)


def kept_share(funnel: dict, tools: list[str]) -> tuple[int, int, str]:
    """Kept calls, candidate calls and the kept share over ``tools``."""
    kept = sum(funnel["per_tool"][t]["counts"]["kept"] or 0 for t in tools)
    cands = sum(funnel["per_tool"][t]["counts"]["candidates"] or 0 for t in tools)
    return kept, cands, fmt_pct(kept, cands)


# The options of run_stage, the filters (see the module docstring), with their defaults.
OPTIONS: dict[str, Any] = {"tool": None, "kept": "all", "min_margin": None, "max_margin": None}


def run_stage(cfg: PipelineConfig, force: bool = False, **options: Any) -> StageResult:
    """Inspect the run folder (see the module docstring). ``options`` are the filters: ``tool`` (a tool name),
    ``kept`` (yes, no or all), ``min_margin`` and ``max_margin`` (bounds of L⁻ − L⁺); any other is a TypeError."""
    filters = stage_options("inspect", options, OPTIONS)
    style, separator, note = run_call_format(cfg)
    ins = inspect_run(cfg.run_dir, style, separator, cfg.inspect.top, cfg.inspect.context_chars, filters["tool"],
                      filters["kept"], filters["min_margin"], filters["max_margin"])
    out = StageFolder(cfg.run_dir, "inspect")
    out.dir.mkdir(parents=True, exist_ok=True)
    if out.manifest_path.exists():
        out.manifest_path.unlink()  # the folder is being rewritten
    if note:
        ins.funnel["warnings"].append(note)
    saved = ins.funnel | ({"gold": ins.gold} if ins.gold is not None else {})
    atomic_write_text(out.dir / "funnel.json", json.dumps(saved, indent=2, ensure_ascii=False) + "\n")
    images = {}
    for old in out.dir.glob("margin-*.png"):
        old.unlink()
    for t in ins.tools:
        png = margin_histogram(t, ins.selected[t], ins.tau(t), cfg.inspect.bins)
        if png is not None:
            images[t] = png
            atomic_write_bytes(out.dir / _file_name(t), png)
    pages = write_report(out.dir, ins, images, cfg.inspect.page_size, cfg.inspect.context_chars)
    print_inspection(ins, cfg.inspect.context_chars)
    n_kept, n_cands, pct = kept_share(ins.funnel, ins.tools)
    shown = sum(len(v) for v in ins.selected.values())
    counts = {"tools": len(ins.tools), "calls_shown": shown, "pages": len(pages), "plots": len(images),
              "per_tool": {t: {"candidates": ins.funnel["per_tool"][t]["counts"]["candidates"],
                               "kept": ins.funnel["per_tool"][t]["counts"]["kept"],
                               "shown": len(ins.selected[t])} for t in ins.tools}}
    out.finish(stage_hash(cfg, "inspect"), cfg.seed, counts, filters=ins.filters, stages=ins.funnel["stages"],
               margins=ins.quantiles)
    missing = f"; missing stages: {', '.join(ins.funnel['missing'])}" if ins.funnel["missing"] else ""
    kept_part = f"kept {n_kept:,} of {n_cands:,} calls ({pct})" if "filter" not in ins.funnel["missing"] \
        else f"{n_cands:,} candidate calls"
    print(f"inspect: {len(ins.tools)} tool(s), {kept_part}, {shown:,} shown; "
          f"{pages[0]} ({len(pages)} page(s)){missing}")
    return StageResult("inspect", False, out.manifest(), ins)


# -- terminal ----------------------------------------------------------------------
def print_inspection(ins: Inspection, width: int) -> None:
    from rich import box
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    console = Console(highlight=False)
    f = ins.funnel
    states = ", ".join(f"{s} {st}" for s, st in f["stages"].items()
                       if st != "missing" or s in ("sample", "execute", "filter"))
    console.print(f"inspect: {ins.view.run_dir} (stages: {states})")
    if f["missing"]:
        console.print(f"missing stages: {', '.join(f['missing'])}", style="bold yellow")
    for w in f["warnings"]:
        console.print(f"warning: {w}", style="yellow")

    console.print(funnel_table(f, ins.tools))
    print_read_ahead(console, f, ins.tools)

    quant = Table(title="L⁻ − L⁺ of the calls shown", box=box.SIMPLE, title_justify="left")
    quant.add_column("tool", no_wrap=True)
    for name in ("tau_f", "n", *(n if n in ("min", "max") else n[1:] + "%" for n, _ in QUANTILES)):
        quant.add_column(name, justify="right", no_wrap=True)
    for tool in ins.tools:
        q = ins.quantiles[tool]
        tau = ins.tau(tool)
        vals = [f"{q[n]:.2f}" for n, _ in QUANTILES] if q else ["–"] * len(QUANTILES)
        quant.add_row(tool, "–" if tau is None else f"{tau:g}", f"{q['n']:,}" if q else "0", *vals)
    console.print(quant)

    which = "rejected" if ins.filters["kept"] == "no" else "kept"
    for tool in ins.tools:
        for title, calls in zip(("highest", "lowest"), ins.rankings[tool]):
            if not calls:
                continue
            t = Table(title=f"{tool}: {title} L⁻ − L⁺, {which} calls", box=box.SIMPLE, title_justify="left")
            for col in ("margin", "L⁻", "L⁺"):
                t.add_column(col, justify="right", no_wrap=True)
            t.add_column("doc", no_wrap=True)
            t.add_column("in context")
            for r in calls:
                doc = ins.view.documents.get(r["doc_id"])
                before, call, after = in_context(doc["text"] if doc else None, r, ins.style, ins.separator, width)
                sentence = Text(before) + Text(call, style="bold green" if r.get("kept") else "bold red") + Text(after)
                t.add_row(f"{margin(r):.3f}", f"{r['loss_minus']:.3f}", f"{r['loss_plus']:.3f}", str(r["doc_id"]),
                          sentence)
            console.print(t)
    if "filter" in f["missing"]:
        console.print("no losses to rank: the filter stage is missing")
    if ins.gold is not None:
        print_gold(console, ins, TERMINAL_WRONG)


def print_gold(console, ins: Inspection, n_wrong: int) -> None:
    """Per shown tool with gold calls, one line of the candidates' share right, precision and recall, then
    its first ``n_wrong`` wrong kept calls in their sentence."""
    from rich.text import Text

    g = ins.gold
    if g is None:  # no document has gold calls
        return
    console.print(f"Kept calls against the gold calls of {g['documents']:,} annotated documents "
                  f"(same position ±{g['tolerance']} characters):")
    tools = [t for t in ins.tools if t in g["per_tool"]]
    for tool in tools:
        c = g["per_tool"][tool]
        console.print(f"  {tool}: candidates right {pct(c['candidate_precision'])} "
                      f"({c['candidates_right']:,}/{c['candidates']:,}), "
                      f"precision {pct(c['precision'])} ({c['kept_right']:,}/{c['kept']:,}), "
                      f"recall {pct(c['recall'])} ({c['gold_with_kept']:,}/{c['gold']:,}), "
                      f"with a right call {pct(c['recall_right'])} ({c['gold_with_right_kept']:,}/{c['gold']:,})")
    for tool, n in g["no_gold"].items():
        if tool in ins.tools:
            console.print(f"  {tool}: {n:,} kept calls, no gold calls of this tool")
    for tool in tools:
        wrong = g["wrong"][tool]
        if not wrong:
            continue
        n_all = g["per_tool"][tool]["kept"] - g["per_tool"][tool]["kept_right"]
        console.print(f"{tool}: wrong kept calls ({min(n_wrong, len(wrong))} of {n_all:,}, largest L⁻ − L⁺ first)")
        for w in wrong[:n_wrong]:
            gold = "no gold call here" if w["gold"] is None else f"gold {w['gold']['call']}"
            m = "–" if w["margin"] is None else f"{w['margin']:.3f}"
            console.print(Text(f"  {m}  {w['doc_id']}  ") + Text(w["before"])
                          + Text(w["call"], style="bold red") + Text(w["after"]) + Text(f"  ({gold})", style="dim"))


def pct(share: float | None) -> str:
    return "n/a" if share is None else fmt_pct(share)
