"""Typed configuration of the pipeline: one dataclass per stage.

Every field has a type, a default and a one-line meaning (with units). The YAML
files in ``configs/`` set these fields; ``key=value`` on the command line
overrides them (``filter.tau_filter=0.5``). See :mod:`toolformer.config.load`
for loading and validation.
"""

from __future__ import annotations

from dataclasses import dataclass, field

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
    """torch CPU threads; 0 = one per core."""

    def validate(self) -> None:
        if self.dtype not in ("auto", "float32", "bfloat16", "float16"):
            raise ValueError(f"dtype: {self.dtype!r} is not one of auto, float32, bfloat16, float16")


@dataclass
class CallsConfig:
    style: str = "plain"
    """Call markers: plain (`[`, `]`, `→`), plain_ascii (`->`) or special (`<API>`, `</API>` added tokens)."""
    separator: str = " "
    """Text between an inline call and what follows it; also after a call used as a filter prefix."""

    def validate(self) -> None:
        from toolformer.tools.calls import STYLES

        if self.style not in STYLES:
            raise ValueError(f"style: {self.style!r} is not one of {sorted(STYLES)}")


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
    streaming: bool = False
    """Read a hub or file data set as a stream (`datasets` streaming) instead of preparing it first; JSON Lines
    are always read line by line. No stage holds the whole corpus either way."""


def _call_name(name: str) -> bool:
    """A name a call can write (`toolformer.tools.calls.CALL_NAME`)."""
    import re

    from toolformer.tools.calls import CALL_NAME

    return re.fullmatch(CALL_NAME, name) is not None


@dataclass
class McpServerConfig:
    """One MCP server whose allowed tools become tools of the pipeline (`toolformer/tools/mcpclient.py`)."""

    name: str = ""
    """Server name; its tools are called `<name>.<tool>` (letters, digits and `_`, no dot)."""
    command: str = ""
    """Executable that starts the server; it talks MCP over its stdin and stdout."""
    args: list[str] = field(default_factory=list)
    """Arguments of `command`."""
    env: dict[str, str] = field(default_factory=dict)
    """Environment variables of the server, over the few the MCP SDK passes on (HOME, PATH, SHELL, TERM, USER)."""
    cwd: str = ""
    """Working folder of the server; empty = the current one."""
    allow: list[str] = field(default_factory=list)
    """The server's tools that become pipeline tools, by the server's names; its other tools are invisible. An
    entry the server does not list is an error."""
    read_only: bool = True
    """Policy: a tool counts as read-only only if its annotations say `readOnlyHint: true`; false = a tool without
    the hint counts as read-only too. `readOnlyHint: false` or `destructiveHint: true` always mean side effects."""
    aliases: dict[str, str] = field(default_factory=dict)
    """Pipeline name of an allowed tool instead of `<name>.<tool>`, e.g. {lookup: Gazetteer}."""
    prompts: dict[str, str] = field(default_factory=dict)
    """Few-shot prompt P(x) of an allowed tool for the paper's sampler (`sample.method` sampler or both): `{text}`
    marks the document, calls are written `[<pipeline name>(input) → result]`."""
    proposers: dict[str, str] = field(default_factory=dict)
    """Built-in rule proposer (and pre-filter) an allowed tool borrows for `sample.method` rules or both:
    Calculator, WikiSearch, QA or Calendar, e.g. {lookup: WikiSearch}; it fills the tool's one string argument."""
    describe_in_prompt: bool = False
    """Show the server's tool descriptions (untrusted text) in the sampler's prompt and in `tools list` /
    `mcp-serve`; false = a neutral line naming the server and tool instead."""
    startup_timeout_s: float = 30.0
    """Seconds the server may take to start, answer `initialize` and list its tools."""
    max_result_chars: int = 100_000
    """A result longer than this is refused (`too_long`) and never kept; shorter ones are cut to
    tools.max_result_chars like every tool's."""
    abandon_after_timeouts: int = 3
    """After this many calls in a row time out, the server is stopped and its later calls fail at once
    (`server_abandoned`); 0 = never."""

    def validate(self) -> None:
        if not self.name or not self.command:
            raise ValueError("every MCP server needs a name and a command")
        if "." in self.name or not _call_name(self.name):
            raise ValueError(f"name: {self.name!r} must be letters, digits and `_` (its tools are `<name>.<tool>`)")
        if not self.allow:
            raise ValueError("allow: list the server's tools to use (none is used otherwise)")
        for key in ("aliases", "prompts", "proposers"):
            for tool in getattr(self, key):
                if tool not in self.allow:
                    raise ValueError(f"{key}: {tool!r} is not in allow ({', '.join(self.allow)})")
        for tool, prompt in self.prompts.items():
            if "{text}" not in prompt:
                raise ValueError(f"prompts: the prompt of {tool!r} must contain {{text}} (where the document goes)")
        for tool in self.allow:
            if not _call_name(self.call_name(tool)):
                raise ValueError(f"allow: {tool!r} gives the call name {self.call_name(tool)!r}, which a call cannot "
                                 "write (letters, digits, `_` and dots): give it an alias")
        for what in ("startup_timeout_s", "max_result_chars"):
            if getattr(self, what) <= 0:
                raise ValueError(f"{what}: must be positive, got {getattr(self, what)}")

    def call_name(self, tool: str) -> str:
        """The pipeline name of the server's tool ``tool``: its alias or `<name>.<tool>`."""
        return self.aliases.get(tool) or f"{self.name}.{tool}"


@dataclass
class ToolsConfig:
    enabled: list[str] = field(default_factory=lambda: ["Calculator", "Calendar", "WikiSearch", "QA"])
    """Tools to annotate with, by registry name, or an MCP server's tool by its pipeline name (`<server>.<tool>`
    or its alias)."""
    collection: str = "data/collection.jsonl"
    """JSONL documents (`id`, `title`, `text`) that WikiSearch searches."""
    knowledge: str = "data/knowledge.jsonl"
    """JSONL facts (`subject`, `relation`, `object`, `question`) that QA answers from."""
    mt_model: str = ""
    """Folder of a seq2seq translation model (NLLB in the paper); empty = MT unavailable."""
    mt_target_lang: str = "eng_Latn"
    """Target language code for NLLB-style tokenizers (ignored when the tokenizer has none)."""
    search_top_k: int = 1
    """WikiSearch snippets returned per query."""
    snippet_chars: int = 200
    """WikiSearch: characters of each snippet's text."""
    timeout_s: float = 5.0
    """Seconds a single call may run before it is abandoned with a timeout error."""
    max_input_chars: int = 200
    """Longer tool inputs are refused."""
    max_result_chars: int = 300
    """Longer results are truncated."""
    concurrency: int = 4
    """Calls of one tool run at once (threads) when executing many; each has its own timeout."""
    per_tool_concurrency: dict[str, int] = field(default_factory=dict)
    """Per-tool limits instead of `concurrency`, e.g. {WikiSearch: 8, MT: 1}."""
    allow_side_effects: bool | list[str] = False
    """Tools not marked read-only that may run: true = all, or a list of tool names (an MCP tool with side effects
    runs only when named here or with true); false = none."""
    mcp_servers: list[McpServerConfig] = field(default_factory=list)
    """MCP servers whose allowed tools join the tools, started over stdio with the official MCP SDK."""

    def validate(self) -> None:
        from toolformer.tools import REGISTRY

        seen: dict[str, str] = {}
        for i, server in enumerate(self.mcp_servers):
            if server.name in {s.name for s in self.mcp_servers[:i]}:
                raise ValueError(f"mcp_servers[{i}].name: {server.name!r} is used by another server")
            for tool in server.allow:
                name = server.call_name(tool)
                if name in REGISTRY or name in seen:
                    raise ValueError(f"mcp_servers[{i}].allow: {tool!r} is called {name!r}, which "
                                     f"{'a built-in tool' if name in REGISTRY else seen[name]} is called already")
                seen[name] = f"mcp_servers[{i}] ({server.name}) tool {tool!r}"


@dataclass
class ToolSampleOverride:
    tau_sample: float | None = None
    """Per-tool tau_s; null = the stage default."""
    top_k: int | None = None
    """Per-tool k; null = the stage default."""
    num_calls: int | None = None
    """Per-tool m; null = the stage default."""


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
    word_starts: bool = False
    """Sample only at positions where a word or number starts, not inside one (not in the paper, which samples at
    every token: with one token per digit a model's call can otherwise land between two digits of a number)."""

    def validate(self) -> None:
        if self.prompt not in SAMPLE_PROMPTS:
            raise ValueError(f"prompt: {self.prompt!r} is not one of {', '.join(SAMPLE_PROMPTS)}")


SAMPLE_PROMPTS = ("few-shot", "none")


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
    skip_blank: bool = False
    """Start the weighted tokens at the first one from the position on that is not only spaces. With a tokenizer
    that gives the space before a number a token of its own (pretrain.digits_apart) that space comes first and is
    predicted as well without the call; the paper's BPE attaches it to the word, so its first weighted token is
    the word's. False: x_i..x_{i+4} as they are."""
    batch_tokens: int = 16384
    """Token budget of one forward batch (padded tokens counted)."""
    dtype: str = "float32"
    """Dtype of the model while filtering (float32 on CPU; bfloat16 on GPU); log-softmax is always float32."""
    prefix_separator: str = "\n"
    """Text between the call z and the document when z is the prefix of L_i(z)."""
    share: bool = True
    """One row per prefix and document: L(ε) of all positions of a document, and a call proposed at several
    positions, from one forward (same losses, tested; 23 % fewer tokens on the demo's candidates)."""
    model: str = ""
    """Model whose losses judge the calls; empty = model.path (the base model, as in the paper). A second round of
    self-training may judge with the round-1 model instead: filter.model=RUN_DIR/model."""
    share_prefixes: bool = False
    """Also run the prefix common to e(c, ε) and e(c, r) (BOS + call up to the arrow) once and continue both rows
    from its key/value cache (same losses, tested): 11 % fewer tokens on the demo, but no faster on 2 CPU cores."""


@dataclass
class ChainConfig:
    rounds: int = 1
    """Rounds of sample → execute → filter, one call at a time. Round r ≥ 2 (the chain stage) proposes, runs and
    filters calls again on each document with the calls kept so far inline, after the first of them and where none
    was kept: a call may take an earlier call's result as input, and is judged with the earlier calls in the text
    (chained calls). 1 = the paper's single round: the chain stage does nothing."""

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


def check_training_choices(schedule: str, dtype: str, save_dtype: str = "auto") -> None:
    """The checks that FinetuneConfig and the training loop's TrainArgs share."""
    if schedule not in ("linear", "cosine"):
        raise ValueError(f"schedule: {schedule!r} is not one of linear, cosine")
    for key, value in (("dtype", dtype), ("save_dtype", save_dtype)):
        if value not in ("auto", "float32", "bfloat16", "float16"):
            raise ValueError(f"{key}: {value!r} is not one of auto, float32, bfloat16, float16")


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
    tool_data_max_mb: float = 50.0
    """The model folder's toolformer.json records the tools; the data of each (a collection or knowledge file with
    its BM25 index, a translation model) up to this many MB (10^6 bytes) is copied into the folder, larger data is
    recorded by absolute path; 0 = never copy."""

    def validate(self) -> None:
        check_training_choices(self.schedule, self.dtype, self.save_dtype)
        if not 0.0 <= self.dev_ratio < 1.0:
            raise ValueError(f"dev_ratio: {self.dev_ratio} is not in [0, 1)")
        if self.tool_data_max_mb < 0:
            raise ValueError(f"tool_data_max_mb: {self.tool_data_max_mb} is negative")


EVAL_ROWS = ("base", "toolformer_disabled", "toolformer")


def _safe_name(name: str) -> bool:
    """Task and row names name files: letters, digits, `_`, `-`, `.`."""
    import re

    return re.fullmatch(r"[A-Za-z0-9_.-]+", name) is not None


@dataclass
class TaskConfig:
    name: str = ""
    """Column name of the task in results (e.g. asdiv, svamp, webqs)."""
    path: str = ""
    """Local task file (ASDiv.xml, SVAMP.json, a JSON list or a JSONL file)."""
    format: str = "auto"
    """auto (from the file), asdiv, svamp, mawps, webqs, triviaqa or lama; see toolformer/tasks/formats.py."""
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
        from toolformer.tasks import FORMATS

        if not self.name or not self.path:
            raise ValueError("every task needs a name and a path")
        if not _safe_name(self.name):
            raise ValueError(f"name: {self.name!r} must be letters, digits, `_`, `-` or `.` (it names files)")
        if self.kind not in ("math", "qa"):
            raise ValueError(f"kind: {self.kind!r} is not math or qa")
        if self.format != "auto" and self.format not in FORMATS:
            raise ValueError(f"format: {self.format!r} is not auto or one of {sorted(FORMATS)}")
        if "{question}" not in self.prompt:
            raise ValueError("prompt: the template must contain {question}")
        if self.max_new_tokens < 0:
            raise ValueError(f"max_new_tokens: {self.max_new_tokens} is negative")


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

    def validate(self) -> None:
        if self.tools_from not in ("model", "config"):
            raise ValueError(f"tools_from: {self.tools_from!r} is not one of model, config")
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
            if not _safe_name(m.name):
                raise ValueError(f"extra_models: name {m.name!r} must be letters, digits, `_`, `-` or `.`")
            if m.name in rows or m.name in EVAL_ROWS:
                raise ValueError(f"extra_models: row name {m.name!r} is already used")
            if m.max_calls < 0:
                raise ValueError(f"extra_models: {m.name}: max_calls {m.max_calls} is negative")
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


@dataclass
class WorldConfig:
    output_dir: str = ""
    """Folder of the generated small world's files; empty = RUN_DIR/world."""
    seed: int = 0
    """Seed of the world: the same seed and counts write the same files."""
    towns: int = 60
    """Towns (founding year, population, river, mayor, a price each)."""
    rivers: int = 12
    """Rivers (length, source, mouth)."""
    ranges: int = 5
    """Hill ranges (height of the highest point)."""
    seas: int = 4
    """Seas the rivers flow into (at most 6)."""
    people: int = 90
    """People (birth year and town, profession, death year); mayors are drawn from them."""
    events: int = 40
    """Dated events (floods, fires, fairs, bridges, treaties), at most one per town."""
    pretrain_fact_share: float = 0.5
    """Share of the facts that the pre-training corpus states."""
    corpus_fact_share: float = 0.25
    """Share of the facts stated only in the annotation corpus; the rest only in the tools' data
    (eval_qa asks those)."""
    pretrain_docs: int = 40000
    """Documents in pretrain.jsonl."""
    note_share: float = 0.3
    """Pre-training: share of arithmetic items and dates announced by a call note at the document start."""
    earlier_share: float = 0.3
    """Pre-training: share of arithmetic items whose answer is stated earlier in prose."""
    problem_share: float = 0.3
    """Share of arithmetic items written as a word problem ending `The answer is N.`"""
    filler_share: float = 0.5
    """Chance of a sentence repeating an earlier number after each arithmetic item."""
    nonce_share: float = 0.5
    """Pre-training: share of fact documents about an entity invented for that document, with QA notes to copy from."""
    copy_share: float = 0.15
    """Pre-training: share of documents that list numbers and repeat them (they teach in-context copying)."""
    induction_share: float = 0.0
    """Pre-training: share of documents that say a run of arbitrary words, names and numbers twice."""
    copycall_share: float = 0.0
    """Pre-training: share of documents with word problems or quiz questions in scrambled wording (words dropped,
    swapped, inserted) and each one's call inline, where a tuned model writes it: a call's input that can only be
    copied from the text, not recalled from a form."""
    text_order: bool = False
    """Calls of + and * state their numbers in the order the text does (`b + a` for a form that says b first), in
    pre-training notes and gold calls, as the filter keeps them; false: always `a op b`."""
    cuecall_share: float = 0.0
    """Pre-training: share of documents with word problems of loose words around two numbers and one cue of an
    operation (a phrase only that operation's training forms use), the call inline: + and * in the text's order,
    - and / the larger number first."""
    rewrite_share: float = 0.0
    """Pre-training: share of the quiz questions of copycall documents with about half their small words replaced
    by random ones (the rest scrambled): a question no form writes, copied word for word into its call."""
    rewrite_math_share: float = 0.0
    """Pre-training: share of the word problems of copycall documents with about half their small words replaced
    by random ones, the words of the operation's cues and the object words kept (the rest scrambled): a problem no
    form writes, its numbers copied into the call."""
    noise_share: float = 0.0
    """Pre-training: share of word problems and quiz questions with 1-3 random words inserted (their wording
    becomes unpredictable, so a call that repeats it is copied, not recalled)."""
    separator_share: float = 0.25
    """Share of arithmetic items that write numbers of 1,000 and more with thousands separators."""
    heldout_forms_per_op: int = 4
    """Arithmetic forms of each operation (of 12) held out of all training text: only math_unseen uses them."""
    heldout_questions: int = 3
    """Question forms of each relation (of 8) held out of all training text: only qa_unseen uses them."""
    heldout_vocabulary: float = 0.25
    """Share of object words and first names held out of training text (half of math_unseen uses them)."""
    math_share: float = 0.55
    """Share of arithmetic documents in every corpus (after the copy documents of pre-training)."""
    quiz_share: float = 0.12
    """Share of `Question: ... Answer: ...` documents in pre-training and held-out text."""
    dated_share: float = 0.08
    """Share of documents that mention a date."""
    corpus_docs: int = 2000
    """Documents in corpus.jsonl, the pipeline's annotation corpus."""
    heldout_docs: int = 500
    """Documents in heldout.jsonl (plain text for perplexity)."""
    eval_math: int = 300
    """Word problems in each of eval_math_seen.json and eval_math_unseen.json (3-4-digit operations, the four
    operations balanced)."""
    eval_qa: int = 300
    """Questions in each of eval_qa_seen.jsonl and eval_qa_unseen.jsonl, about the facts only the tools' data
    states (each asked more than once when there are fewer)."""
    twostep_docs: int = 0
    """Annotation documents with a two-step word problem and its worked answer (`The answer is 888 + 150 =
    1038.`), appended to corpus.jsonl after the corpus_docs others; their gold calls are the two steps, the second's
    input starting with the first's result (chained calls)."""
    noisy_docs: int = 0
    """Annotation documents like the corpus's word problems, stories and quizzes, with 1-3 random words inserted
    into every problem and question (what noise_share does in pre-training), appended to corpus.jsonl after the
    two-step ones: in fine-tuning text a call that repeats them must be copied, not recalled from a form."""
    eval_twostep: int = 0
    """Two-step word problems in eval_math_twostep.json (training forms and words; SVAMP format): a first
    operation on two numbers, then a second on its result and a third number; 0 = no such file."""

    def validate(self) -> None:
        for name in ("pretrain_fact_share", "corpus_fact_share", "note_share", "earlier_share", "problem_share",
                     "filler_share", "nonce_share", "copy_share", "math_share", "quiz_share", "dated_share",
                     "induction_share", "copycall_share", "cuecall_share", "rewrite_share", "rewrite_math_share",
                     "noise_share", "separator_share", "heldout_vocabulary"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"{name}: {getattr(self, name)} is not between 0 and 1")
        if not 1 <= self.heldout_forms_per_op <= 6:
            raise ValueError(f"heldout_forms_per_op: {self.heldout_forms_per_op} is not between 1 and 6 (of 12)")
        if not 1 <= self.heldout_questions <= 4:
            raise ValueError(f"heldout_questions: {self.heldout_questions} is not between 1 and 4 (of 8)")
        for a, b in (("pretrain_fact_share", "corpus_fact_share"), ("note_share", "earlier_share"),
                     ("copy_share", "induction_share")):
            if getattr(self, a) + getattr(self, b) > 1.0:
                raise ValueError(f"{a} + {b} exceeds 1")
        if self.copy_share + self.induction_share + self.copycall_share + self.cuecall_share > 1.0:
            raise ValueError("copy_share + induction_share + copycall_share + cuecall_share exceeds 1")
        if self.math_share + self.quiz_share + self.dated_share > 1.0:
            raise ValueError("math_share + quiz_share + dated_share exceeds 1")
        if self.towns < 2 or self.rivers < 1 or self.ranges < 1 or not 1 <= self.seas <= 6 or self.people < 1:
            raise ValueError("needs at least 2 towns, 1 river, 1 range, 1-6 seas and 1 person")
        if self.events > self.towns:
            raise ValueError(f"events: {self.events} exceeds towns ({self.towns}); at most one event per town")
        if self.twostep_docs < 0 or self.eval_twostep < 0 or self.noisy_docs < 0:
            raise ValueError("twostep_docs, noisy_docs and eval_twostep must be 0 or more")


# World fields that shape only the annotation corpus (documents appended after the corpus_docs others) and the
# evaluation sets, never pretrain.jsonl nor what the tokenizer and probes read: `pretrain_key` leaves them out, so
# adding one keeps the shipped base model valid (`use_shipped` still checks the sha256 of pretrain.jsonl).
WORLD_FIELDS_NOT_IN_PRETRAINING = ("twostep_docs", "noisy_docs", "eval_twostep")


@dataclass
class PretrainConfig:
    output_dir: str = ""
    """Folder of the pre-trained base model and its tokenizer; empty = RUN_DIR/base-model."""
    arch: str = "llama"
    """llama (rotary positions: copying appears sooner here) or gpt2 (learned positions)."""
    vocab_size: int = 900
    """BPE vocabulary trained on the world's texts (one token per digit)."""
    digits_apart: bool = False
    """The space before a digit is a token of its own, never part of the digit's: a number is the same tokens
    in the text and after ``(`` in a call (the first operand a model copies into a call)."""
    hidden: int = 128
    """Width of the model."""
    layers: int = 3
    """Transformer blocks."""
    heads: int = 4
    """Attention heads per block."""
    positions: int = 128
    """Longest sequence the model accepts, in tokens (the annotation documents are shorter)."""
    seq_len: int = 128
    """Length of the packed training sequences, in tokens (each starts with BOS)."""
    packing: str = "stream"
    """stream: documents back to back, each after BOS, rows cut anywhere (no padding); whole: a document that
    fits a row is never split (rows padded: `toolformer pretrain` prints how much)."""
    batch_size: int = 32
    """Sequences per optimizer step."""
    max_steps: int = 3000
    """Optimizer steps (copying from a prefix appears between steps 1,500 and 1,750 of 32x128 tokens)."""
    learning_rate: float = 3e-3
    """Peak learning rate, cosine decay after warm-up."""
    warmup_ratio: float = 0.05
    """Share of steps with linear warm-up."""
    weight_decay: float = 0.1
    """AdamW weight decay."""
    eval_every: int = 250
    """Dev loss every this many steps."""
    dev_docs: int = 400
    """Pre-training documents held out for the dev loss."""
    threads: int = 1
    """torch CPU threads; 0 = one per core (a tiny model gains little from two, and stalls when a core is busy)."""
    probe_items: int = 200
    """Items of each copy probe (Calculator, QA) and of the base model's eval_math check; 0 = no probe."""
    shipped: str = "data/world-base"
    """A base model `toolformer pretrain` made, copied instead of training when its pretrain.json records this
    config's key and max_steps and its weights hash checks out; empty = always train."""

    def validate(self) -> None:
        if self.arch not in ("gpt2", "llama"):
            raise ValueError(f"arch: {self.arch!r} is not one of gpt2, llama")
        if self.hidden % self.heads:
            raise ValueError(f"hidden: {self.hidden} is not a multiple of heads ({self.heads})")
        if self.packing not in ("stream", "whole"):
            raise ValueError(f"packing: {self.packing!r} is not one of stream, whole")
        if self.seq_len > self.positions:
            raise ValueError(f"seq_len: {self.seq_len} exceeds positions ({self.positions})")


@dataclass
class DemoConfig:
    math_prompt: str = "{question} The answer is"
    """Prompt template of the small world's arithmetic evaluation set."""
    qa_prompt: str = "Question: {question} Answer:"
    """Prompt template of the small world's QA evaluation set."""
    plain_from_pretraining: bool = True
    """Let the build stage's plain mix draw from the world's pre-training text too (build.plain_path): the paper's
    C* is pre-training-like text with sparse calls, while the annotation corpus has a call in most documents."""
    max_calls_row: int = 2
    """Also evaluate the tuned model with at most this many calls per item, as the row `toolformer_<n>calls` (a
    later call may copy an earlier call's result from the text); 0 = no such row. The `toolformer` row keeps
    evaluate.max_calls."""
    twostep_max_new_tokens: int = 56
    """Tokens generated per item of math_twostep (world.eval_twostep): two calls and a worked answer take about 45."""
    rounds: int = 1
    """Rounds of self-training (`toolformer demo --rounds 2`). Round 2 samples calls with the round-1 model (the
    paper's sampler, sample.prompt none: p(call-start) from the text alone, the paper's tau_s, k and m), executes
    them, filters them, and fine-tunes the base model on them, in RUN_DIR/round2 (one folder per judge). Round 2
    runs no chain round (chain.rounds 1): that would be a second sampling pass over every document with a call."""
    round2_filters: list[str] = field(default_factory=lambda: ["base", "round1"])
    """Models whose losses judge round 2's calls, one tuned model and one table row each: `base` (the paper's
    filter; row toolformer_round2) and/or `round1` (the round-1 model; row toolformer_round2_judged_by_round1)."""

    def validate(self) -> None:
        if self.max_calls_row < 0 or self.twostep_max_new_tokens < 1:
            raise ValueError("max_calls_row must be 0 or more and twostep_max_new_tokens at least 1")
        if self.rounds not in (1, 2):
            raise ValueError(f"rounds: {self.rounds} is not 1 or 2")
        bad = [f for f in self.round2_filters if f not in ("base", "round1")]
        if bad or not self.round2_filters or len(set(self.round2_filters)) < len(self.round2_filters):
            raise ValueError(f"round2_filters: {self.round2_filters} must list base and/or round1, each once")


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
    demo: DemoConfig = field(default_factory=DemoConfig)
    world: WorldConfig = field(default_factory=WorldConfig)
    pretrain: PretrainConfig = field(default_factory=PretrainConfig)

    def validate(self) -> None:
        for s in self.stages:
            if s not in STAGES:
                raise ValueError(f"stages: unknown stage {s!r} (known: {', '.join(STAGES)})")
