"""lm-evaluation-harness hooks of the tasks in this folder, written by `toolformer tasks lmeval` (toolformer
must be installed where lm_eval runs): each task's items are the JSONL file its YAML names, beside this file, and
each output is scored with the project's metric (toolformer/integrations/lmeval_tasks.py)."""

from pathlib import Path

from toolformer.integrations.lmeval_tasks import load_docs as _load_docs
from toolformer.integrations.lmeval_tasks import process_results as process_results  # the YAML files name it


def load_docs(**kwargs):
    return _load_docs(Path(__file__).parent, **kwargs)
