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
    import signal

    name, _, rest = os.environ.get("TOOLFORMER_FAULT", "").partition(":")
    n, _, rest = rest.partition(":")
    sig, _, rank = rest.partition(":")
    if name == stage and n.isdigit() and done == int(n) and (not rank or int(rank) == ranks().rank):
        os.kill(os.getpid(), getattr(signal, sig or "SIGKILL"))
