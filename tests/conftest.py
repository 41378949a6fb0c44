import os
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
torch.set_num_threads(min(2, os.cpu_count() or 1))


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> str:
    """A tiny random GPT-2 and its tokenizer, built in code once per session."""
    from toolformer.lm.modeling import write_tiny_model

    return str(write_tiny_model(tmp_path_factory.mktemp("tiny") / "model", seed=0, data_dir=ROOT / "data"))


@pytest.fixture
def repo_root() -> Path:
    return ROOT
