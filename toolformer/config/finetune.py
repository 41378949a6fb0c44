"""The ``finetune`` section of the pipeline config (:class:`FinetuneConfig`) and the checks it shares with the
training loop's settings (:class:`toolformer.lm.trainargs.TrainArgs`) and the worlds' pre-training. Read through
:mod:`toolformer.config.schema`, which holds every section."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from toolformer.config.load import above, at_least, between

MAX_LEARNING_RATE = 1.0
"""The largest learning rate a config may set (``finetune``, ``pretrain``): AdamW past 1 only diverges."""
MAX_WEIGHT_DECAY = 10.0
"""The largest weight decay a config may set (``finetune``, ``pretrain``)."""

TRACKERS = {"none": None, "tensorboard": "tensorboard", "wandb": "wandb"}
"""``report_to``: each tracker and the package it needs (the extra ``track``)."""


def check_training_choices(schedule: str, dtype: str, save_dtype: str = "auto", report_to: str = "none") -> None:
    """The checks that FinetuneConfig and the training loop's TrainArgs share."""
    import importlib.util

    if schedule not in ("linear", "cosine"):
        raise ValueError(f"schedule: {schedule!r} is not one of linear, cosine")
    for key, value in (("dtype", dtype), ("save_dtype", save_dtype)):
        if value not in ("auto", "float32", "bfloat16", "float16"):
            raise ValueError(f"{key}: {value!r} is not one of auto, float32, bfloat16, float16")
    if report_to not in TRACKERS:
        raise ValueError(f"report_to: {report_to!r} is not one of {', '.join(TRACKERS)}")
    package = TRACKERS[report_to]
    if package is not None and importlib.util.find_spec(package) is None:
        raise ValueError(f"report_to: {report_to} needs the package {package}, which is not installed here "
                         "(pip install 'toolformer[track]')")


@dataclass
class FinetuneConfig:
    dataset: str = ""
    """Folder of a `save_to_disk` data set with a `text` column; empty = RUN_DIR/build/dataset."""
    output_dir: str = ""
    """Model folder; empty = RUN_DIR/model."""
    learning_rate: float = 1e-5
    """Peak learning rate (the paper: 1e-5)."""
    warmup_ratio: float = 0.1
    """Share of steps with linear warm-up (the paper: 10 %)."""
    schedule: str = "linear"
    """Learning rate after warm-up: linear decay to 0 (the paper) or cosine."""
    weight_decay: float = 0.0
    """AdamW weight decay on matrices (biases and norms never decay); the paper gives none."""
    grad_clip: float = 1.0
    """Clip the gradient norm to this; 0 = no clipping."""
    batch_size: int = 128
    """Effective batch in sequences (the paper: 128)."""
    micro_batch_size: int = 8
    """Sequences per forward per process; accumulation makes up the rest."""
    max_steps: int = 2000
    """Optimizer steps (the paper: at most 2k); raising it later continues from the last checkpoint."""
    max_length: int = 1024
    """Sequence length in tokens (the paper: 1024); capped at the model window."""
    whole_documents: bool = True
    """Never split a document that fits in a row across two rows (a call and its use stay together)."""
    eval_every: int = 100
    """Evaluate dev perplexity every this many steps; the best model is kept."""
    dev_ratio: float = 0.05
    """Share of the data set's documents held out for dev perplexity (0 = none: the last model is kept)."""
    save_every: int = 100
    """Write a resumable checkpoint every this many steps (and at the last step); 0 = never."""
    keep_checkpoints: int = 1
    """Resumable checkpoints kept in OUTPUT_DIR/checkpoints (older ones are deleted)."""
    log_every: int = 10
    """Record the mean training loss every this many steps in trainer_state.json."""
    gradient_checkpointing: bool = False
    """Trade compute for memory."""
    dtype: str = "auto"
    """auto (bf16 on GPU, fp32 on CPU), float32, bfloat16 or float16: autocast over float32 weights."""
    save_dtype: str = "auto"
    """Dtype of the saved tuned model: auto (the training dtype: bfloat16 weights after bf16 training, else
    float32), float32, bfloat16 or float16."""
    method: str = "full"
    """full (every weight trained, the paper's) or lora (low-rank adapters through peft, the base weights frozen:
    toolformer.lm.lora; pip install 'toolformer[lora]') or qlora (the same adapters over the base model loaded in
    4 bits; needs a CUDA GPU and bitsandbytes: pip install 'toolformer[qlora]'). The saved model has the adapters
    merged into it."""
    lora_rank: int = 16
    """LoRA: rank of each adapter."""
    lora_alpha: float = 32.0
    """LoRA: the update is scaled by lora_alpha / lora_rank."""
    lora_dropout: float = 0.0
    """LoRA: dropout on each adapter's input. Above 0 each adapter keeps its own copy of its input for the backward
    pass: 0.05 took SmolLM2's saved activations from 344 to 556 MiB a 256-token row (docs/lab-notes.md)."""
    lora_targets: list[str] = field(default_factory=list)
    """LoRA: names of the layers that get adapters (e.g. [q_proj, v_proj]); empty = every linear layer of the
    model but its output layer, found from the model."""
    report_to: str = "none"
    """Also log the training loss, learning rate, gradient norm, tokens/s and dev perplexity to a tracker:
    none, tensorboard (event files in OUTPUT_DIR/logs) or wandb (offline unless WANDB_MODE says otherwise; files
    in OUTPUT_DIR/logs), through accelerate's trackers; the packages: pip install 'toolformer[track]'."""
    tool_data_max_mb: float = 50.0
    """The model folder's toolformer.json records the tools; the data of each (a collection or knowledge file with
    its BM25 index, a translation model) up to this many MB (10^6 bytes) is copied into the folder, larger data is
    recorded by absolute path; 0 = never copy."""

    retired: ClassVar[dict[str, str]] = {
        "freeze": "removed in 0.2.0: freezing parts of the model lowered held-out accuracy (docs/lab-notes.md); "
                  "every parameter is trained, as in the paper; delete the key",
        "call_input_weight": "removed in 0.2.0: weighing the call inputs' tokens less taught worse calls "
                             "(docs/lab-notes.md); delete the key",
        "merge": "removed in 0.2.0: merging the tuned weights with the base model's traded one held-out set for "
                 "another (docs/lab-notes.md); the saved model is the tuned one; delete the key"}

    def validate(self) -> None:
        check_training_choices(self.schedule, self.dtype, self.save_dtype, self.report_to)
        above(self, 0.0, "learning_rate")
        between(self, 0.0, MAX_LEARNING_RATE, "learning_rate")
        between(self, 0.0, 1.0, "warmup_ratio")
        between(self, 0.0, MAX_WEIGHT_DECAY, "weight_decay")
        at_least(self, 0.0, "grad_clip")
        at_least(self, 1, "batch_size", "micro_batch_size", "max_steps", "max_length", "keep_checkpoints",
                 "log_every")
        at_least(self, 0, "eval_every", "save_every")
        if not 0.0 <= self.dev_ratio < 1.0:
            raise ValueError(f"dev_ratio: {self.dev_ratio} is not in [0, 1)")
        if self.tool_data_max_mb < 0:
            raise ValueError(f"tool_data_max_mb: {self.tool_data_max_mb} is negative")
        self.check_method()

    def check_method(self) -> None:
        import importlib.util

        if self.method not in ("full", "lora", "qlora"):
            raise ValueError(f"method: {self.method!r} is not one of full, lora, qlora")
        if self.method == "full":
            return
        at_least(self, 1, "lora_rank")
        above(self, 0.0, "lora_alpha")
        if not 0.0 <= self.lora_dropout < 1.0:
            raise ValueError(f"lora_dropout: {self.lora_dropout} is not in [0, 1)")
        if importlib.util.find_spec("peft") is None:
            raise ValueError(f"method: {self.method} needs the package peft, which is not installed here "
                             f"(pip install 'toolformer[{self.method}]')")
