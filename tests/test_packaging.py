"""The package installs and runs outside the repository: the files it reads at run time are package data
(pyproject.toml), its packaged configs (toolformer/share/configs) and sample data (toolformer/share/data) are the
repository's configs/ and data/ files, and `toolformer demo`, `world generate`, `tiny-model` and a tiny `run` work
from an empty folder. The slow tests build the wheel from a copy of the working tree (offline: no build isolation,
no index) and install it with `pip install --target` beside the virtualenv's dependencies."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from toolformer.cli.app import main
from toolformer.cli.common import PACKAGED_CONFIGS, config_file, load_pipeline
from toolformer.config.load import load_config, share_path
from toolformer.config.schema import PipelineConfig
from toolformer.smallworld.config import load_smallworld

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "toolformer"
SHARE = PACKAGE / "share"
# Not package data: the note on toolformer/share/ for whoever edits it, and caches written beside data files.
NOT_SHIPPED = ("share/README.md",)


def package_files() -> set[str]:
    """Every file of toolformer/ a wheel must hold, relative to it: modules and the data the code reads."""
    files = set()
    for f in PACKAGE.rglob("*"):
        rel = f.relative_to(PACKAGE).as_posix()
        if f.is_file() and "__pycache__" not in f.parts and ".bm25" not in rel and rel not in NOT_SHIPPED:
            files.add(rel)
    return files


def shared_copies() -> list[tuple[Path, Path]]:
    """(packaged file, the repository's file it copies): configs/NAME.yaml and the sample data/ files."""
    pairs = [(SHARE / "configs" / f"{name}.yaml", ROOT / "configs" / f"{name}.yaml") for name in PACKAGED_CONFIGS]
    data = [f for f in sorted((SHARE / "data").rglob("*")) if f.is_file() and ".bm25" not in f.as_posix()]
    return pairs + [(f, ROOT / "data" / f.relative_to(SHARE / "data")) for f in data]


def test_the_packaged_configs_and_data_are_the_repositorys():
    """One source: the repository's files; the packaged ones are copies (cp configs/X toolformer/share/configs/)."""
    pairs = shared_copies()
    assert len(pairs) == len(PACKAGED_CONFIGS) + 6
    for packaged, repo in pairs:
        assert packaged.read_bytes() == repo.read_bytes(), f"{packaged} differs from {repo}: copy {repo} over it"


def test_config_names_and_the_small_worlds_default(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert config_file(None) is None
    assert config_file(None, default="demo") == share_path("configs", "demo.yaml")
    assert config_file("tiny") == share_path("configs", "tiny.yaml")
    assert config_file("configs/tiny.yaml") == "configs/tiny.yaml"  # a path stays a path, found or not
    (tmp_path / "tiny").write_text("run_dir: mine\n")
    assert config_file("tiny") == "tiny"  # a file of that name wins over the packaged config
    from toolformer.cli.jobs import load_world
    from toolformer.cli.parser import build_parser

    args = build_parser().parse_args(["world", "generate"])
    assert load_world(args) == load_smallworld(ROOT / "configs" / "demo.yaml")


def test_a_packaged_config_reads_the_packaged_data_where_the_folder_has_none(tmp_path, monkeypatch):
    from toolformer.cli.parser import build_parser

    monkeypatch.chdir(tmp_path)
    cfg = load_pipeline(build_parser().parse_args(["run", "--config", "tiny", "model.path=m"]))
    paths = [cfg.corpus.path, cfg.tools.collection, cfg.tools.knowledge, cfg.evaluate.perplexity_path,
             *(t.path for t in cfg.evaluate.tasks)]
    assert len(paths) == 6 and cfg.model.path == "m" and cfg.run_dir == "runs/tiny"
    for p in paths:
        assert Path(p).is_file() and Path(p).is_relative_to(share_path("data")), p
    # from the repository's root the same config reads the repository's data/, as configs/tiny.yaml does
    monkeypatch.chdir(ROOT)
    args = build_parser().parse_args(["run", "--config", "tiny"])
    assert load_pipeline(args) == load_config(PipelineConfig, ROOT / "configs" / "tiny.yaml")


def test_the_tools_never_write_their_index_into_the_package(tmp_path, monkeypatch):
    """QA and WikiSearch save a BM25 index beside a data file, but not beside the package's own sample data: an
    installed package is not written into (the index stays in memory)."""
    from toolformer.tools.qa import QA
    from toolformer.tools.wikisearch import WikiSearch, index_cache

    assert index_cache(share_path("data") / "knowledge.jsonl") is None
    assert index_cache(tmp_path / "knowledge.jsonl") == tmp_path / "knowledge.jsonl.bm25"
    before = {f for f in SHARE.rglob("*")}
    assert QA(str(share_path("data") / "knowledge.jsonl")).run("When was Aldermoor founded?")
    assert WikiSearch(str(share_path("data") / "collection.jsonl")).run("bridge")
    assert {f for f in SHARE.rglob("*")} == before


def test_tiny_model_learns_from_the_packaged_data_where_the_folder_has_none(tmp_path, monkeypatch):
    from toolformer.lm.modeling import tiny_tokenizer_texts

    monkeypatch.chdir(tmp_path)
    assert tiny_tokenizer_texts() == tiny_tokenizer_texts(ROOT / "data")
    with pytest.raises(FileNotFoundError, match="--data"):
        tiny_tokenizer_texts(tmp_path)  # a folder named by --data is not replaced


@pytest.mark.parametrize("command", [["demo"], ["world", "pretrain"]])
def test_without_the_shipped_base_model_demo_exits_2_saying_where_and_how(tmp_path, monkeypatch, capsys, command):
    monkeypatch.chdir(tmp_path)
    assert main(command) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("toolformer: error: pretrain.init_from: "), err
    assert "data/world-base-start" in err and "clone" in err and "pretrain.init_from=''" in err
    assert list(tmp_path.iterdir()) == []  # nothing written


# ---- the wheel (slow: a build and an install, about a minute) ----

def copy_tree(dest: Path) -> Path:
    """The working tree as a clone with its uncommitted changes has it, plus a run folder that must stay out."""
    skip = shutil.ignore_patterns(".git", ".venv", "runs", "build", "dist", "*.egg-info", "__pycache__",
                                  ".pytest_cache", ".hypothesis", ".mypy_cache", ".ruff_cache", "*.bm25")
    shutil.copytree(ROOT, dest, ignore=skip)
    (dest / "runs" / "old").mkdir(parents=True)
    (dest / "runs" / "old" / "config.yaml").write_text("run_dir: runs/old\n")
    return dest


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("wheel")
    src = copy_tree(tmp / "src")
    subprocess.run([sys.executable, "-m", "pip", "wheel", str(src), "--no-deps", "--no-build-isolation",
                    "--no-index", "-q", "-w", str(tmp / "out")], check=True, cwd=tmp)
    [built] = (tmp / "out").glob("toolformer-*.whl")
    return built


@pytest.mark.slow
def test_the_wheel_holds_the_package_and_its_data_and_nothing_else(wheel, tmp_path):
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/")[0] for n in names}
    assert tops == {"toolformer", next(t for t in tops if t.endswith(".dist-info"))}, tops  # no tests/, runs/ ...
    assert {n.removeprefix("toolformer/") for n in names if n.startswith("toolformer/")} == package_files()
    assert wheel.stat().st_size < 2_000_000  # the code and small data: no model weights
    entry_points = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith("entry_points.txt"))).decode()
    assert "toolformer = toolformer.cli.app:main" in entry_points
    zipfile.ZipFile(wheel).extractall(tmp_path)
    configs = tmp_path / "toolformer" / "share" / "configs"
    assert load_smallworld(configs / "demo.yaml") == load_smallworld(ROOT / "configs" / "demo.yaml")
    assert load_config(PipelineConfig, configs / "tiny.yaml") == load_config(PipelineConfig,
                                                                             ROOT / "configs" / "tiny.yaml")


def installed(wheel: Path, where: Path) -> dict[str, str]:
    """The wheel installed into ``where/site`` (no dependencies, no index); the environment that runs its
    ``toolformer`` with this virtualenv's dependencies and not the repository's checkout."""
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "-q", "--target",
                    str(where / "site"), str(wheel)], check=True)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return {**env, "PYTHONPATH": str(where / "site"), "TOKENIZERS_PARALLELISM": "false"}


@pytest.mark.slow
def test_the_installed_package_runs_from_an_empty_folder(wheel, tmp_path):
    env = installed(wheel, tmp_path)
    empty = tmp_path / "empty"
    empty.mkdir()
    toolformer = [str(tmp_path / "site" / "bin" / "toolformer")]

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([*toolformer, *args], cwd=empty, env=env, capture_output=True, text=True,
                              timeout=600)

    where = subprocess.run([sys.executable, "-c", "import toolformer; print(toolformer.__file__)"], cwd=empty,
                           env=env, capture_output=True, text=True, check=True).stdout
    assert where.startswith(str(tmp_path / "site")), where
    small = ["world.pretrain_docs=200", "world.corpus_docs=50", "world.heldout_docs=20", "world.eval_math=20",
             "world.eval_qa=20", "world.twostep_docs=10", "world.eval_twostep=10"]
    done = run("world", "generate", *small)
    assert done.returncode == 0 and (empty / "runs" / "demo" / "world" / "world.json").is_file(), done.stderr
    done = run("tiny-model", "--out", "m")
    assert done.returncode == 0, done.stderr
    done = run("run", "--config", "tiny", "model.path=m")
    assert done.returncode == 0, done.stderr[-3000:]
    assert (empty / "runs" / "tiny" / "eval" / "results.json").is_file()
    done = run("demo")
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "pretrain.init_from" in done.stderr


@pytest.mark.slow
def test_lint_holds_with_a_runs_folder_in_the_root(tmp_path):
    """The demos write runs/ into the root; the import order of the tests must not change with it (a folder of a
    test helper module's name turns that module first-party for the linter unless pyproject.toml pins it)."""
    ruff = Path(sys.executable).parent / "ruff"
    if not ruff.exists():
        pytest.skip(f"{ruff}: not installed (bash scripts/setup.sh installs the test extra)")
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    shutil.copytree(ROOT / "tests", tmp_path / "tests", ignore=shutil.ignore_patterns("__pycache__"))
    (tmp_path / "toolformer").symlink_to(PACKAGE)  # first-party, as in the root
    helpers = sorted(p.stem for p in (ROOT / "tests").glob("*.py") if not p.stem.startswith(("test_", "conftest")))
    for name in helpers:
        (tmp_path / name).mkdir()
    done = subprocess.run([str(ruff), "check", "--no-cache", "tests"], cwd=tmp_path, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
