"""A world's config file: a pipeline config (:class:`PipelineConfig`) with the world's own sections beside its
keys (the small world: ``world``, ``pretrain``, ``demo``; the published world: ``published``, ``pretrain``,
``demo``). A world declares two dataclasses: the file as written (a subclass of :class:`PipelineConfig` with a
field per section) and its settings (a subclass of :class:`WorldSettings` with the same fields), and reads and
writes them with :func:`load_world` and :func:`dump_world`. :class:`PretrainConfig` is the ``pretrain`` section
every world has (its base model, :mod:`toolformer.worlds.basemodel`), with the small world's defaults."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar, TypeVar

import yaml

from toolformer.config.load import above, at_least, between, load_config, to_dict
from toolformer.config.schema import MAX_LEARNING_RATE, MAX_WEIGHT_DECAY, PipelineConfig, check_training_choices

W = TypeVar("W", bound="WorldSettings")


@dataclass
class PretrainConfig:
    output_dir: str = ""
    """Folder of the pre-trained base model and its tokenizer; empty = RUN_DIR/base-model."""
    arch: str = "llama"
    """llama (rotary positions: copying appears sooner here) or gpt2 (learned positions)."""
    vocab_size: int = 900
    """BPE vocabulary trained on the world's texts (one token per digit)."""
    digits_apart: bool = True
    """The space before a digit is a token of its own, never part of the digit's: a number is the same tokens
    in the text and after ``(`` in a call (the first operand a model copies into a call)."""
    prefix_space: bool = True
    """The tokenizer encodes every text as if a space came before it: a prompt's first number or word has the
    tokens it has anywhere else (without it, a number that opens a prompt was not copied into calls). Added to
    a pretrain.init_from model's tokenizer too."""
    hidden: int = 128
    """Width of the model."""
    layers: int = 6
    """Transformer blocks."""
    heads: int = 4
    """Attention heads per block."""
    positions: int = 128
    """Longest sequence the model accepts, in tokens (the annotation documents are shorter)."""
    seq_len: int = 128
    """Length of the packed training sequences, in tokens (each starts with BOS)."""
    packing: str = "stream"
    """stream: documents back to back, each after BOS, rows cut anywhere (no padding); whole: a document that
    fits a row is never split (rows padded: `toolformer world pretrain` prints how much)."""
    batch_size: int = 32
    """Sequences per optimizer step."""
    max_steps: int = 1000
    """Optimizer steps (copying from a prefix appears between steps 1,500 and 1,750 of 32x128 tokens)."""
    learning_rate: float = 1e-3
    """Peak learning rate, cosine decay after warm-up."""
    warmup_ratio: float = 0.05
    """Share of steps with linear warm-up."""
    weight_decay: float = 0.1
    """AdamW weight decay."""
    eval_every: int = 250
    """Dev loss every this many steps."""
    report_to: str = "none"
    """Also log the pre-training to a tracker: none, tensorboard or wandb (as finetune.report_to; files in the
    base model's folder, logs/). Not part of the model's key."""
    dev_docs: int = 400
    """Pre-training documents held out for the dev loss."""
    threads: int = 1
    """torch CPU threads; 0 = one per core (a tiny model gains little from two, and stalls when a core is busy)."""
    probe_items: int = 200
    """Items of each copy probe (Calculator, QA) and of the base model's eval_math check; 0 = no probe."""
    init_from: str = "data/world-base-start"
    """A model folder (a base model `toolformer world pretrain` made) to continue pre-training from, with its tokenizer
    and shape, instead of a new model: the same steps on a changed corpus; empty = train from scratch."""
    shipped: str = "data/world-base"
    """A base model `toolformer world pretrain` made, copied instead of training when its pretrain.json records this
    config's key and max_steps and its weights hash checks out; empty = always train."""

    def validate(self) -> None:
        if self.arch not in ("gpt2", "llama"):
            raise ValueError(f"arch: {self.arch!r} is not one of gpt2, llama")
        at_least(self, 1, "vocab_size", "hidden", "layers", "heads", "positions", "batch_size", "max_steps",
                 "eval_every")
        at_least(self, 2, "seq_len")
        at_least(self, 0, "dev_docs", "threads", "probe_items")
        check_training_choices("cosine", "auto", "auto", self.report_to)
        above(self, 0.0, "learning_rate")
        between(self, 0.0, MAX_LEARNING_RATE, "learning_rate")
        between(self, 0.0, 1.0, "warmup_ratio")
        between(self, 0.0, MAX_WEIGHT_DECAY, "weight_decay")
        if self.hidden % self.heads:
            raise ValueError(f"hidden: {self.hidden} is not a multiple of heads ({self.heads})")
        if self.packing not in ("stream", "whole"):
            raise ValueError(f"packing: {self.packing!r} is not one of stream, whole")
        if self.seq_len > self.positions:
            raise ValueError(f"seq_len: {self.seq_len} exceeds positions ({self.positions})")


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
