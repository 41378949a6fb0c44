"""Helpers shared by the test files: ``ROOT`` (the repository; the one place it
is defined), JSONL, run-folder shards, records compared with a float tolerance, the CLI in a subprocess, a
build stage made by hand, kept filter records and a filter stage to build from.
(``conftest.py`` puts this folder on ``sys.path``: ``from helpers import ...``.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def jsonl(rows) -> str:
    """One JSON object a line."""
    return "".join(json.dumps(r) + "\n" for r in rows)


def write_jsonl(path: Path, rows) -> None:
    path.write_text(jsonl(rows))


def read_jsonl(path: Path) -> list[dict]:
    """The objects of a JSONL file, blank lines skipped."""
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]


def approx_floats(value, rel: float = 1e-6, abs: float = 1e-5):
    """``value`` (records, lists, dicts) with every float a ``pytest.approx``: ``got == approx_floats(want)``
    holds where the two differ only in a float's last digits. Integers, booleans, strings and None stay exact.

    For results that two computations reach in another order: another batch shape, thread count or CPU kernel
    (AVX-512, AVX2, ``ATEN_CPU_CAPABILITY=default``) moves a loss in its 6th-7th digit. The default tolerance
    is that of the filter's losses against the reference (1e-5)."""
    if isinstance(value, float):
        return pytest.approx(value, rel=rel, abs=abs)
    if isinstance(value, dict):
        return {k: approx_floats(v, rel, abs) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(approx_floats(v, rel, abs) for v in value)
    return value


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

    from toolformer.rundir.folder import StageFolder

    stage = StageFolder(run_dir, "build")
    stage.begin("x")
    Dataset.from_dict({"text": texts, **columns}).save_to_disk(str(stage.dir / "dataset"))
    stage.finish("x", 0, {})


def filter_record(doc_id: str, tool: str, tool_input: str, result: str, char_start: int, loss_minus: float,
                  loss_plus: float, kept: bool = True, style: str = "plain") -> dict:
    """A filter record of one call (losses L⁻ and L⁺ given, tau_f 0.5), its call text in ``style``."""
    from toolformer.tools.calls import get_style

    call_style = get_style(style)
    return {"doc_id": doc_id, "tool": tool, "input": tool_input, "position": 0, "char_start": char_start,
            "p_i": None, "source": "rules", "result": result, "error": None,
            "call_text": call_style.render(tool, tool_input, result),
            "call_text_no_result": call_style.render(tool, tool_input, ""),
            "loss_none": loss_minus, "loss_no_result": loss_minus + 0.1, "loss_with_result": loss_plus,
            "loss_minus": loss_minus, "loss_plus": loss_plus, "tau_filter": 0.5, "kept": kept}


def write_filter_run(run_dir: str | Path, docs: list[dict], records: list[dict]) -> None:
    """A run folder with its documents and a finished filter stage of ``records``
    (two shards), for the build stage to read."""
    from toolformer.rundir.folder import StageFolder, write_documents

    write_documents(run_dir, docs)
    filt = StageFolder(run_dir, "filter")
    filt.begin("x")
    filt.write_shard(0, records[:3])
    filt.write_shard(1, records[3:])
    filt.finish("x", 0, {"per_tool": {}})


def mcp_serve_params(config: str = "configs/tiny.yaml"):
    """How an MCP client starts ``toolformer mcp-serve --config CONFIG`` from the repository root (the official SDK)."""
    from mcp.client.stdio import StdioServerParameters, get_default_environment

    return StdioServerParameters(command=sys.executable, cwd=str(ROOT),
                                 args=["-m", "toolformer.cli", "mcp-serve", "--config", config],
                                 env={**get_default_environment(), "PYTHONPATH": str(ROOT)})


def read_corpus_all(cfg) -> tuple[list[dict], list[dict]]:
    """Every document of the corpus ``cfg`` (a CorpusConfig) as the stages read it, and the records it rejected."""
    from toolformer.corpus.reader import iter_corpus

    rejected: list[dict] = []
    return list(iter_corpus(cfg, rejected)), rejected


def built_run_with_two_calls(run_dir: str | Path, other_text: str = "Nothing to compute."):
    """A built run of two documents: one with a Calendar call at its start and a Calculator call, one with
    ``other_text`` and no call (kept in the data set). Returns its config."""
    from toolformer.config.schema import PipelineConfig
    from toolformer.stages.build import run_stage as build

    docs = [{"doc_id": "a", "text": "She paid 18 + 12 * 3 = 54 dollars.", "date": "2021-03-04"},
            {"doc_id": "b", "text": other_text, "date": None}]
    cfg = PipelineConfig(run_dir=str(run_dir))
    cfg.build.drop_without_calls = False
    write_filter_run(cfg.run_dir, docs, [
        filter_record("a", "Calendar", "", "Today is Thursday, March 4, 2021.", 0, 2.0, 0.5),
        filter_record("a", "Calculator", "18 + 12 * 3", "54", 23, 2.0, 0.5)])
    build(cfg)
    return cfg
