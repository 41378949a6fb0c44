"""Typed configuration of the pipeline: one dataclass per stage.

Every field has a type, a default and a one-line meaning (with units). The YAML
files in ``configs/`` set these fields; ``key=value`` on the command line
overrides them (``filter.tau_filter=0.5``). See :mod:`toolformer.config.load`
for loading and validation.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

# The evaluation and the tools have modules of their own; their sections are imported here so that the whole
# config reads from one place. The small world's sections wrap this config (toolformer.smallworld.config).
from toolformer.config.evaluation import EVAL_ROWS, EvaluateConfig, ExtraModel, InspectConfig, TaskConfig
from toolformer.config.finetune import (
    MAX_LEARNING_RATE,
    MAX_WEIGHT_DECAY,
    TRACKERS,
    FinetuneConfig,
    check_training_choices,
)
from toolformer.config.load import at_least, between
from toolformer.config.tools import McpServerConfig, ToolsConfig

__all__ = [
    "BuildConfig", "CallsConfig", "ChainConfig", "CorpusConfig", "EvaluateConfig", "ExecuteConfig",
    "ExtraModel", "FilterConfig", "FinetuneConfig", "InspectConfig", "McpServerConfig", "ModelConfig",
    "PipelineConfig", "SampleConfig", "TaskConfig", "ToolSampleOverride", "ToolsConfig",
    "EVAL_ROWS", "SAMPLE_PROMPTS", "STAGES", "check_training_choices", "MAX_LEARNING_RATE", "MAX_WEIGHT_DECAY",
    "TRACKERS",
]

STAGES = ("sample", "execute", "filter", "chain", "build", "finetune", "evaluate", "inspect")


@dataclass
class ModelConfig:
    path: str = ""
    """Folder or hub id of the causal LM (and its tokenizer unless `tokenizer` is set)."""
    tokenizer: str = ""
    """Folder or hub id of the tokenizer; empty = same as `path`."""
    dtype: str = "auto"
    """auto (float32 on CPU, bfloat16 on GPU), float32, bfloat16 or float16."""
    device: str = "auto"
    """auto (cuda if available, else cpu), cpu, cuda or cuda:N."""
    max_length: int = 0
    """Model window in tokens; 0 = the model's max_position_embeddings."""
    threads: int = 0
    """torch CPU threads, kept as set; 0 = the cores this process may run on (its CPU affinity), divided among
    the processes of a launch on this machine, and a process alone on it (with two cores or more) then follows
    the load: fewer threads while other processes keep cores busy, back up when they stop (read from
    /proc/stat; without it, the count stays; :mod:`toolformer.lm.threads`)."""

    def validate(self) -> None:
        if self.dtype not in ("auto", "float32", "bfloat16", "float16"):
            raise ValueError(f"dtype: {self.dtype!r} is not one of auto, float32, bfloat16, float16")
        at_least(self, 0, "max_length", "threads")


CALL_STYLES = ("plain", "plain_ascii", "special")
"""The call styles by name (`toolformer.tools.calls.STYLES`; tests/test_layout.py keeps them equal)."""


@dataclass
class CallsConfig:
    style: str = "plain"
    """Call markers: plain (`[`, `]`, `→`), plain_ascii (`->`) or special (`<API>`, `</API>` added tokens)."""
    separator: str = " "
    """Text between an inline call and what follows it; also after a call used as a filter prefix."""

    def validate(self) -> None:
        if self.style not in CALL_STYLES:
            raise ValueError(f"style: {self.style!r} is not one of {sorted(CALL_STYLES)}")


@dataclass
class CorpusConfig:
    path: str = "data/corpus.jsonl"
    """Local .jsonl (.jsonl.gz, .jsonl.zst), .json, .parquet, .txt or .csv file, a folder of them, a `datasets`
    save_to_disk folder, or a hub data set name."""
    format: str = "auto"
    """auto (from the name's ending; others are refused), json, parquet, text, csv, disk (save_to_disk) or hub."""
    split: str = "train"
    """Split to read."""
    id_field: str = "id"
    """Column with the document id (text corpora get line numbers)."""
    text_field: str = "text"
    """Column with the document text."""
    date_field: str = "date"
    """Column with the document date (YYYY-MM-DD), optional."""
    max_docs: int = 0
    """Read at most this many documents; 0 = all."""
    window_tokens: int = 0
    """Split longer documents into windows of this many tokens; 0 = fit the model window (and prompt when sampling)."""
    max_doc_chars: int = 100_000
    """Cut a longer document into pieces of at most this many characters (`<id>#p<k>`, then windows), each ending
    its shard, so that one huge document (a 5 MB line) cannot hold a shard for hours or fill memory; 0 = never."""
    streaming: bool = False
    """Read a hub or file data set as a stream (`datasets` streaming) instead of preparing it first; JSON Lines
    and .txt are always read line by line. No stage holds the whole corpus either way."""

    def validate(self) -> None:
        at_least(self, 0, "max_docs", "window_tokens", "max_doc_chars")


@dataclass
class ToolSampleOverride:
    tau_sample: float | None = None
    """Per-tool tau_s; null = the stage default."""
    top_k: int | None = None
    """Per-tool k; null = the stage default."""
    num_calls: int | None = None
    """Per-tool m; null = the stage default."""

    def validate(self) -> None:
        between(self, 0.0, 1.0, "tau_sample")
        at_least(self, 1, "top_k", "num_calls")


@dataclass
class SampleConfig:
    tau_sample: float = 0.05
    """tau_s: keep positions where p(call-start) exceeds this."""
    top_k: int = 5
    """k: at most this many positions per document and tool."""
    num_calls: int = 5
    """m: calls sampled per kept position."""
    per_tool: dict[str, ToolSampleOverride] = field(
        default_factory=lambda: {
            "Calculator": ToolSampleOverride(0.0, 20, 10),
            "MT": ToolSampleOverride(0.0, 20, 10),
        }
    )
    """Per-tool tau_s, k, m (the paper: 0.0, 20, 10 for calculator and translation)."""
    method: dict[str, str] = field(default_factory=dict)
    """Per-tool candidate source: sampler (the paper's few-shot sampling), rules or both; default sampler."""
    prefilter: bool = True
    """Apply the paper's per-tool text pre-filters (calculator, calendar)."""
    max_new_tokens: int = 24
    """Longest sampled call input, in tokens, before the call is dropped as unclosed."""
    temperature: float = 1.0
    """Sampling temperature for call inputs."""
    batch_tokens: int = 16384
    """Token budget of one forward batch."""
    max_rule_candidates: int = 24
    """Rule proposers: at most this many candidates per position."""
    prompt: str = "few-shot"
    """The sampler's P(x): `few-shot` (each tool's few-shot prompt, the paper's) or `none` (the text alone: a model
    that already writes calls, e.g. a tuned one, gives p(call-start) at every position; a sampled call counts for
    the tool it names, at that tool's own top-k positions, and the model's own result after the arrow is dropped)."""
    model: str = ""
    """Model the sampler scores positions and samples calls with; empty = model.path (the base model). A second
    round of self-training samples with the round-1 model: sample.model=RUN_DIR/model sample.prompt=none."""

    retired: ClassVar[dict[str, str]] = {
        "word_starts": "removed in 0.2.0: sampling only where a word starts kept fewer calls and no better ones "
                       "(docs/lab-notes.md); delete the key"}

    def validate(self) -> None:
        if self.prompt not in SAMPLE_PROMPTS:
            raise ValueError(f"prompt: {self.prompt!r} is not one of {', '.join(SAMPLE_PROMPTS)}")
        between(self, 0.0, 1.0, "tau_sample")
        at_least(self, 1, "top_k", "num_calls", "max_new_tokens", "batch_tokens", "max_rule_candidates")
        at_least(self, 0.0, "temperature")


SAMPLE_PROMPTS = ("few-shot", "none")
LOOKAHEAD_MODES = ("drop", "flag", "off")
"""filter.lookahead: a candidate that reads ahead is not kept (drop), kept and marked (flag) or not checked (off)."""


@dataclass
class ExecuteConfig:
    cache: bool = True
    """Execute identical (tool, input, date) calls once."""


@dataclass
class FilterConfig:
    tau_filter: float = 1.0
    """tau_f: keep a call if L⁻ − L⁺ ≥ tau_f."""
    per_tool_tau: dict[str, float] = field(default_factory=lambda: {"Calculator": 0.5, "MT": 0.5})
    """Per-tool tau_f (the paper: 0.5 for calculator and translation)."""
    horizon: int = 5
    """Tokens weighted after the position: w̃_t = max(0, 1 − t/horizon), normalised."""
    batch_tokens: int = 16384
    """Token budget of one forward batch (padded tokens counted)."""
    dtype: str = "float32"
    """Dtype of the model while filtering (float32 on CPU; bfloat16 on GPU); log-softmax is always float32."""
    prefix_separator: str = "\n"
    """Text between the call z and the document when z is the prefix of L_i(z)."""
    lookahead: str = "drop"
    """A candidate whose input holds a number or a name that the document states only after the call's position
    (and not before it) could not have been written there: drop (not kept), flag (kept, its record's read_ahead
    lists them) or off (not checked). Counted per tool as read_ahead in the manifest."""
    share: bool = True
    """One row per prefix and document: L(ε) of all positions of a document, and a call proposed at several
    positions, from one forward (same losses, tested; 23 % fewer tokens on the demo's candidates)."""
    model: str = ""
    """Model whose losses judge the calls; empty = model.path (the base model, as in the paper). A second round of
    self-training may judge with the round-1 model instead: filter.model=RUN_DIR/model."""

    retired: ClassVar[dict[str, str]] = {
        "share_prefixes": "removed in 0.2.0: sharing the call's prefix saved tokens but no time (docs/lab-notes.md); "
                          "filter.share (one row per prefix and document) is the sharing that pays; delete the key",
        "skip_blank": "removed in 0.2.0: it kept the same calls (docs/lab-notes.md); delete the key"}

    def validate(self) -> None:
        if self.lookahead not in LOOKAHEAD_MODES:
            raise ValueError(f"lookahead: {self.lookahead!r} is not one of {', '.join(LOOKAHEAD_MODES)}")
        at_least(self, 1, "horizon", "batch_tokens")


@dataclass
class ChainConfig:
    rounds: int = 1
    """Rounds of sample → execute → filter, one call at a time. Round r ≥ 2 (the chain stage) proposes, runs and
    filters calls again on each document with the calls kept so far inline, after the first of them and where none
    was kept: a call may take an earlier call's result as input, and is judged with the earlier calls in the text
    (chained calls). 1 = the paper's single round: the chain stage does nothing."""
    tau_filter: float | None = None
    """tau_f of chained calls (every tool); null = the filter's. A chained call already has to use an earlier
    call's result and to have its own stated in the next 40 characters, so a lower tau_f may keep more of them."""

    def validate(self) -> None:
        if self.rounds < 1:
            raise ValueError(f"rounds: {self.rounds} is less than 1")


@dataclass
class BuildConfig:
    drop_without_calls: bool = True
    """Drop documents none of whose calls was kept; false keeps every one as a plain document."""
    plain_ratio: float = 0.0
    """Mix in this many plain (unannotated) documents per augmented one, drawn by seed (0 = none)."""
    max_per_tool: int = 25000
    """At most this many kept calls per tool, the highest L⁻ − L⁺ first (the paper: 25k); 0 = no cap."""
    plain_path: str = ""
    """JSONL of more plain documents (a `text` field each) that the plain mix may also draw from, e.g. the model's
    pre-training text when the corpus is denser in calls than the paper's; empty = the corpus only."""

    def validate(self) -> None:
        if self.plain_ratio < 0:
            raise ValueError(f"plain_ratio: {self.plain_ratio} is negative")
        if self.max_per_tool < 0:
            raise ValueError(f"max_per_tool: {self.max_per_tool} is negative")


@dataclass
class PipelineConfig:
    run_dir: str = "runs/default"
    """Folder every stage writes into."""
    seed: int = 0
    """Seed set once at the start of every stage."""
    stages: list[str] = field(default_factory=lambda: ["sample", "execute", "filter"])
    """Stages `toolformer run` runs, in order."""
    shard_size: int = 256
    """Records per output shard (resume granularity)."""
    model: ModelConfig = field(default_factory=ModelConfig)
    calls: CallsConfig = field(default_factory=CallsConfig)
    corpus: CorpusConfig = field(default_factory=CorpusConfig)
    tools: ToolsConfig = field(default_factory=ToolsConfig)
    sample: SampleConfig = field(default_factory=SampleConfig)
    execute: ExecuteConfig = field(default_factory=ExecuteConfig)
    filter: FilterConfig = field(default_factory=FilterConfig)
    chain: ChainConfig = field(default_factory=ChainConfig)
    build: BuildConfig = field(default_factory=BuildConfig)
    finetune: FinetuneConfig = field(default_factory=FinetuneConfig)
    evaluate: EvaluateConfig = field(default_factory=EvaluateConfig)
    inspect: InspectConfig = field(default_factory=InspectConfig)

    retired: ClassVar[dict[str, str]] = {
        section: "a section of the small world's config, not of the pipeline's: run this file with `toolformer "
                 "demo` or `toolformer world generate|pretrain|probe`, or delete the section"
        for section in ("world", "pretrain", "demo")}
    """Keys this config no longer has, with what to do instead (read by :func:`~toolformer.config.load.from_dict`
    when a file sets one)."""

    def validate(self) -> None:
        for s in self.stages:
            if s not in STAGES:
                raise ValueError(f"stages: unknown stage {s!r} (known: {', '.join(STAGES)})")
        between(self, 0, 2**32 - 1, "seed")
        at_least(self, 1, "shard_size")
