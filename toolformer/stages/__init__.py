"""Pipeline stages.

Each module ``toolformer.stages.<name>`` has ``run_stage(cfg, force=False,
**options)`` (:class:`StageFunction`): it reads the previous stage's output
from the run folder, writes its own (see :mod:`toolformer.rundir.folder`) and returns a
:class:`StageResult`. :func:`run_stage` here runs one of them by name; the
command line, the pipeline and the demo all go through it."""

from __future__ import annotations

import importlib
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from toolformer.config.load import config_hash, to_dict
from toolformer.config.schema import STAGES, PipelineConfig
from toolformer.corpus.records import read_records
from toolformer.rundir.files import IntegrityError, count_records
from toolformer.rundir.folder import StageFolder, upstream_total
from toolformer.rundir.parallel import Ranks, ranks
from toolformer.rundir.sharding import run_sharded

# Sections every stage depends on; each stage also depends on its own section
# and those of the stages before it. shard_size fixes which work a shard holds: a rerun with another one starts over.
COMMON = ("seed", "shard_size", "model", "calls", "corpus", "tools")
# Stages whose work is split across the processes of a launch (toolformer.rundir.parallel); finetune is data-parallel
# through its trainer; the others run in the main process while the rest wait.
SHARDED = ("sample", "execute", "filter")
SPLIT = (*SHARDED, "finetune")


@dataclass
class StageResult:
    """What every stage returns."""

    name: str
    skipped: bool
    """The stage's output was complete for this config: nothing was run."""
    manifest: dict | None
    """The stage's ``manifest.json`` (counts, config hash, seed, versions); None in the processes of a
    multi-process fine-tune other than the main one."""
    output: Any = None
    """What the stage has beyond its manifest: evaluate's results (``results.json``), inspect's Inspection."""


class StageFunction(Protocol):
    """``toolformer.stages.<name>.run_stage``."""

    def __call__(self, cfg: PipelineConfig, force: bool = False, **options: Any) -> StageResult: ...


def stage_options(name: str, options: dict[str, Any], defaults: dict[str, Any] | None = None) -> dict[str, Any]:
    """The ``options`` of stage ``name`` over its ``defaults`` (the options it takes); an option it does not
    take is a TypeError naming it and the ones it takes."""
    defaults = defaults or {}
    unknown = sorted(set(options) - set(defaults))
    if unknown:
        raise TypeError(f"stage {name}: unknown option(s) {', '.join(map(repr, unknown))} (it takes "
                        f"{', '.join(defaults) if defaults else 'none'})")
    return {**defaults, **options}


def run_stage(name: str, cfg: PipelineConfig, force: bool = False, wait: bool = True,
              **options: Any) -> StageResult:
    """Run stage ``name`` (one of :data:`~toolformer.config.schema.STAGES`): the
    ``run_stage`` of ``toolformer.stages.<name>``. Under a launch, a stage that
    is not split runs in the main process; the others wait for it unless
    ``wait`` is false (they have left: nothing of theirs comes after it)."""
    if name not in STAGES:
        raise ValueError(f"unknown stage {name!r} (known: {', '.join(STAGES)})")
    stage_fn: StageFunction = importlib.import_module(f"toolformer.stages.{name}").run_stage
    rank = ranks()
    if rank.world == 1 or name in SPLIT:
        return stage_fn(cfg, force=force, **options)
    result = stage_fn(cfg, force=force, **options) if rank.main else None
    if wait:
        rank.barrier()
    return result or StageResult(name, True, StageFolder(cfg.run_dir, name).manifest())


def stage_hash(cfg: PipelineConfig, name: str) -> str:
    """Hash of the config a stage's output depends on (decides if it is stale)."""
    d = to_dict(cfg)
    upto = STAGES[: STAGES.index(name) + 1]
    part = {k: d[k] for k in (*COMMON, *upto)}
    return config_hash(part)


FINGERPRINTED = ("*.safetensors", "*.bin", "*.pt", "config.json", "tokenizer.json", "tokenizer_config.json",
                 "toolformer.json")


def path_fingerprint(path: str) -> list | str:
    """Cheap identity of a file or model folder (names, sizes, modification
    times), so a stage reruns when what it reads was rewritten under the same
    path. A path that does not exist (a hub id) stands for itself."""
    p = Path(path)
    if p.is_file():
        st = p.stat()
        return [p.name, st.st_size, st.st_mtime_ns]
    if p.is_dir():
        files = sorted({f for pattern in FINGERPRINTED for f in p.glob(pattern) if f.is_file()})
        return [path_fingerprint(str(f)) for f in files]
    return path


def model_inputs(cfg: PipelineConfig, *sections: str) -> dict[str, str]:
    """The other models a stage reads (sample.model, filter.model when set), for :func:`start`: a stage reruns
    when one of them was rewritten (a second round after round 1 was tuned again)."""
    return {f"{s}.model": getattr(cfg, s).model for s in sections if getattr(cfg, s).model}


def seed_everything(seed: int) -> None:
    import numpy as np
    import torch

    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


@dataclass
class StageRun:
    stage: StageFolder
    hash: str
    skipped: bool

    def result(self, output: Any = None) -> StageResult:
        """The stage's result: its manifest as it stands now, and ``output``."""
        return StageResult(self.stage.name, self.skipped, self.stage.manifest(), output)

    def all_done(self) -> bool:
        """Wait until every process of the launch has written its shards; True
        in the main process, which then writes the manifest (then :meth:`release`)."""
        ranks().barrier()
        return ranks().main

    def release(self) -> StageResult:
        """After the main process finished the stage: every process returns its result."""
        ranks().barrier()
        return self.result()


def per_upstream_shard(run: StageRun, upstream: StageFolder,
                       process: Callable[[int, list[Any]], Sequence[Mapping[str, Any]]], tools: Sequence[str]) -> None:
    """Shard g of ``run`` = ``process(g, records of upstream shard g)`` for the shards this process owns, one
    upstream shard in memory at a time, with a progress bar in records. Each upstream record is first checked:
    one that is not a record of its stage, or that names a tool not in ``tools`` (tools.enabled), is an
    IntegrityError naming the shard and line (:class:`UpstreamShard`)."""
    from tqdm.auto import tqdm

    with tqdm(total=upstream_total(upstream), desc=run.stage.name, unit="call", disable=not ranks().main) as bar:
        run_sharded(run.stage, ([UpstreamShard(s, upstream, tools)] for s in upstream.shards()),
                    lambda g, shards: process(g, shards[0].records()), bar, width=lambda shards: len(shards[0]))


class UpstreamShard:
    """One shard file of stage ``upstream``, read once when its records are needed (each checked: its stage's
    fields and types, a tool of ``tools``); its length without parsing otherwise."""

    def __init__(self, path: Path, upstream: StageFolder, tools: Sequence[str]):
        self.path, self.upstream, self.tools = path, upstream, tools
        self._records: list[dict] | None = None

    def records(self) -> list[dict]:
        if self._records is None:
            self._records = []
            for n, rec in read_records(self.path, self.upstream.name, self.upstream.rebuild):
                if rec["tool"] not in self.tools:
                    raise IntegrityError(f"{self.path}:{n}: tool {rec['tool']!r} is not in tools.enabled "
                                         f"({', '.join(self.tools)}): {self.upstream.rebuild}")
                self._records.append(rec)
        return self._records

    def __len__(self) -> int:
        return len(self._records) if self._records is not None else count_records(self.path)


def start(cfg: PipelineConfig, name: str, force: bool = False, inputs: dict | None = None) -> StageRun:
    """Skip a stage whose manifest matches the config (and the fingerprints of
    ``inputs``, paths read from outside the run folder); else prepare to
    (re)run it, resuming after its complete shards."""
    stage = StageFolder(cfg.run_dir, name)
    h = stage_hash(cfg, name)
    if inputs:
        h = config_hash({"config": h, "inputs": {k: path_fingerprint(v) for k, v in sorted(inputs.items())}})
    rank = ranks() if name in SHARDED else Ranks.single()
    if not force:
        stage.check_format()
    complete = not force and stage.is_complete(h)
    rank.barrier()  # every process decides from the same files before the main one changes them
    if complete:
        if rank.main:
            print(f"{name}: already complete ({stage.dir}/manifest.json), skipped; --force reruns it")
        return StageRun(stage, h, True)
    seed_everything(cfg.seed)
    first = stage.begin(h, force=force) if rank.main else 0
    rank.barrier()
    if first:
        print(f"{name}: resuming after {first} complete shard(s) in {stage.dir}")
    return StageRun(stage, h, False)
