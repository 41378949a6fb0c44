"""What a world's demo does the same way in every world: its run folder (marked, its config written), the wall
time of each stage, the control model (the paper's "+ CC" row: the built documents without calls, fine-tuned
the same way), the calls kept, the rows of the evaluation and the results table."""

from __future__ import annotations

import copy
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from toolformer.config.schema import PipelineConfig
from toolformer.rundir.files import atomic_write_text
from toolformer.rundir.folder import StageFolder
from toolformer.rundir.guard import mark

T = TypeVar("T")


class Timer:
    """``timer(name, fn)``: ``fn()``, its wall time recorded in ``walls[name]`` (seconds, 0.1 s).

    With ``record`` (a JSON file in the run folder), the times add up over every invocation of the run: a stage
    resumed after a stop counts each of its parts, one killed part up to the last file it wrote in its folder
    (``name`` under ``record``'s folder, a space read as ``/``: ``control finetune``); :meth:`spent` gives the
    totals. ``--force`` starts over (:meth:`reset`)."""

    def __init__(self, record: Path | None = None) -> None:
        self.walls: dict[str, float] = {}
        self.t0 = time.perf_counter()
        self.record = record
        self.saved: dict[str, Any] = {"spent": {}, "running": {}}
        if record is not None and record.is_file():
            try:
                saved = json.loads(record.read_text())
                spent = {str(k): float(v) for k, v in saved["spent"].items()}
                running = {str(k): float(v) for k, v in saved["running"].items()}
            except (ValueError, KeyError, TypeError, AttributeError) as e:  # damaged: the times start over
                print(f"demo: {record} is not a record of wall times ({type(e).__name__}); they start over")
                spent, running = {}, {}
            self.saved = {"spent": spent, "running": {}}
            for name, since in running.items():  # a part killed before it finished
                self._add(name, max(0.0, _last_write(record.parent / name.replace(" ", "/")) - since))

    def __call__(self, name: str, fn: Callable[[], T]) -> T:
        t0 = time.perf_counter()
        self._save(running={name: time.time()})
        out = fn()
        self.walls[name] = round(time.perf_counter() - t0, 1)
        self._add(name, self.walls[name])
        self._save(running={})
        return out

    def _add(self, name: str, seconds: float) -> None:
        spent = self.saved["spent"]
        spent[name] = round(spent.get(name, 0.0) + seconds, 1)

    def _save(self, running: dict[str, float]) -> None:
        if self.record is not None:
            self.saved["running"] = running
            atomic_write_text(self.record, json.dumps(self.saved, indent=1) + "\n")

    def reset(self) -> None:
        """Forget the times of earlier invocations (a run started over)."""
        self.saved = {"spent": {}, "running": {}}
        self._save(running={})

    def total(self) -> dict[str, float]:
        """The walls with ``total``, the time since the timer started."""
        self.walls["total"] = round(time.perf_counter() - self.t0, 1)
        return self.walls

    def spent(self) -> dict[str, float]:
        """Per step, the seconds of every invocation of the run together (``record``), with their ``total``."""
        spent = dict(self.saved["spent"])
        return spent | {"total": round(sum(spent.values()), 1)}


def _last_write(folder: Path) -> float:
    """The newest modification time (epoch seconds) of a file in ``folder`` and below; 0 when there is none."""
    times = [f.stat().st_mtime for f in folder.rglob("*") if f.is_file()] if folder.is_dir() else []
    return max(times, default=0.0)


Timed = Callable[[str, Callable[[], Any]], Any]
"""``timed(name, fn)``: ``fn()``, its wall time recorded under ``name`` (a :class:`Timer`)."""


def start_run(run_dir: str | Path, name: str, yaml_text: str) -> None:
    """Mark the demo's run folder as toolformer's (as the stages mark theirs) and write the world's whole config
    into it as ``name`` (``toolformer demo --config RUN_DIR/<name>`` reruns it)."""
    mark(Path(run_dir))
    atomic_write_text(Path(run_dir) / name, f"# The config of this demo (toolformer demo --config {name} reruns "
                      "it).\n" + yaml_text)


def finish_run(run_dir: str | Path, results: dict) -> Path:
    """``RUN_DIR/results.json``, written last."""
    path = Path(run_dir) / "results.json"
    atomic_write_text(path, json.dumps(results, indent=2) + "\n")
    return path


def kept_in(run_dir: str | Path) -> int:
    """Calls the filter and chain stages of a run folder kept."""
    filt = StageFolder(run_dir, "filter").manifest() or {"counts": {"per_tool": {}}}
    chain = StageFolder(run_dir, "chain").manifest() or {"counts": {"rounds": {}}}
    return sum(c["kept"] for c in filt["counts"]["per_tool"].values()) + sum(
        c["kept"] for r in chain["counts"]["rounds"].values() for c in r["per_tool"].values())


def control_dataset(cfg: PipelineConfig) -> Path:
    """The build stage's documents with their original text: no calls (the
    plain ones, from the corpus or build.plain_path, as they are). Made again
    every run (a second or two), so it follows the build stage's data set."""
    import datasets

    from toolformer.rundir.folder import read_documents
    from toolformer.stages.build import save_dataset

    out = Path(cfg.run_dir) / "control" / "dataset"
    docs = read_documents(cfg.run_dir)
    built = datasets.load_from_disk(str(Path(cfg.run_dir) / "build" / "dataset"))
    rows = [{"text": docs[d]["text"] if aug else text, "doc_id": d, "augmented": False, "calls": "[]"}
            for d, aug, text in zip(built["doc_id"], built["augmented"], built["text"])]
    out.parent.mkdir(parents=True, exist_ok=True)
    save_dataset(rows, out)
    return out


def tune_control(run_dir: str | Path, cfg: PipelineConfig, force: bool, timed: Timed) -> None:
    """The paper's "+ CC" row: ``cfg``'s built documents without calls, fine-tuned as ``cfg`` tunes, into
    ``RUN_DIR/control/model``."""
    from toolformer.stages import run_stage

    ccfg = copy.deepcopy(cfg)
    ccfg.run_dir = str(Path(run_dir) / "control")
    ccfg.finetune.dataset = str(timed("control data", lambda: control_dataset(cfg)))
    ccfg.finetune.output_dir = str(Path(ccfg.run_dir) / "model")
    mark(Path(ccfg.run_dir))
    timed("control finetune", lambda: run_stage("finetune", ccfg, force=force))


def eval_rows(cfg: PipelineConfig, names: tuple[str, ...], keys: tuple[str, ...]) -> dict[str, dict | None]:
    """Per row of the evaluate stage's results (None for a row not run): the accuracy on each set, and ``keys``."""
    full = json.loads((Path(cfg.evaluate.output_dir or Path(cfg.run_dir) / "eval") / "results.json").read_text())
    rows: dict[str, dict | None] = {}
    for name in names:
        r = full["rows"].get(name)
        rows[name] = None if r is None else ({t: c["accuracy"] for t, c in r["tasks"].items()}
                                             | {k: r.get(k) for k in keys})
    return rows


def kept_calls(run_dir: str | Path) -> dict[str, int]:
    """Calls the filter kept, per tool."""
    filt = StageFolder(run_dir, "filter").manifest() or {"counts": {"per_tool": {}}}
    return {t: c["kept"] for t, c in filt["counts"]["per_tool"].items()}


def table(results: dict) -> str:
    """The results table: a row per evaluated model, the accuracy (%) on each set, perplexity and call rate."""
    def pct(v):
        return "–" if v is None else f"{100 * v:.1f}"

    tasks = list(results["tasks"])
    head = ["row", *(f"{t} %" for t in tasks), "perplexity", "call rate %"]
    lines = ["| " + " | ".join(head) + " |", "| " + " | ".join("---" for _ in head) + " |"]
    for name, r in results["rows"].items():
        if r is None:
            lines.append(f"| {name} | not run |" + " |" * (len(head) - 2))
            continue
        ppl = "–" if r["perplexity"] is None else f"{r['perplexity']:.2f}"
        cells = [pct(r.get(t)) for t in tasks]
        lines.append(f"| {name} | " + " | ".join([*cells, ppl, pct(r["call_rate"])]) + " |")
    return "\n".join(lines)
