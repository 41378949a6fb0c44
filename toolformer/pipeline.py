"""``toolformer run``: the configured stages in order, with wall time per stage."""

from __future__ import annotations

import json
import time
from pathlib import Path

from toolformer.config.load import dump_yaml
from toolformer.config.schema import PipelineConfig
from toolformer.rundir.files import atomic_write_text


def save_resolved_config(cfg: PipelineConfig) -> Path:
    path = Path(cfg.run_dir) / "config.yaml"
    atomic_write_text(path, "# Resolved config of this run (defaults + file + overrides).\n" + dump_yaml(cfg))
    return path


def run_pipeline(cfg: PipelineConfig, force: bool = False) -> dict[str, float]:
    from toolformer.rundir.parallel import ranks
    from toolformer.stages import SPLIT, run_stage

    main = ranks().main  # under a launch, one process writes the run's own files
    if main:
        save_resolved_config(cfg)
    walls: dict[str, float] = {}
    # Under a launch the other processes are done after the last stage they share: the main process runs the
    # rest (evaluate, inspect) alone, however long it takes, without them waiting at a barrier.
    shared = [n for n in cfg.stages if n in SPLIT]
    last_shared = cfg.stages.index(shared[-1]) if shared else -1
    for i, name in enumerate(cfg.stages):
        if not main and i > last_shared:
            break
        t0 = time.perf_counter()
        run_stage(name, cfg, force=force, wait=i <= last_shared)
        walls[name] = round(time.perf_counter() - t0, 2)
    if main:
        atomic_write_text(Path(cfg.run_dir) / "wall_seconds.json", json.dumps(walls, indent=2) + "\n")
        print("run: wall time per stage: " + ", ".join(f"{k} {v:.1f} s" for k, v in walls.items()))
    return walls
