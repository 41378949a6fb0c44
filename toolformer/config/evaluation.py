"""Configuration of the evaluation (`evaluate`: its tasks, rows and extra models) and of the inspection
(`inspect`); :mod:`toolformer.config.schema` holds the whole config."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from toolformer.config.load import at_least

EVAL_ROWS = ("base", "toolformer_disabled", "toolformer")
TASK_FORMATS = ("asdiv", "svamp", "mawps", "webqs", "webquestions", "triviaqa", "lama", "gsm8k")
"""The evaluation formats by name (`toolformer.tasks.FORMATS`; tests/test_layout.py keeps them equal)."""


SAFE_NAME = "1 to 100 letters, digits, `_`, `-` or `.`, not starting with `.`"
"""What a task or row name may be (:func:`safe_name`), for messages."""


def safe_name(name: str) -> bool:
    """Task and row names name files and folders (``NAME.jsonl``, ``predictions/NAME/``): :data:`SAFE_NAME`, so
    that every file named after one is a file name the system takes, inside its folder."""
    return re.fullmatch(r"[A-Za-z0-9_-][A-Za-z0-9_.-]{0,99}", name) is not None


@dataclass
class TaskConfig:
    name: str = ""
    """Column name of the task in results (e.g. asdiv, svamp, webqs)."""
    path: str = ""
    """Local task file (ASDiv.xml, SVAMP.json, a JSON list or a JSONL file)."""
    format: str = "auto"
    """auto (from the file), asdiv, svamp, mawps, gsm8k, webqs, triviaqa or lama; see toolformer/tasks/formats.py."""
    kind: str = "qa"
    """math (first number of the output, 2 decimals) or qa (answer in the first words)."""
    prompt: str = "{question}"
    """Prompt template; `{question}` is replaced by the item's question."""
    max_words: int = 0
    """qa: words of the output searched for the answer; 0 = the paper's 20 (5 for lama)."""
    decimals: int = 2
    """math: decimals the prediction and the answer are compared at."""
    max_items: int = 0
    """Evaluate at most the first this many items; 0 = all."""
    max_new_tokens: int = 0
    """Tokens generated per item of this task; 0 = evaluate.max_new_tokens (an answer with two calls needs more)."""

    def validate(self) -> None:
        if not self.name or not self.path:
            raise ValueError("every task needs a name and a path")
        if not safe_name(self.name):
            raise ValueError(f"name: {self.name!r} must be {SAFE_NAME} (it names files)")
        if self.kind not in ("math", "qa"):
            raise ValueError(f"kind: {self.kind!r} is not math or qa")
        if self.format != "auto" and self.format not in TASK_FORMATS:
            raise ValueError(f"format: {self.format!r} is not auto or one of {sorted(TASK_FORMATS)}")
        if "{question}" not in self.prompt:
            raise ValueError("prompt: the template must contain {question}")
        at_least(self, 0, "max_words", "decimals", "max_items", "max_new_tokens")


@dataclass
class ExtraModel:
    name: str = ""
    """Row name in the results (e.g. control)."""
    path: str = ""
    """Model folder or hub id."""
    tools: bool = False
    """Decode with tool calls (true) or with p(call-start) = 0 (false)."""
    max_calls: int = 0
    """Calls per input for this row; 0 = evaluate.max_calls. A row with its own max_calls is a decoding variant of
    its model (e.g. the tuned model with chained calls): it gets no perplexity, as the toolformer row."""
    top_k_trigger: int = 0
    """This row starts a call when the call-start token is among this many most likely tokens; 0 =
    evaluate.top_k_trigger. Like max_calls, a row with its own makes it a decoding variant."""


@dataclass
class EvaluateConfig:
    output_dir: str = ""
    """Folder for predictions and results; empty = RUN_DIR/eval."""
    tasks: list[TaskConfig] = field(default_factory=list)
    """Evaluation sets, one column each."""
    rows: list[str] = field(default_factory=lambda: list(EVAL_ROWS))
    """Built-in rows to run: base (model.path, tools off), toolformer_disabled, toolformer (the tuned model)."""
    extra_models: list[ExtraModel] = field(default_factory=list)
    """More rows, e.g. a model tuned on the corpus without calls."""
    require_tuned: bool = True
    """A missing tuned model is an error; false = skip its rows with a message."""
    perplexity_path: str = ""
    """JSONL with `text` (no calls) for held-out perplexity of every row but toolformer; empty = none."""
    perplexity_max_docs: int = 0
    """Score at most this many perplexity documents; 0 = all."""
    top_k_trigger: int = 10
    """A call starts whenever the call-start token is among the top k (the paper: 10)."""
    max_calls: int = 1
    """Calls per input (the paper: 1)."""
    max_new_tokens: int = 32
    """Tokens generated per item (inserted results not counted)."""
    constrained: bool = False
    """Constrained decoding of the rows with tools: after the call-start token only an enabled tool's name, an
    input in that tool's grammar (its `input_pattern`, at most tools.max_input_chars) and the result marker may
    follow, and a call the token budget cuts is closed when its input is complete (toolformer/lm/constrain.py)."""
    batch_size: int = 16
    """Items decoded together (also sequences per perplexity forward)."""
    tools_from: str = "model"
    """Tools, their data and the call style of a model folder's rows: model (what its toolformer.json records; this
    config's `tools` and `calls` for a folder without one) or config (this config's, for every row)."""
    trust_folder_tools: bool = False
    """With tools_from model: trust the model folders' toolformer.json with their MCP servers, side effects and
    tool data outside them (`--trust-folder-tools`; see toolformer.lm.foldertrust); false = a row that needs
    them fails before any work."""

    def validate(self) -> None:
        if self.tools_from not in ("model", "config"):
            raise ValueError(f"tools_from: {self.tools_from!r} is not one of model, config")
        at_least(self, 0, "perplexity_max_docs", "max_calls")
        at_least(self, 1, "top_k_trigger", "max_new_tokens", "batch_size")
        for r in self.rows:
            if r not in EVAL_ROWS:
                raise ValueError(f"rows: unknown row {r!r} (known: {', '.join(EVAL_ROWS)})")
        names = [t.name for t in self.tasks]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"tasks: duplicate task name(s) {dup}")
        rows = list(self.rows)
        for m in self.extra_models:
            if not m.name or not m.path:
                raise ValueError("extra_models: every model needs a name and a path")
            if not safe_name(m.name):
                raise ValueError(f"extra_models: name {m.name!r} must be {SAFE_NAME} (it names files)")
            if m.name in rows or m.name in EVAL_ROWS:
                raise ValueError(f"extra_models: row name {m.name!r} is already used")
            if m.max_calls < 0 or m.top_k_trigger < 0:
                raise ValueError(f"extra_models: {m.name}: max_calls {m.max_calls} and top_k_trigger "
                                 f"{m.top_k_trigger} may not be negative")
            rows.append(m.name)


@dataclass
class InspectConfig:
    top: int = 10
    """Kept calls shown at the top and bottom of the margin ranking, per tool."""
    page_size: int = 200
    """Documents per page of report.html (further pages: report-2.html, ...)."""
    context_chars: int = 160
    """At most this many characters of the sentence shown on each side of a ranked call."""
    bins: int = 40
    """Bins of the L⁻ − L⁺ histograms, at most about this many (fewer when a tool has few scored calls)."""

    def validate(self) -> None:
        if self.top < 0:
            raise ValueError(f"top: must be 0 or more, got {self.top}")
        for name in ("page_size", "context_chars", "bins"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}: must be at least 1, got {getattr(self, name)}")
