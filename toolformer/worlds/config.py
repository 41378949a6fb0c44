"""A world's config file: a pipeline config (:class:`PipelineConfig`) with the world's own sections beside its
keys (the small world: ``world``, ``pretrain``, ``demo``; the published world: ``published``, ``pretrain``,
``demo``). A world declares two dataclasses: the file as written (a subclass of :class:`PipelineConfig` with a
field per section) and its settings (a subclass of :class:`WorldSettings` with the same fields), and reads and
writes them with :func:`load_world` and :func:`dump_world`."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar, TypeVar

import yaml

from toolformer.config.load import load_config, to_dict
from toolformer.config.schema import PipelineConfig

W = TypeVar("W", bound="WorldSettings")


@dataclass
class WorldSettings:
    """A world's settings around a pipeline config: the stages get ``pipeline`` only; a subclass adds one field
    per section of its file and names them in ``SECTIONS``."""

    SECTIONS: ClassVar[tuple[str, ...]] = ()
    pipeline: PipelineConfig = field(default_factory=PipelineConfig)

    @property
    def run_dir(self) -> str:
        return self.pipeline.run_dir

    @property
    def seed(self) -> int:
        return self.pipeline.seed

    def with_pipeline(self: W, pipeline: PipelineConfig) -> W:
        """The same world around another pipeline config."""
        return dataclasses.replace(self, pipeline=pipeline)

    def as_file(self) -> dict:
        """The config as its file holds it: the pipeline's keys and the world's sections."""
        return {**to_dict(self.pipeline), **{name: to_dict(getattr(self, name)) for name in self.SECTIONS}}


def load_world(settings: type[W], file: type, path: str | Path | None, overrides: list[str] | None = None) -> W:
    """A world's config file (or the defaults) with ``key=value`` overrides, checked as
    :func:`~toolformer.config.load.load_config` checks a pipeline config (errors name the key and its source):
    read as ``file`` (a :class:`PipelineConfig` with the sections), returned as ``settings``."""
    flat = load_config(file, path, overrides)
    pipeline = PipelineConfig(**{f.name: getattr(flat, f.name) for f in dataclasses.fields(PipelineConfig)})
    return settings(pipeline, **{name: getattr(flat, name) for name in settings.SECTIONS})


def dump_world(cfg: WorldSettings) -> str:
    """``cfg`` as YAML that :func:`load_world` reads back."""
    return yaml.safe_dump(cfg.as_file(), sort_keys=False, allow_unicode=True)
