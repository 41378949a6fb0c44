"""Helpers shared by the test files: JSONL, run-folder shards, the CLI in a
subprocess, a build stage made by hand. (``conftest.py`` puts this folder on
``sys.path``: ``from helpers import ...``.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def jsonl(rows) -> str:
    """One JSON object a line."""
    return "".join(json.dumps(r) + "\n" for r in rows)


def write_jsonl(path: Path, rows) -> None:
    path.write_text(jsonl(rows))


def read_jsonl(path: Path) -> list[dict]:
    """The objects of a JSONL file, blank lines skipped."""
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]


def shard_lines(run_dir: str | Path, stage: str) -> list[str]:
    """Every line (newline kept) of a stage's shards, in shard order."""
    return [line for p in sorted((Path(run_dir) / stage).glob("shard-*.jsonl"))
            for line in p.read_text().splitlines(keepends=True)]


def shard_records(run_dir: str | Path, stage: str) -> list[dict]:
    """Every record of a stage's shards, in shard order."""
    return [json.loads(line) for line in shard_lines(run_dir, stage) if line.strip()]


def run_cli(args, env: dict | None = None, timeout: float = 600, **kw) -> subprocess.CompletedProcess:
    """``python -m toolformer.cli ARGS`` from the repository root; ``env`` adds to the environment."""
    return subprocess.run([sys.executable, "-m", "toolformer.cli", *args], capture_output=True, text=True, cwd=ROOT,
                          env={**os.environ, **(env or {})}, timeout=timeout, **kw)


def write_build(run_dir: str | Path, texts: list[str], **columns) -> None:
    """A complete build stage made by hand: a data set with ``text`` and ``columns``."""
    from datasets import Dataset

    from toolformer.run.folder import Stage

    stage = Stage(run_dir, "build")
    stage.begin("x")
    Dataset.from_dict({"text": texts, **columns}).save_to_disk(str(stage.dir / "dataset"))
    stage.finish("x", 0, {})
