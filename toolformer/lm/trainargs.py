"""The training loop's settings (:class:`TrainArgs`, the training fields of the fine-tune config) and what
follows from them: the learning-rate schedule and the precision of training and of the saved weights.
:mod:`toolformer.lm.training` runs the loop."""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

import torch

from toolformer.config.schema import FinetuneConfig, check_training_choices

_FT = FinetuneConfig()  # the defaults of the loop's settings: declared once, in the fine-tune config


@dataclass
class TrainArgs:
    """The loop's settings: the training fields of :class:`~toolformer.config.schema.FinetuneConfig`
    (their meaning and defaults are declared there) and the seed of the row order and dropout.
    Stages build it with :meth:`from_config`; the small world's pre-training sets its own values."""

    learning_rate: float = _FT.learning_rate
    warmup_ratio: float = _FT.warmup_ratio
    schedule: str = _FT.schedule
    batch_size: int = _FT.batch_size
    micro_batch_size: int = _FT.micro_batch_size
    max_steps: int = _FT.max_steps
    eval_every: int = _FT.eval_every
    save_every: int = _FT.save_every
    keep_checkpoints: int = _FT.keep_checkpoints
    weight_decay: float = _FT.weight_decay
    grad_clip: float = _FT.grad_clip
    dtype: str = _FT.dtype
    seed: int = 0
    gradient_checkpointing: bool = _FT.gradient_checkpointing
    log_every: int = _FT.log_every
    save_dtype: str = _FT.save_dtype
    report_to: str = _FT.report_to

    @classmethod
    def from_config(cls, fc: FinetuneConfig, **overrides) -> TrainArgs:
        """The loop's fields of ``fc``; ``overrides`` (e.g. ``seed``) replace any of them."""
        values = {f.name: getattr(fc, f.name) for f in fields(cls) if hasattr(fc, f.name)}
        return cls(**{**values, **overrides})

    def validate(self) -> None:
        check_training_choices(self.schedule, self.dtype, self.save_dtype, self.report_to)
        for name in ("batch_size", "micro_batch_size", "max_steps", "log_every"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}: must be at least 1, got {getattr(self, name)}")


def lr_factor(step: int, args: TrainArgs) -> float:
    """Multiplier of the peak learning rate for optimizer step ``step`` (0-based)."""
    warmup = round(args.warmup_ratio * args.max_steps)
    if step < warmup:
        return (step + 1) / warmup
    progress = (step - warmup) / max(1, args.max_steps - warmup)  # in [0, 1)
    if args.schedule == "cosine":
        return 0.5 * (1.0 + math.cos(math.pi * progress))
    return 1.0 - progress


def batch_plan(batch_size: int, micro_batch_size: int, processes: int) -> tuple[int, int]:
    """(accumulation, effective batch) of one optimizer step: ``micro_batch_size`` rows per forward and process,
    accumulated over as many forwards as fit in ``batch_size`` (at least one). The effective batch is
    ``batch_size`` when micro batch x processes divides it, else the largest multiple of that below it (one round
    of it when it is larger than ``batch_size``)."""
    accum = max(1, batch_size // (micro_batch_size * processes))
    return accum, accum * micro_batch_size * processes


def mixed_precision(dtype: str, cuda: bool | None = None) -> str:
    """accelerate's ``mixed_precision`` for ``finetune.dtype``: auto is bf16 on a CUDA device and none on the CPU.
    ``cuda``: whether the loop runs on CUDA; None = whether this machine has it."""
    if dtype == "auto":
        on_cuda = torch.cuda.is_available() if cuda is None else cuda
        return "bf16" if on_cuda else "no"
    return {"float32": "no", "bfloat16": "bf16", "float16": "fp16"}[dtype]


def save_dtype(args: TrainArgs, cuda: bool | None = None) -> torch.dtype:
    """The dtype the tuned weights are saved in: ``save_dtype``, or with auto the training precision
    (:func:`mixed_precision` of ``dtype`` and ``cuda``)."""
    if args.save_dtype != "auto":
        return {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[args.save_dtype]
    return {"bf16": torch.bfloat16, "fp16": torch.float16}.get(mixed_precision(args.dtype, cuda), torch.float32)
