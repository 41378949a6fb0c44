"""Peak memory of sample -> execute -> filter against corpus size.

    python scripts/memory_check.py --docs 20000 200000

For each size: writes a generated corpus (one document in ten holds a sum
for the Calculator's rule proposer, the rest is plain prose), runs
``toolformer run`` on it with the tiny model built in code, and reports the
peak resident memory of that process (``ru_maxrss``) and the wall time, one
JSON line per size, then the ratio of the largest to the smallest. No stage
holds the corpus or a stage's records, so the peak should stay flat.
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WORDS = ("the", "river", "town", "old", "bridge", "market", "road", "hill", "mayor", "fair", "stone", "north")


def write_corpus(path: Path, n: int, seed: int = 0) -> None:
    rng = random.Random(seed)
    with path.open("w", encoding="utf-8") as f:
        for i in range(n):
            if i % 10 == 0:
                a, b = rng.randint(100, 9999), rng.randint(100, 9999)
                text = f"The first cart held {a} apples and the second {b}, so {a + b} apples in all."
            else:
                text = " ".join(rng.choice(WORDS) for _ in range(rng.randint(12, 30))).capitalize() + "."
            f.write(json.dumps({"id": f"d{i}", "text": text}) + "\n")


def measure(n: int, model: Path, work: Path) -> dict:
    corpus = work / f"corpus-{n}.jsonl"
    write_corpus(corpus, n)
    run_dir = work / f"run-{n}"
    cmd = [sys.executable, "-m", "toolformer.cli", "run", "--config", str(ROOT / "configs" / "tiny.yaml"),
           f"run_dir={run_dir}", f"model.path={model}", f"corpus.path={corpus}", "shard_size=256",
           "tools.enabled=[Calculator]", "sample.method={Calculator: rules}", "stages=[sample, execute, filter]"]
    # A fresh parent per size: its children's ru_maxrss is this run's peak alone (Linux: KiB).
    probe = ("import json, resource, subprocess, sys; r = subprocess.run(json.loads(sys.argv[1]), "
             "capture_output=True, text=True); print(json.dumps([r.returncode, r.stderr[-3000:], "
             "resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss]))")
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", probe, json.dumps(cmd)], cwd=ROOT, capture_output=True, text=True,
                         check=True).stdout
    wall = time.perf_counter() - t0
    code, err, peak_kib = json.loads(out.strip().splitlines()[-1])
    if code != 0:
        raise SystemExit(f"memory_check: run on {n} documents failed:\n{err}")
    counts = json.loads((run_dir / "filter" / "manifest.json").read_text())["counts"]["per_tool"]["Calculator"]
    return {"documents": n, "candidates": counts["candidates"], "kept": counts["kept"],
            "peak_rss_mib": round(peak_kib / 1024, 1), "wall_s": round(wall, 1)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--docs", type=int, nargs="+", default=[20000, 200000], help="corpus sizes, smallest first")
    a = p.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        subprocess.run([sys.executable, "-m", "toolformer.cli", "tiny-model", "--out", str(work / "model")],
                       cwd=ROOT, check=True, capture_output=True)
        for n in sorted(a.docs):
            rows.append(measure(n, work / "model", work))
            print(json.dumps(rows[-1]), flush=True)
    print(json.dumps({"peak_rss_ratio_largest_to_smallest": round(rows[-1]["peak_rss_mib"] / rows[0]["peak_rss_mib"],
                                                                 2)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
