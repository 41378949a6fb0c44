"""``python -m toolformer.published.scale``: does tool use come with size? The paper's Figure 4 in miniature.

``run --config C --model M [--model M2 ...]``: for each model (a pinned name of ``toolformer weights fetch``, or
a model folder) the published demo (:func:`.demo.run_published`) on one world (the config's, built once), with
the same annotation documents, settings and evaluation items; the config's own model runs in its ``run_dir``,
another in ``RUN_DIR-LABEL``. A filter that keeps nothing does not stop a point: there is nothing to tune on,
so its tuned rows are the base model's (:func:`.demo.tune`). Each point's results go to ``--results/LABEL.json``
(:func:`point_record`: accuracy per set with its 95 % interval, candidates and kept calls per tool with their
precision against the calls people placed, wall time per stage over every invocation, the command).

``figure RESULTS... --out PNG``: accuracy with and without tools against parameters (log x), one panel per
benchmark family, the paper's GPT-J point where it has one; below, kept-call precision, yield and recall
against size. ``table RESULTS...``: the same as a Markdown table."""

from __future__ import annotations

import argparse
import copy
import json
import math
import os
import sys
import time
from pathlib import Path

from toolformer.published.config import PublishedWorldConfig, holding, load_published
from toolformer.published.scaleplot import FAMILIES, ROWS, display_name, figure, pooled, wilson


def count_parameters(folder: str | Path) -> int:
    """Parameters of a model folder's safetensors files, read from their headers (no tensor is loaded); a tied
    output layer, saved once, counts once."""
    from safetensors import safe_open

    files = sorted(Path(folder).glob("*.safetensors"))
    if not files:
        raise ValueError(f"{folder}: no *.safetensors file to count the parameters of")
    total = 0
    for f in files:
        with safe_open(str(f), framework="pt") as st:
            total += sum(math.prod(st.get_slice(k).get_shape()) for k in st.keys())  # noqa: SIM118 (not iterable)
    return total


def label_of(spec: str) -> str:
    """A point's name: the pinned name, or the model folder's name."""
    return Path(spec).name if ("/" in spec or Path(spec).is_dir()) else spec


def point_config(cfg: PublishedWorldConfig, spec: str) -> PublishedWorldConfig:
    """``cfg`` with ``spec`` as its base model: the config's own model in its run folder, another in
    ``RUN_DIR-LABEL`` reading the config's world."""
    own = spec in (cfg.pretrain.weights, cfg.pipeline.model.path)
    p = copy.deepcopy(cfg)
    if own:
        return p
    p.pipeline.run_dir = f"{cfg.run_dir.rstrip('/')}-{label_of(spec)}"
    p.published.output_dir = str(cfg.world_dir())
    pinned = label_of(spec) == spec and not Path(spec).is_dir()
    p.pretrain.weights = spec if pinned else ""
    p.pipeline.model.path = "" if pinned else spec
    return p


def build_shared_world(cfg: PublishedWorldConfig, force: bool) -> Path:
    """The config's world, built once (or checked and reused) for every point."""
    from toolformer.published.world import build_world
    from toolformer.rundir.guard import mark

    if cfg.world_dir().resolve().is_relative_to(Path(cfg.run_dir).resolve()):
        mark(Path(cfg.run_dir))  # the world lies in the config's run folder: that folder is toolformer's
    with holding(cfg, ("world",)):
        return build_world(cfg, force=force)


def _sets(row: dict) -> dict:
    return {name: {"accuracy": t["accuracy"], "n": t["n"], "correct": t["correct"],
                   "ci95": wilson(t["correct"], t["n"])} for name, t in row["tasks"].items()}


def _calls(run_dir: Path, gold: dict) -> dict:
    from toolformer.rundir.folder import StageFolder

    manifest = StageFolder(run_dir, "filter").manifest() or {"counts": {"per_tool": {}}}
    out = {}
    for tool, c in manifest["counts"]["per_tool"].items():
        g = gold.get(tool, {})
        right = g.get("kept_right")
        out[tool] = {"candidates": c["candidates"], "scored": c["scored"], "kept": c["kept"],
                     "kept_per_1000_candidates": 1000 * c["kept"] / max(1, c["candidates"]),
                     "kept_right": right, "precision": g.get("precision"),
                     "precision_ci95": None if right is None else wilson(right, g["kept"]),
                     "gold": g.get("gold"), "recall": g.get("recall_right"),
                     "needed_recall": (g.get("needed") or {}).get("recall_right")}
    return out


def point_record(label: str, spec: str, cfg: PublishedWorldConfig, results: dict, command: str) -> dict:
    """What ``--results/LABEL.json`` holds for one point (module docstring)."""
    import torch

    run = Path(cfg.run_dir)
    full = json.loads((run / "eval" / "results.json").read_text())
    folder = Path(results["base_model"])
    imported = folder / "import.json"
    name = json.loads(imported.read_text())["model_name"] if imported.is_file() else folder.name
    rows = {r: {"sets": _sets(full["rows"][r]), "perplexity": full["rows"][r].get("perplexity"),
                "call_rate": full["rows"][r].get("call_rate")} for r in full["rows"]}
    return {"label": label, "model": {"spec": spec, "name": name, "parameters": count_parameters(folder)},
            "command": command, "run_dir": str(run), "rows": rows, "calls": _calls(run, results.get("gold", {})),
            "wall_seconds": results.get("wall_seconds_run", results["wall_seconds"]),
            "machine": {"cpus": os.cpu_count(), "torch_threads": torch.get_num_threads(),
                        "cpu_capability": torch.backends.cpu.get_cpu_capability()},
            "written": time.strftime("%Y-%m-%d")}


def run_points(cfg: PublishedWorldConfig, config: str, specs: list[str], results_dir: Path, rows: str,
               force: bool) -> list[dict]:
    """Every point of ``specs`` in order on ``cfg`` (read from ``config``), each written to ``results_dir`` as
    soon as it is done."""
    from toolformer.published.demo import run_published

    world = build_shared_world(cfg, force)
    results_dir.mkdir(parents=True, exist_ok=True)
    records = []
    for spec in specs:
        pcfg = point_config(cfg, spec)
        command = (f"python -m toolformer.published.scale run --config {config} --model {spec}"
                   + (" --rows core" if rows == "core" else ""))
        print(f"scale: {label_of(spec)} into {pcfg.run_dir} ({command})")
        results = run_published(pcfg, force=force, world=world, extras=rows == "all", empty_ok=True)
        record = point_record(label_of(spec), spec, pcfg, results, command)
        path = results_dir / f"{record['label']}.json"
        path.write_text(json.dumps(record, indent=1) + "\n")
        print(f"scale: {record['label']} ({record['model']['parameters']:,} parameters) → {path}")
        records.append(record)
    return records


def read_records(paths: list[str]) -> list[dict]:
    """The point files, smallest model first; a file that is not one names itself."""
    records = []
    for path in paths:
        try:
            rec = json.loads(Path(path).read_text())
            rec["model"]["parameters"], rec["rows"], rec["calls"]
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise ValueError(f"{path}: not a point of `scale run` ({type(e).__name__}: {e})") from e
        records.append(rec)
    return sorted(records, key=lambda r: r["model"]["parameters"])


def table(records: list[dict]) -> str:
    """Markdown: a row per point, each family's accuracy (base / disabled / with tools, the last with its 95 %
    interval), kept calls and their precision per tool."""
    head = ["model", "parameters", *(f"{f}: base / disabled / tools (95 % CI)" for f in FAMILIES),
            "kept calls (right)"]
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for rec in records:
        cells = [display_name(rec), f"{rec['model']['parameters'] / 1e6:,.1f}M"]
        for sets in FAMILIES.values():
            acc = [pooled(rec, row, sets) for row in ROWS]
            if acc[-1] is None:
                cells.append("–")
                continue
            lo, hi = acc[-1][1]
            cells.append(" / ".join("–" if a is None else f"{100 * a[0]:.1f}" for a in acc)
                         + f" ({100 * lo:.0f}–{100 * hi:.0f}, n={acc[-1][2]})")
        cells.append(", ".join(f"{t} {c['kept']}" + ("" if c["kept_right"] is None else f" ({c['kept_right']})")
                               for t, c in rec["calls"].items()))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m toolformer.published.scale", description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run", help="run the demo for each --model on the config's world; a JSON file per point")
    r.add_argument("--config", default="configs/published.yaml")
    r.add_argument("--model", action="append", required=True,
                   help="a pinned model (smollm2, gemma3-270m) or a model folder; repeat for more points")
    r.add_argument("--results", default="docs/scale", help="folder of the points' JSON files (default docs/scale)")
    r.add_argument("--rows", choices=("all", "core"), default="all",
                   help="core: base, toolformer_disabled and toolformer only (no control model, no two-call row)")
    r.add_argument("--force", action="store_true", help="rerun every stage of each point")
    f = sub.add_parser("figure", help="the figure of the points' JSON files, as a PNG")
    f.add_argument("results", nargs="+")
    f.add_argument("--out", default="docs/scale/scale.png")
    t = sub.add_parser("table", help="the points' JSON files as a Markdown table")
    t.add_argument("results", nargs="+")
    args = ap.parse_args(argv)
    try:
        if args.command == "run":
            cfg = load_published(args.config)
            print(table(run_points(cfg, args.config, args.model, Path(args.results), args.rows, args.force)))
        elif args.command == "figure":
            print(f"scale: figure → {figure(read_records(args.results), Path(args.out))}")
        else:
            print(table(read_records(args.results)))
    except ValueError as e:
        print(f"scale: error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
