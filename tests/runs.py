"""Quick pipeline runs for tests: the settings of a short run on the shipped corpus, what a run folder holds,
build stages of written-out sums (with and without calls), the tiny config's first stages up to build, generated
corpus text, and a command stopped by SIGTERM. (The conftest fixture ``quick_run`` is one uninterrupted run with
these settings.)"""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import time
from pathlib import Path

from helpers import ROOT, write_build

CORPUS = ROOT / "data" / "corpus.jsonl"

# A short finetune stage: four steps of four rows, a checkpoint every two.
FINETUNE = ["finetune.batch_size=4", "finetune.micro_batch_size=2", "finetune.max_steps=4", "finetune.max_length=32",
            "finetune.eval_every=2", "finetune.save_every=2", "finetune.dev_ratio=0.25", "finetune.learning_rate=0.003"]

WORDS = ["the", "river", "mill", "market", "town", "council", "harbour", "boats", "sold", "bought", "north", "south",
         "old", "new", "bridge", "road"]


def quick_overrides(model_dir, run_dir, *more) -> list[str]:
    """A quick pipeline: the Calculator's rule-based proposer, shards of 4 documents."""
    return [f"run_dir={run_dir}", f"model.path={model_dir}", f"corpus.path={CORPUS}", "shard_size=4",
            "tools.enabled=[Calculator]", "sample.method={Calculator: rules}", "filter.tau_filter=0.0", *more]


def tiny_built_run(model_dir, run_dir: Path, tau: float = 0.0) -> Path:
    """sample, execute, filter and build of the tiny config on the shipped data: the rule proposers of Calculator and
    QA, 4 documents a shard, ``tau`` low enough that the tiny random model's filter keeps some calls and rejects
    others. Returns ``run_dir``."""
    from toolformer.cli.app import main

    overrides = [f"run_dir={run_dir}", f"model.path={model_dir}", f"corpus.path={CORPUS}",
                 f"tools.collection={ROOT / 'data/collection.jsonl'}",
                 f"tools.knowledge={ROOT / 'data/knowledge.jsonl'}", "shard_size=4", f"filter.tau_filter={tau}",
                 "tools.enabled=[Calculator, QA]", "sample.method={Calculator: rules, QA: rules}",
                 "stages=[sample, execute, filter, build]"]
    assert main(["run", "--config", str(ROOT / "configs/tiny.yaml"), *overrides]) == 0
    return run_dir


def snapshot(folder: Path) -> dict:
    """Every file's bytes and every folder, by relative path."""
    return {str(p.relative_to(folder)): p.read_bytes() if p.is_file() else None for p in sorted(folder.rglob("*"))}


def write_plain_sums(run_dir: Path, n: int = 16) -> None:
    """A build stage of ``n`` sums written out, no calls."""
    write_build(run_dir, [f"Vell had {10 + i} boats and bought {i} more, {10 + i} + {i} = {10 + 2 * i}."
                          for i in range(n)])


def write_sums_with_calls(run_dir, n=24):
    """A build stage output made by hand: calls inline in half of the documents."""
    texts, augmented = [], []
    for i in range(n):
        a, b = 10 + i, 3 * i + 1
        if i % 2:
            texts.append(f"Vell had {a} boats and bought {b} more, {a} + {b} = "
                         f"[Calculator({a} + {b}) → {a + b}] {a + b}.")
        else:
            texts.append(f"Vell had {a} boats and bought {b} more, so it had {a + b} boats.")
        augmented.append(bool(i % 2))
    write_build(run_dir, texts, doc_id=[str(i) for i in range(n)], augmented=augmented, calls=["[]"] * n)
    return texts


def sums(n_chars: int, seed: int = 0) -> str:
    """Sentences with sums of distinct numbers (each a Calculator candidate of its own), ``n_chars`` long."""
    r = random.Random(seed)
    out, n = [], 0
    while n < n_chars:
        a, b = r.randint(10, 99999), r.randint(10, 99999)
        out.append(f"The mill sold {a} sacks and {b} more, {a + b} in all.")
        n += len(out[-1]) + 1
    return " ".join(out)[:n_chars]


def words(n_chars: int, seed: int = 0) -> str:
    """Words without numbers (no tool's pre-filter keeps them), ``n_chars`` long, on one line."""
    r = random.Random(seed)
    return " ".join(r.choice(WORDS) for _ in range(n_chars // 4 + 10))[:n_chars]


def small_docs(n: int) -> list[dict]:
    """``n`` one-sentence corpus records with a sum each."""
    return [{"id": f"s{i}", "text": f"Sold {i + 3} and {i + 5}, {2 * i + 8} in all.", "date": "2021-01-01"}
            for i in range(n)]


def rules_args(run_dir: Path, model: str, corpus: Path, *extra: str) -> list[str]:
    """Settings for a stage of a run on ``corpus`` with the Calculator's rules."""
    return ["--config", "configs/tiny.yaml", f"run_dir={run_dir}", f"model.path={model}", f"corpus.path={corpus}",
            "tools.enabled=[Calculator]", "sample.method={Calculator: rules}", "shard_size=2", *extra]


def stop_when(path: Path, args: list[str], logs: Path, after: float = 1.0) -> tuple[subprocess.CompletedProcess, float]:
    """Run ``toolformer ARGS`` (its output into files under ``logs``); ``after`` seconds once ``path`` exists,
    send it SIGTERM. Returns the finished process (text output) and the seconds from the signal to its exit."""
    logs.mkdir(exist_ok=True)
    with open(logs / "out", "w") as out, open(logs / "err", "w") as err:
        proc = subprocess.Popen([sys.executable, "-m", "toolformer.cli", *args], cwd=ROOT, stdout=out, stderr=err)
        deadline = time.monotonic() + 300
        while not path.exists():
            assert proc.poll() is None, (logs / "err").read_text()[-2000:]
            assert time.monotonic() < deadline, f"{path} never appeared"
            time.sleep(0.05)
        time.sleep(after)
        assert proc.poll() is None, "the stage ended before the signal: the test's work is too small"
        proc.send_signal(signal.SIGTERM)
        t0 = time.monotonic()
        proc.wait(timeout=120)
        seconds = time.monotonic() - t0
    return subprocess.CompletedProcess(proc.args, proc.returncode, (logs / "out").read_text(),
                                       (logs / "err").read_text()), seconds
