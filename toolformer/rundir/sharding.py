"""A stage's work in shards: groups of records, the shards this rank owns and has not written yet
(:func:`run_sharded`), and the fault injection of the kill-and-resume tests (:func:`fault_point`)."""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from itertools import islice
from pathlib import Path
from typing import Protocol

from toolformer.rundir import stops
from toolformer.rundir.parallel import Ranks, ranks


class ShardedStage(Protocol):
    """What :func:`run_sharded` uses of a stage's folder (:class:`toolformer.rundir.folder.StageFolder`)."""

    name: str
    dir: Path

    def shards(self) -> list[Path]: ...

    def write_shard(self, index: int, records: Iterable[dict]) -> None: ...


def shard_index(path: Path) -> int:
    """The number in ``shard-00012.jsonl`` or ``part-00012.counts.json`` (numeric order past 99999)."""
    return int(path.name.split("-", 1)[1].split(".", 1)[0])


def chunked(items: Iterable, size: int) -> Iterator[list]:
    """``items`` in lists of ``size`` (the last may be shorter), read lazily."""
    it = iter(items)
    while chunk := list(islice(it, size)):
        yield chunk


def run_sharded(stage: ShardedStage, groups: Iterable[list], process, progress=None, width=len,
                rank: Ranks | None = None) -> int:
    """Shard ``g`` = ``process(g, group) -> list[dict]`` for every group this
    rank owns whose shard is not on disk yet; returns how many it wrote.
    ``progress`` (a tqdm bar) is advanced by ``width(group)`` per group of
    this rank, done now or before. A stop (SIGINT, SIGTERM) while ``process``
    runs drops that shard's work at once (:func:`toolformer.rundir.stops.abandonable`)."""
    rank = rank or ranks()
    done = {shard_index(p) for p in stage.shards()}
    mine = sum(rank.owns(g) for g in done)
    stops.keep(f"{mine} shard(s) of {stage.name} in {stage.dir}")
    written = 0
    for g, group in enumerate(groups):
        if not rank.owns(g):
            continue
        if g not in done:
            with stops.deferred():  # SIGINT/SIGTERM: stop after this shard is written,
                with stops.abandonable():  # or at once while it is computed (its work is dropped)
                    records = process(g, group)
                stage.write_shard(g, records)
                written += 1
                stops.keep(f"{mine + written} shard(s) of {stage.name} in {stage.dir}")
                fault_point(stage.name, written)
        if progress is not None:
            progress.update(width(group))
    return written


def fault_point(stage: str, done: int) -> None:
    """Fault injection for the kill-and-resume tests: with
    ``TOOLFORMER_FAULT=<stage>:<n>[:<signal>[:<rank>]]`` in the environment the
    process (only rank ``<rank>`` of a launch, when given) sends itself the
    signal (default SIGKILL; e.g. SIGINT) once it has completed ``n`` units of
    work (shards, checkpoints) of that stage, once. Unset, this does nothing."""
    fault = fault_setting()
    if fault and fault[0] == stage and done == fault[1] and fault[3] in (None, ranks().rank):
        os.kill(os.getpid(), fault[2])


def fault_setting() -> tuple[str, int, int, int | None] | None:
    """``TOOLFORMER_FAULT`` read as (stage, n, signal number, rank or None); None when unset or empty. A value
    not of that form (an unknown stage or signal, a count or rank that is not a number) is a ValueError naming
    the variable: the command line checks it before any work, so a fault asked for is never silently skipped."""
    value = os.environ.get("TOOLFORMER_FAULT", "")
    if not value:
        return None
    parts = value.split(":")
    problem = _fault_problem(parts)
    if problem:
        raise ValueError(f"TOOLFORMER_FAULT={value!r}: {problem}")
    name, n, sig, rank = (*parts, "", "")[:4]
    return name, int(n), _signal(sig or "SIGKILL") or 0, int(rank) if rank else None


def _fault_problem(parts: list[str]) -> str:
    """What is wrong with ``TOOLFORMER_FAULT`` split at its colons ('' when nothing)."""
    from toolformer.config.schema import STAGES

    if not 2 <= len(parts) <= 4:
        return "not <stage>:<n>[:<signal>[:<rank>]]"
    name, n, sig, rank = (*parts, "", "")[:4]
    if name not in STAGES and not (name.startswith("round-") and name[6:].isdigit()):
        return f"unknown stage {name!r} (known: {', '.join(STAGES)}, or round-N of the chain)"
    if not (n.isdigit() and int(n) > 0):
        return f"{n!r} is not a count of completed units of work (a whole number from 1)"
    if sig and _signal(sig) is None:
        return f"unknown signal {sig!r} (a name such as SIGKILL, SIGINT or SIGTERM, or its number)"
    if rank and not rank.isdigit():
        return f"{rank!r} is not a process rank (a whole number from 0)"
    return ""


def _signal(sig: str) -> int | None:
    """The number of signal ``sig`` (a name like SIGINT, or a number), None for one this system does not have."""
    import signal

    try:
        return int(signal.Signals(int(sig)) if sig.isdigit() else signal.Signals[sig])
    except (KeyError, ValueError):
        return None
