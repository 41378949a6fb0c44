"""lm-evaluation-harness hooks of the tasks in this folder, written by `toolformer tasks lmeval` (toolformer
must be installed where lm_eval runs): each task's items are the JSONL file its YAML names, beside this file, and
each output is scored with the project's metric (toolformer/tasks/lmeval.py)."""

from pathlib import Path

from toolformer.tasks.lmeval import load_docs as _load_docs
from toolformer.tasks.lmeval import process_results  # noqa: F401 (named by the YAML files)


def load_docs(**kwargs):
    return _load_docs(Path(__file__).parent, **kwargs)
