"""Evaluation tasks as data: loaders for the published files
(:mod:`.formats`) and the paper's metrics (:mod:`.metrics`); scoring any
system's outputs against a file (:mod:`.score`)."""

from toolformer.tasks.formats import (
    FORMATS,
    KINDS,
    TaskData,
    TaskFormatError,
    TaskItem,
    detect_format,
    load_task,
    parse_target_value,
)
from toolformer.tasks.metrics import (
    default_max_words,
    extract_number,
    gold_fits,
    gold_numbers,
    math_score,
    model_answer,
    normalize_answer,
    qa_score,
)

__all__ = [
    "FORMATS", "KINDS", "TaskData", "TaskFormatError", "TaskItem", "default_max_words", "detect_format",
    "extract_number", "gold_fits", "gold_numbers", "load_task", "math_score", "model_answer", "normalize_answer",
    "parse_target_value", "qa_score",
]
