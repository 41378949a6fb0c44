"""``toolformer export RUN_DIR --format trl-sft|trl-dpo``: the run as the data sets TRL's trainers read.

Each format is written to a folder (default ``RUN_DIR/export/<format>/``, or ``--out``) holding the same rows
twice: ``data.jsonl`` (``datasets.load_dataset("json", data_files=...)``) and ``dataset/``
(``Dataset.save_to_disk``, for ``datasets.load_from_disk``). The folder is written beside its place under a
temporary name and renamed into it; a folder already there is replaced only when it holds nothing but an earlier
export's two entries, and no output may lie inside a stage folder the export reads.

``trl-sft``: TRL's conversational language-modeling type with tools, one row per row of the built data set
(``RUN_DIR/build/dataset``, cut into text and calls as :mod:`toolformer.inspect.export` cuts it, rows that cannot be
exported skipped and counted by reason): ``{"messages", "tools"}``. ``messages`` opens with the user turn
:data:`~toolformer.inspect.chatformats.USER_TURN`; each call is an assistant message whose ``content`` is the text
before the call (``""`` when none) and whose ``tool_calls`` is ``[{"type": "function", "function": {"name",
"arguments"}}]`` with the arguments as a JSON object checked against the tool's schema, answered by ``{"role":
"tool", "name", "content": result}``; an assistant message with the rest of the text ends it. This is the message
shape of the transformers chat templates (``apply_chat_template(messages, tools=tools)``) and of TRL's tool-calling
data sets. The document is the assistant's own text, not a user turn to answer: the model is trained to write the
text and to stop it with a call exactly where the filter found that the call's result helps predict what follows,
then to go on from the result, which is what the Toolformer data teaches. Cutting the document into a user prompt
and a reply would teach a call only at the start of a reply. ``tools`` is the same on every row: the OpenAI function
entries (``{"type": "function", "function": {"name", "description", "parameters"}}``, names as
:func:`~toolformer.inspect.chatformats.wire_name` writes them) of every tool the run offers
(:func:`~toolformer.inspect.export.offered_tools`), so rows without a call teach when not to call while the tools
are on offer, and the list never tells which rows call. The folder carries ``chat_template.jinja``
(:mod:`toolformer.inspect.chattemplate`), which renders each row as the run's text with its calls inline after a
header of the tools; the summary says how many tokens that header takes with the run's tokenizer. A model's own
template that drops an assistant message's ``content`` when it has ``tool_calls`` loses the text before each call.
``dataset/`` stores ``messages`` and ``tools`` as ``List(Json())`` (datasets 4.8 and later), so every message and
argument object reads back exactly as written; with an older ``datasets`` Arrow infers the columns and the keys a
message lacks read back as null, which transformers and TRL drop.

``trl-dpo``: TRL's standard (plain string) preference type, ``{"prompt", "chosen", "rejected"}``, made from
the filter stage's judgements (``RUN_DIR/filter`` shards, every candidate with ``kept`` and its losses, checked
against the stage's manifest) and the documents of ``RUN_DIR/sample``. At each position (document, character
offset) where the filter kept a call: ``prompt`` is the document's text before the position; ``chosen`` is the
kept call with the largest margin L⁻ − L⁺ (the one ``build`` inserts there) followed by the rest of the text;
``rejected`` is, once per candidate the filter rejected at that position, that call followed by the same rest,
or, when no rejected candidate with a result is there, the rest without a call. Each call is written e(c, r) in
the run's call style followed by its separator, as ``build`` inserts it, so ``prompt + chosen`` and ``prompt +
rejected`` are the document with that one call inserted: the two differ only from the position on, as the
filter compared them (it scored each candidate alone in the plain text, hence no other call is in the prompt).
The continuation is the rest of the document: documents are already the sample stage's windows of the model's
context, and a trainer's ``max_length`` cuts further. Beside the three strings each row has ``kind`` (``rejected
call`` or ``no call``), ``doc_id``, ``position`` (token index), ``char_start``, ``tool`` and ``chosen_margin``,
``rejected_tool`` and ``rejected_margin`` (null for no call; an upper bound, L(ε) − L⁺, where the filter left
L(e(c, ε)) out). Candidates in no pair are counted by reason: no kept
call at their position, a kept call with a smaller margin than the chosen one, a rejected call that returned no
result (it has no text to show) or that writes exactly as the chosen one, an unknown document or a position
outside its text. Only the filter's first round is read (not the chain stage's later rounds).
"""

from __future__ import annotations

import os
import shutil
from collections import Counter
from pathlib import Path

from toolformer.config.schema import PipelineConfig
from toolformer.corpus.records import margin
from toolformer.inspect.chatformats import USER_TURN, ToolInfo, offered, turns
from toolformer.inspect.chattemplate import TEMPLATE_FILE, chat_template, header_tokens
from toolformer.inspect.export import (
    count_clause,
    exported_segments,
    finished_counts,
    new_counts,
    offered_tools,
    open_dataset,
    summary_line,
)
from toolformer.inspect.view import run_config
from toolformer.rundir.files import disk_full, disk_full_error, dumps, iter_jsonl
from toolformer.rundir.folder import StageFolder, read_documents
from toolformer.tools import close_tools
from toolformer.tools.calls import CallStyle, get_style

FORMATS = ("trl-sft", "trl-dpo")
DATA = "data.jsonl"
DATASET = "dataset"
READ_STAGES = ("sample", "filter", "build")  # the stage folders an export reads: no output goes inside them
REJECTED_CALL, NO_CALL = "rejected call", "no call"  # the kinds of preference pairs


def export_trl(cfg: PipelineConfig, fmt: str, out: str | Path | None = None, kept_only: bool = False) -> dict:
    """Write ``fmt`` (:data:`FORMATS`) of the run in ``cfg.run_dir`` to its folder; return the counts."""
    if fmt == "trl-sft":
        return export_sft(cfg, out, kept_only)
    if fmt == "trl-dpo":
        if kept_only:
            raise ValueError("--kept-only: trl-dpo pairs are made at kept calls only anyway; leave the option out")
        return export_dpo(cfg, out)
    raise ValueError(f"format: {fmt!r} is not one of {', '.join(FORMATS)}")


def saved_config(cfg: PipelineConfig) -> PipelineConfig:
    """The run's saved config (call style, separator, tools), else ``cfg``; a saved one that cannot be read is noted."""
    run_cfg, note = run_config(cfg)
    if note:
        print(f"export: {note}")
    return run_cfg


# -- the output folder -------------------------------------------------------------------------------------
def output_folder(run_dir: Path, fmt: str, out: str | Path | None) -> Path:
    """The folder to write (``--out`` or ``RUN_DIR/export/FORMAT``), refused where writing it would lose data."""
    path = Path(out) if out else run_dir / "export" / fmt
    if path.exists() and not path.is_dir():
        raise ValueError(f"--out {path} is a file; name a folder (the export writes {DATA} and {DATASET}/ in it)")
    resolved = path.resolve()
    for name in READ_STAGES:
        stage = (run_dir / name).resolve()
        if resolved == stage or stage in resolved.parents:
            raise ValueError(f"--out {path} lies inside {stage}, which export reads; choose another folder")
    if path.is_dir():
        other = sorted(p.name for p in path.iterdir() if p.name not in (DATA, DATASET, TEMPLATE_FILE))
        if other:
            raise ValueError(f"--out {path} holds other files ({', '.join(other[:5])}); name a new or empty folder, "
                             f"or one an earlier {fmt} export wrote")
    return path


def write_folder(path: Path, rows: list[dict], features, files: dict[str, str] | None = None) -> None:
    """``rows`` as ``path/data.jsonl`` and ``path/dataset`` (save_to_disk), and ``files`` (name -> text), written
    under a temporary name and renamed into place (an earlier export there is replaced)."""
    from datasets import Dataset

    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    old = path.with_name(f".{path.name}.old-{os.getpid()}")
    for stale in (tmp, old):
        if stale.exists():
            shutil.rmtree(stale)
    try:
        tmp.mkdir(parents=True)
        with (tmp / DATA).open("w", encoding="utf-8") as f:
            for row in rows:
                f.write(dumps(row) + "\n")
        Dataset.from_list(rows, features=features).save_to_disk(str(tmp / DATASET))
        for name, text in (files or {}).items():
            (tmp / name).write_text(text, encoding="utf-8")
    except BaseException as e:
        shutil.rmtree(tmp, ignore_errors=True)  # nothing partial is left (a full disk, an interrupt)
        if disk_full(e):
            raise disk_full_error(path) from e
        raise
    if path.exists():
        os.replace(path, old)
    os.replace(tmp, path)
    shutil.rmtree(old, ignore_errors=True)


# -- trl-sft -----------------------------------------------------------------------------------------------
def sft_features():
    """``messages`` and ``tools`` as lists of JSON objects (None with a ``datasets`` older than 4.8: inferred)."""
    from datasets import Features

    try:
        from datasets import Json, List
    except ImportError:
        return None
    return Features({"messages": List(Json()), "tools": List(Json())})


def sft_record(segs: list[dict], tools: dict[str, ToolInfo], catalogue: list[dict]) -> dict:
    """One row's segments as a TRL conversation with tools."""
    messages: list[dict] = [{"role": "user", "content": USER_TURN}]
    for text, call in turns(segs):
        if call is None:
            messages.append({"role": "assistant", "content": text})
            continue
        wire = tools[call["tool"]].wire
        messages.append({"role": "assistant", "content": text, "tool_calls": [
            {"type": "function", "function": {"name": wire, "arguments": call["arguments"]}}]})
        messages.append({"role": "tool", "name": wire, "content": call["result"]})
    return {"messages": messages, "tools": catalogue}


def export_sft(cfg: PipelineConfig, out: str | Path | None, kept_only: bool) -> dict:
    run_dir = Path(cfg.run_dir)
    ds = open_dataset(run_dir)
    path = output_folder(run_dir, "trl-sft", out)
    run_cfg = saved_config(cfg)
    style, separator = get_style(run_cfg.calls.style), run_cfg.calls.separator
    tools, problems = offered_tools(ds, run_cfg)
    catalogue = offered(tools, "openai")
    counts = new_counts(len(ds))
    try:
        rows = [sft_record(segs, tools, catalogue) for _, segs in
                exported_segments(ds, "trl-sft", style, separator, tools, problems, kept_only, counts)]
    finally:
        close_tools({name: info.tool for name, info in tools.items()})
    template = chat_template(style, separator)
    write_folder(path, rows, sft_features(), {TEMPLATE_FILE: template})
    tokenizer = run_cfg.model.tokenizer or run_cfg.model.path
    counts = {**finished_counts(counts, "trl-sft", path), "chat_template": str(path / TEMPLATE_FILE),
              "header_tokens": header_tokens(template, catalogue, tokenizer)}
    tokens = (f"its tools header takes {counts['header_tokens']:,} tokens of every row ({tokenizer})"
              if counts["header_tokens"] is not None else "no local tokenizer to count its tools header with")
    print(f"export: chat template: SFTConfig(chat_template_path={counts['chat_template']!r}) writes each row as the "
          f"run's text, calls inline; {tokens}")
    print(summary_line(counts, kept_only))
    return counts


# -- trl-dpo -----------------------------------------------------------------------------------------------
def dpo_features():
    from datasets import Features, Value

    strings = ("prompt", "chosen", "rejected", "kind", "doc_id")
    return Features({**{k: Value("string") for k in strings}, "position": Value("int64"),
                     "char_start": Value("int64"), "tool": Value("string"), "chosen_margin": Value("float64"),
                     "rejected_tool": Value("string"), "rejected_margin": Value("float64")})


def rounded_margin(record: dict) -> float | None:
    m = margin(record)
    return None if m is None else round(m, 6)


class Pairs:
    """The preference pairs of a run's filter records, position by position, and the candidates left out."""

    def __init__(self, style: CallStyle, separator: str):
        self.style, self.separator = style, separator
        self.rows: list[dict] = []
        self.candidates = self.positions = 0
        self.kinds: Counter = Counter({REJECTED_CALL: 0, NO_CALL: 0})
        self.per_tool: Counter = Counter()
        self.unpaired: Counter = Counter()

    def call(self, record: dict) -> str:
        """e(c, r) in the run's style and the separator after it, as ``build`` inserts a call."""
        return self.style.render(record["tool"], record["input"], record["result"]) + self.separator

    def add_shard(self, shard: Path, docs: dict[str, dict]) -> None:
        """The candidates of one filter shard (a document's candidates all lie in one shard), by position."""
        groups: dict[tuple[str, int], list[dict]] = {}
        for _, record in iter_jsonl(shard):
            self.candidates += 1
            groups.setdefault((str(record["doc_id"]), int(record["char_start"])), []).append(record)
        for (doc_id, at), records in groups.items():
            doc = docs.get(doc_id)
            if doc is None:
                self.unpaired["unknown document"] += len(records)
            elif not 0 <= at <= len(doc["text"]):
                self.unpaired["position outside the text"] += len(records)
            else:
                self.add_position(doc_id, doc["text"], at, records)

    def add_position(self, doc_id: str, text: str, at: int, records: list[dict]) -> None:
        kept = [r for r in records if r.get("kept") and r.get("result") is not None and margin(r) is not None]
        if not kept:
            self.unpaired["no kept call at its position"] += len(records)
            return
        chosen = kept[0]
        for r in kept[1:]:  # the largest margin; ties: the first in filter order (as build chooses)
            if margin(r) > margin(chosen):  # type: ignore[operator]
                chosen = r
        self.positions += 1
        self.per_tool[chosen["tool"]] += 1
        rest, chosen_call = text[at:], self.call(chosen)
        base = {"prompt": text[:at], "chosen": chosen_call + rest, "doc_id": doc_id,
                "position": int(chosen["position"]), "char_start": at, "tool": chosen["tool"],
                "chosen_margin": rounded_margin(chosen)}
        paired, usable = 0, {id(r) for r in kept}
        for r in records:
            if r is chosen:
                continue
            if r.get("kept"):
                self.unpaired["kept, smaller margin than the chosen call" if id(r) in usable
                               else "kept without a result or losses"] += 1
            elif r.get("result") is None:
                self.unpaired["rejected without a result"] += 1
            elif self.call(r) == chosen_call:
                self.unpaired["rejected, written as the chosen call"] += 1
            else:
                self.add(base, REJECTED_CALL, self.call(r) + rest, r["tool"], rounded_margin(r))
                paired += 1
        if not paired:
            self.add(base, NO_CALL, rest, None, None)

    def add(self, base: dict, kind: str, rejected: str, tool: str | None, rejected_margin: float | None) -> None:
        self.rows.append({"prompt": base["prompt"], "chosen": base["chosen"], "rejected": rejected, "kind": kind,
                          **base, "rejected_tool": tool, "rejected_margin": rejected_margin})
        self.kinds[kind] += 1

    def counts(self, path: Path) -> dict:
        return {"candidates": self.candidates, "positions": self.positions, "pairs": len(self.rows),
                "pairs_by_kind": dict(self.kinds), "per_tool": dict(self.per_tool.most_common()),
                "unpaired": dict(self.unpaired.most_common()), "format": "trl-dpo", "output": str(path)}


def export_dpo(cfg: PipelineConfig, out: str | Path | None) -> dict:
    run_dir = Path(cfg.run_dir)
    if not run_dir.is_dir():
        raise FileNotFoundError(f"{run_dir}: no such run folder")
    stage = StageFolder(run_dir, "filter")
    stage.require(" (toolformer filter: trl-dpo pairs the calls it kept with those it rejected)")
    docs = {str(doc_id): doc for doc_id, doc in read_documents(run_dir).items()}
    path = output_folder(run_dir, "trl-dpo", out)
    run_cfg = saved_config(cfg)
    pairs = Pairs(get_style(run_cfg.calls.style), run_cfg.calls.separator)
    for shard in stage.shards():
        pairs.add_shard(shard, docs)
    write_folder(path, pairs.rows, dpo_features())
    counts = pairs.counts(path)
    print(dpo_summary(counts))
    return counts


def dpo_summary(counts: dict) -> str:
    kinds = counts["pairs_by_kind"]
    tools = ", ".join(f"{t} {n:,}" for t, n in counts["per_tool"].items())
    line = (f"export: {counts['candidates']:,} filter candidates; {counts['positions']:,} positions with a kept call "
            f"give {counts['pairs']:,} pairs ({kinds[REJECTED_CALL]:,} vs a rejected call, {kinds[NO_CALL]:,} vs no "
            f"call){f'; chosen calls: {tools}' if tools else ''}")
    return f"{line}{count_clause('candidates in no pair', counts['unpaired'])} -> {counts['output']}"
