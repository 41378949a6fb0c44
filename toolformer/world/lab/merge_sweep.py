"""Evaluate a finished run's tuned model merged with its base model at several weights (``finetune.merge``):

    python -m toolformer.world.lab.merge_sweep runs/demo 1.0 0.5 0.3 0.25 0.2 0.1 [--math novel=runs/novel.json]

For each weight: the run's finetune stage with ``finetune.merge=ALPHA`` (no training: the trained weights are
kept in ``MODEL/tuned``, see toolformer/lm/merge.py), then the evaluate stage's ``toolformer`` and
``toolformer_disabled`` rows into ``RUN_DIR/eval-merge-ALPHA``. Prints one line per weight: the accuracy on
every evaluation set and the disabled model's perplexity (on ``evaluate.perplexity_path``, or the small world's
``RUN_DIR/world/heldout.jsonl``). At the end the model is merged again with the
weight of the run's own config, so the run folder is as before (the control model is never touched).
``--math NAME=PATH`` adds an arithmetic set in the SVAMP format (e.g. what
``toolformer.world.lab.novel_phrasings`` writes) to the run's evaluation sets, with the prompt of the
run's first math set.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import yaml


def toolformer(*args: str) -> None:
    cmd = [sys.executable, "-m", "toolformer.cli", *args]
    done = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if done.returncode:
        sys.exit(f"merge_sweep: {' '.join(cmd)} failed ({done.returncode}):\n{done.stdout[-3000:]}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run_dir", type=Path)
    ap.add_argument("alphas", type=float, nargs="+")
    ap.add_argument("--math", action="append", default=[], metavar="NAME=PATH",
                    help="another arithmetic set (SVAMP JSON) to evaluate")
    a = ap.parse_args(argv)
    config = a.run_dir / "config.yaml"
    if not config.exists():
        sys.exit(f"merge_sweep: {config}: not found (a run folder that `toolformer run` or `toolformer demo` made)")
    saved = yaml.safe_load(config.read_text())
    own = float((saved.get("finetune") or {}).get("merge", 1.0))
    common = ["--config", str(config), f"run_dir={a.run_dir}"]
    heldout = (saved.get("evaluate") or {}).get("perplexity_path") or ""
    if not heldout and (a.run_dir / "world" / "heldout.jsonl").exists():
        heldout = str(a.run_dir / "world" / "heldout.jsonl")  # the demo's held-out text (set by the demo, not saved)
    extra = []
    tasks = list((saved.get("evaluate") or {}).get("tasks") or [])
    prompt = next((t.get("prompt") for t in tasks if t.get("kind") == "math"), "{question} The answer is")
    for spec in a.math:
        name, sep, path = spec.partition("=")
        if not sep or not name or not Path(path).exists():
            sys.exit(f"merge_sweep: --math {spec!r}: give NAME=PATH of an existing file")
        tasks.append({"name": name, "path": path, "format": "svamp", "kind": "math", "prompt": prompt})
    if a.math:
        extra = ["evaluate.tasks=" + json.dumps(tasks)]  # JSON is YAML flow style
    lines: list[str] = []
    try:
        for alpha in a.alphas:
            out = a.run_dir / f"eval-merge-{alpha:g}"
            toolformer("run", *common, "stages=[finetune,evaluate]", f"finetune.merge={alpha}",
                       f"evaluate.output_dir={out}", "evaluate.extra_models=[]", f"evaluate.perplexity_path={heldout}",
                       "evaluate.rows=[toolformer_disabled,toolformer]", *extra)
            rows = json.loads((out / "results.json").read_text())["rows"]
            tasks = rows["toolformer"]["tasks"]
            if not lines:
                lines.append("| merge | " + " | ".join(tasks) + " | disabled perplexity |")
                lines.append("| ---: |" + " ---: |" * (len(tasks) + 1))
            accs = " | ".join(f"{100 * t['accuracy']:.1f}" for t in tasks.values())
            ppl = rows["toolformer_disabled"]["perplexity"]
            lines.append(f"| {alpha:g} | {accs} | {'–' if ppl is None else f'{ppl:.2f}'} |")
            print(lines[-1], flush=True)
    finally:
        toolformer("run", *common, "stages=[finetune]", f"finetune.merge={own}")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
