"""The spread of a published figure over CPU kernels and thread counts (``python scripts/spread.py``).

torch picks its vectorised kernels by the CPU (``ATEN_CPU_CAPABILITY``: ``default``, ``avx2``, ``avx512``), and
a float sum taken in another order or width differs in its last digits; so does a sum split over another number
of threads. A run is deterministic for one kernel and one thread count; across them a loss moves in the 6th
decimal, a few candidates cross tau_f and the tuned model's answers move by a few items. This command reruns a
job under each kernel the CPU has and each thread count, and writes every figure as the run's value (the
machine's own kernel, the most threads) with the min–max over the grid:

    python scripts/spread.py demo                       # the small world's demo (configs/demo.yaml), 4+ runs
    python scripts/spread.py bench                      # scripts/bench.py --quick: its ratios
    python scripts/spread.py copy --world runs/published/world   # a base model's copy probe (nats per token)
    python scripts/spread.py demo --threads 1 2 --jobs 2  # two 1-thread runs at once on 2 cores

Each run has its own folder under ``--out`` (``<kernel>-t<threads>``) and resumes when rerun; ``spread.json``
(every figure per run) and ``spread.md`` (the tables) are written last.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

KERNELS = ("default", "avx2", "avx512")
"""The values of ``ATEN_CPU_CAPABILITY`` tried, where the CPU has them (``default``: no SIMD kernel)."""


def kernels_here(native: str) -> list[str]:
    """The kernels this CPU runs: ``default`` and each SIMD one up to ``native``, torch's own choice (a kernel the
    CPU lacks is not refused by torch: it stops on an illegal instruction)."""
    return list(KERNELS[: KERNELS.index(native) + 1]) if native in KERNELS else ["default", native]


def native_kernel() -> str:
    """torch's own choice on this CPU (no ``ATEN_CPU_CAPABILITY``)."""
    env = {k: v for k, v in os.environ.items() if k != "ATEN_CPU_CAPABILITY"}
    code = "import torch; print(torch.backends.cpu.get_cpu_capability())"
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                          env=env).stdout.strip().lower()


def demo_command(config: str, out: Path, threads: int, overrides: list[str]) -> list[str]:
    return [sys.executable, "-m", "toolformer", "demo", "--config", config, f"run_dir={out}",
            f"model.threads={threads}", *overrides]


def bench_command(threads: int, args: list[str]) -> list[str]:
    return [sys.executable, "-m", "toolformer.bench.speed", "--threads", str(threads), *(args or ["--quick"])]


def copy_command(a: argparse.Namespace) -> list[str]:
    """The lab's copy probe (its threads: ``OMP_NUM_THREADS``, set by :func:`run_one`)."""
    return [sys.executable, "-m", "toolformer.published.lab", "copy", a.model, "--world", a.world, *a.rest]


def copy_figures(run: Path) -> dict[str, float | None]:
    """``published.lab copy``'s line: the loss per token of a held-out sentence, and of the same said again."""
    line = (run / "stdout.txt").read_text().strip().splitlines()[-1]
    first, again = re.findall(r"\d+\.\d+", line.split(":", 1)[1])[:2]
    return {"copy_first": float(first), "copy_again": float(again)}


def demo_figures(run: Path) -> dict[str, float | None]:
    """The figures the README quotes from a demo's ``results.json``: each row's accuracy per set, perplexity
    and call rate, the kept calls and their precision against gold."""
    res = json.loads((run / "results.json").read_text())
    out: dict[str, float | None] = {}
    for row, r in res["rows"].items():
        for key, v in (r or {}).items():
            if key in res["tasks"] or key in ("perplexity", "call_rate"):
                out[f"{row}.{key}"] = v
    for tool, n in res["kept_calls"].items():
        out[f"kept.{tool}"] = n
    for tool, g in (res.get("filter_gold") or {}).items():
        if isinstance(g, dict) and "precision" in g:
            out[f"kept_precision.{tool}"] = g["precision"]
    return out


def bench_figures(run: Path) -> dict[str, float | None]:
    line = [s for s in (run / "stdout.txt").read_text().splitlines() if s.startswith("{")][-1]
    res = json.loads(line)
    return {k: res[k] for k in ("filter_over_limit", "filter_over_naive", "sample_cache_speedup", "threads")}


JOBS = {"demo": (lambda a, out, t: demo_command(a.config, out, t, a.rest), demo_figures, "results.json"),
        "bench": (lambda a, out, t: bench_command(t, a.rest), bench_figures, "stdout.txt"),
        "copy": (lambda a, out, t: copy_command(a), copy_figures, "stdout.txt")}


def run_one(job: str, a: argparse.Namespace, kernel: str, threads: int) -> tuple[str, float]:
    """One run of ``job`` under ``kernel`` and ``threads`` (its folder ``OUT/<kernel>-t<threads>``, its output
    beside it in ``.out`` and ``.log``); skipped when its result is there."""
    make, _figures, done_file = JOBS[job]
    out = Path(a.out) / f"{kernel}-t{threads}"
    name = out.name
    if (out / done_file).is_file() and not a.force:
        print(f"spread: {name} already done ({out / done_file}), kept", flush=True)
        return name, 0.0
    env = {**os.environ, "ATEN_CPU_CAPABILITY": kernel, "TOKENIZERS_PARALLELISM": "false",
           "OMP_NUM_THREADS": str(threads)}  # the thread count of a job that sets none itself
    t0 = time.perf_counter()
    print(f"spread: {name} started", flush=True)
    log = out.with_suffix(".log")
    with open(log, "w") as err, open(out.with_suffix(".out"), "w") as std:
        done = subprocess.run(make(a, out, threads), stdout=std, stderr=err, text=True, env=env)
    wall = time.perf_counter() - t0
    if done.returncode != 0:
        raise RuntimeError(f"spread: {name} failed with exit {done.returncode}; its log: {log}")
    if job != "demo":
        out.mkdir(exist_ok=True)
        (out / done_file).write_text(out.with_suffix(".out").read_text())
    print(f"spread: {name} done in {wall:.0f} s", flush=True)
    return name, wall


def summarise(runs: dict[str, dict], reference: str) -> dict[str, dict]:
    """Per figure: the reference run's value, the min and max over every run, and each run's value."""
    names = sorted({k for figs in runs.values() for k in figs})
    out = {}
    for k in names:
        vals = {r: figs.get(k) for r, figs in runs.items()}
        nums = [v for v in vals.values() if v is not None]
        out[k] = {"value": vals.get(reference), "min": min(nums) if nums else None,
                  "max": max(nums) if nums else None, "runs": vals}
    return out


def cell(f: dict, scale: float = 1.0, digits: int = 1) -> str:
    """``value (min–max)``, or the value alone when every run agrees."""
    if f["value"] is None:
        return "–"

    def num(v: float) -> str:
        return f"{v * scale:,.{digits}f}"

    if num(f["min"]) == num(f["max"]):
        return num(f["value"])
    return f"{num(f['value'])} ({num(f['min'])}–{num(f['max'])})"


def demo_table(figs: dict[str, dict]) -> str:
    rows = list(dict.fromkeys(k.split(".")[0] for k in figs if "." in k and not k.startswith("kept")))
    tasks = list(dict.fromkeys(k.split(".", 1)[1] for k in figs if k.split(".")[0] in rows
                               and k.split(".", 1)[1] not in ("perplexity", "call_rate")))
    head = ["row", *(f"{t} %" for t in tasks), "perplexity", "call rate %"]
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for row in rows:
        cells = [cell(figs[f"{row}.{t}"], 100) if f"{row}.{t}" in figs else "–" for t in tasks]
        ppl = cell(figs[f"{row}.perplexity"], 1, 2) if f"{row}.perplexity" in figs else "–"
        rate = cell(figs[f"{row}.call_rate"], 100, 0) if f"{row}.call_rate" in figs else "–"
        lines.append(f"| {row} | " + " | ".join([*cells, ppl, rate]) + " |")
    kept = [f"{k.split('.', 1)[1]} {cell(v, 1, 0)} ({cell(figs['kept_precision.' + k.split('.', 1)[1]], 100)} "
            "% right)" if "kept_precision." + k.split(".", 1)[1] in figs else f"{k.split('.', 1)[1]} {cell(v, 1, 0)}"
            for k, v in figs.items() if k.startswith("kept.")]
    return "\n".join(lines) + "\n\nkept calls: " + ", ".join(kept)


def bench_table(figs: dict[str, dict]) -> str:
    return ("| filter / limit | filter / naive | prompt cache speed-up |\n| --- | --- | --- |\n"
            f"| {cell(figs['filter_over_limit'], 1, 2)} | {cell(figs['filter_over_naive'], 1, 1)}× "
            f"| {cell(figs['sample_cache_speedup'], 1, 2)}× |")


def copy_table(figs: dict[str, dict]) -> str:
    return ("| a held-out sentence | said again |\n| --- | --- |\n"
            f"| {cell(figs['copy_first'], 1, 2)} | {cell(figs['copy_again'], 1, 2)} |")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="spread", description=__doc__.split("\n\n")[0])
    p.add_argument("job", choices=sorted(JOBS))
    p.add_argument("--config", default="configs/demo.yaml", help="demo: the small-world config")
    p.add_argument("--model", default="data/published-base", help="copy: the model folder")
    p.add_argument("--world", default="runs/published/world", help="copy: the published world's folder")
    p.add_argument("--out", default="", help="folder of the runs (default runs/spread-<job>)")
    p.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    p.add_argument("--kernels", nargs="+", default=[], choices=KERNELS, help="default: every kernel this CPU has")
    p.add_argument("--jobs", type=int, default=1, help="runs at once (1-thread runs can share 2 cores)")
    p.add_argument("--only", nargs="+", default=[], metavar="KERNEL-tN",
                   help="only these runs of the grid (e.g. default-t1 avx2-t1 avx2-t2)")
    p.add_argument("--force", action="store_true", help="rerun the runs already done")
    p.add_argument("rest", nargs="*", help="demo: KEY=VALUE overrides; bench: its arguments (after --)")
    args = list(sys.argv[1:] if argv is None else argv)
    tail = args[args.index("--") + 1:] if "--" in args else []
    a = p.parse_args(args[: len(args) - len(tail) - (1 if "--" in args else 0)])
    a.rest += tail
    a.out = a.out or f"runs/spread-{a.job}"
    native = native_kernel()
    here = kernels_here(native)
    kernels = [k for k in (a.kernels or here) if k in here]
    skipped = [k for k in KERNELS if k not in here]
    print(f"spread: kernels {', '.join(kernels)} (this CPU's own: {native}"
          + (f"; {', '.join(skipped)} not on this CPU" if skipped else "") + f"), threads {a.threads}", flush=True)
    grid = [(k, t) for t in a.threads for k in kernels]  # the fewest threads first: those runs can share cores
    if a.only:
        unknown = sorted(set(a.only) - {f"{k}-t{t}" for k, t in grid})
        if unknown:
            p.error(f"--only: {', '.join(unknown)} not in the grid (kernels {kernels}, threads {a.threads})")
        grid = [(k, t) for k, t in grid if f"{k}-t{t}" in a.only]
    Path(a.out).mkdir(parents=True, exist_ok=True)
    with ThreadPoolExecutor(max(1, a.jobs)) as pool:
        try:
            walls = dict(pool.map(lambda kt: run_one(a.job, a, *kt), grid))
        except RuntimeError as e:
            print(e, file=sys.stderr)
            return 1
    figures = {f"{k}-t{t}": JOBS[a.job][1](Path(a.out) / f"{k}-t{t}") for k, t in grid}
    reference = f"{native}-t{max(t for _k, t in grid)}"
    if reference not in figures:
        reference = f"{grid[-1][0]}-t{grid[-1][1]}"
    summary = {"job": a.job, "config": a.config, "reference": reference, "kernels": kernels, "threads": a.threads,
               "native_kernel": native, "wall_seconds": walls, "figures": summarise(figures, reference),
               "command": "python scripts/spread.py " + " ".join(args)}
    out = Path(a.out)
    (out / "spread.json").write_text(json.dumps(summary, indent=2) + "\n")
    table = {"demo": demo_table, "bench": bench_table, "copy": copy_table}[a.job](summary["figures"])
    runs = ", ".join(f"{k}-t{t}" for k, t in grid)
    (out / "spread.md").write_text(f"value: {reference}; (min–max) over {len(grid)} runs: {runs}\n\n" + table + "\n")
    print((out / "spread.md").read_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
