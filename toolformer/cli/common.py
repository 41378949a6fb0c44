"""What the commands share: the pipeline config of a command's ``--config`` and overrides, and running a
writing command's work while holding the folders it writes (:mod:`toolformer.rundir.guard`).

The package holds two configs, ``toolformer/share/configs/demo.yaml`` and ``tiny.yaml`` (copies of the
repository's ``configs/``), and the sample data ``tiny.yaml`` reads (``toolformer/share/data/``, a copy of the
repository's ``data/`` files it names): ``--config demo`` or ``--config tiny`` names one where no file of that
name exists, and ``demo`` is the default of ``toolformer demo`` and ``toolformer world``. A packaged config's
``data/...`` paths are read from the current folder when they are there, else from the packaged copy, so an
installed package runs them from any folder."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from toolformer.config.load import load_config, read_yaml_config, share_path
from toolformer.config.schema import PipelineConfig

PACKAGED_CONFIGS = ("demo", "tiny", "published")
"""Configs packaged with toolformer: ``--config NAME`` reads toolformer/share/configs/NAME.yaml."""


def config_file(config: str | None, default: str | None = None) -> str | Path | None:
    """The file a command's ``--config`` names: the path given; the packaged config of that name (``demo``,
    ``tiny``) when no such file exists; without ``--config``, the packaged ``default`` (None: the defaults)."""
    name = default if config is None else config
    if name is None:
        return None
    if config is not None and (name not in PACKAGED_CONFIGS or Path(config).exists()):
        return config
    return share_path("configs", f"{name}.yaml")


def is_packaged(path: str | Path) -> bool:
    return Path(path).parent == share_path("configs")


def packaged_data(value: Any) -> Any:
    """A packaged config's settings, each ``data/...`` path that is not there from the current folder replaced by
    the packaged copy's absolute path (when there is one)."""
    if isinstance(value, dict):
        return {k: packaged_data(v) for k, v in value.items()}
    if isinstance(value, list):
        return [packaged_data(v) for v in value]
    if isinstance(value, str) and value.startswith("data/") and not Path(value).exists():
        packaged = share_path(*value.split("/"))
        return str(packaged) if packaged.is_file() else value
    return value


def load_pipeline(args) -> PipelineConfig:
    overrides = list(args.overrides)
    if getattr(args, "trust_folder_tools", False):
        overrides.append("evaluate.trust_folder_tools=true")
    path = config_file(args.config)
    if path is not None and is_packaged(path):
        base = packaged_data(read_yaml_config(path))
        return load_config(PipelineConfig, None, overrides, base=base, base_source=str(path))
    return load_config(PipelineConfig, path, overrides)


def held_folders(cfg: PipelineConfig, command: str) -> list[tuple[str, str]]:
    """(config key, folder) a writing command holds: the run folder, and the
    output folders of its stages that lie outside it."""
    stages = cfg.stages if command == "run" else [command]
    run = Path(cfg.run_dir).resolve()
    held = [("run_dir", cfg.run_dir)]
    outputs = (("finetune", "finetune.output_dir", cfg.finetune.output_dir),
               ("evaluate", "evaluate.output_dir", cfg.evaluate.output_dir))
    for stage, key, value in outputs:
        if value and stage in stages and run != Path(value).resolve() and run not in Path(value).resolve().parents:
            held.append((key, value))
    return held


def hold_and_run(cfg: PipelineConfig, command: str, work: Callable[[], object]) -> int:
    """``work()`` while holding the folders ``command`` writes (all checked before any is claimed)."""
    from toolformer.rundir.guard import check_owned, claim

    folders = held_folders(cfg, command)
    for key, folder in folders:
        check_owned(Path(folder), key)
    with ExitStack() as held:
        for key, folder in folders:
            held.enter_context(claim(folder, key))
        work()
    return 0
