"""Stage ``build``: the augmented data set C* (Schick et al., 2023, §2).

Every call the filter kept goes back into its document **inline**, at the
character offset where it was proposed: x* = x_1..x_{i-1}, e(c, r), x_i..x_n.
Several calls per document and several tools are merged into one data set,
with the calls the chain stage kept in later rounds (``chain.rounds``).

Choices, in order:

1. Calls competing for one position (same ``doc_id`` and ``char_start``): the
   one with the largest margin L⁻ − L⁺ wins (ties: the first in filter order).
2. Per tool at most ``build.max_per_tool`` calls, the highest margins first.
3. Documents left without a call are dropped (``build.drop_without_calls``),
   except ``build.plain_ratio`` plain documents per augmented one, drawn with
   the run's seed from them and the documents of ``build.plain_path``;
   ``drop_without_calls: false`` keeps all of them.

Writes ``RUN_DIR/build/dataset`` (``datasets.save_to_disk``; columns ``text``,
``doc_id``, ``augmented``, ``calls`` as a JSON list), ``augmented.jsonl`` to
read by eye, and the manifest last. The stage is quick, so an interrupted run
simply starts over; every output is written to a temporary name and renamed.
"""

from __future__ import annotations

import json
import os
import random
import shutil
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tqdm import tqdm

from toolformer.config.schema import PipelineConfig
from toolformer.corpus.records import (
    KEPT_REQUIRED,
    CallProvenance,
    DatasetRow,
    fields,
    read_records,
    scored_margin,
    type_name,
)
from toolformer.rundir.files import atomic_write_text, disk_full, disk_full_error, dumps, iter_jsonl
from toolformer.rundir.folder import StageFolder, read_documents
from toolformer.rundir.sharding import fault_point
from toolformer.stages import StageResult, stage_options, start
from toolformer.tools.calls import insert_calls

DATASET = "dataset"
AUGMENTED = "augmented.jsonl"


def read_kept(filter_dir: Path) -> list[dict]:
    """Kept records of every filter shard, in order; a malformed line, a field of another type than a filter
    record's (:func:`~toolformer.corpus.records.check_record`) or a kept record without a required key is an
    error naming the shard and line."""
    kept: list[dict] = []
    shards = sorted(filter_dir.glob("shard-*.jsonl"))
    for shard in tqdm(shards, desc="build: read filter shards", unit="shard", disable=len(shards) < 2):
        for line_no, record in read_records(shard, "filter", complete=False):
            if not record.get("kept"):
                continue
            for key in KEPT_REQUIRED:
                if record.get(key) is None:
                    raise ValueError(f"{shard}:{line_no}: kept record has no {key!r}")
            record["_where"] = f"{shard.name}:{line_no}"
            kept.append(record)
    return kept


def round_name(r: int) -> str:
    """The folder of round ``r`` of the chain stage, in ``RUN_DIR/chain``."""
    return f"round-{r}"


def chained_kept(cfg: PipelineConfig) -> list[dict]:
    """The kept records of the chain stage's rounds 2..``chain.rounds`` (their ``char_start`` already in the
    original text); the stage must have finished when there are such rounds."""
    if cfg.chain.rounds < 2:
        return []
    chain = StageFolder(cfg.run_dir, "chain")
    chain.require(" (toolformer chain: chain.rounds > 1)")
    return [r for n in range(2, cfg.chain.rounds + 1) for r in read_kept(chain.dir / round_name(n))]


def best_per_position(kept: list[dict]) -> tuple[list[dict], int]:
    """One call per (doc_id, char_start): the largest margin. Returns the
    winners (in filter order) and how many competing calls lost."""
    best: dict[tuple[str, int], dict] = {}
    for r in kept:
        key = (str(r["doc_id"]), int(r["char_start"]))
        if key not in best or scored_margin(r) > scored_margin(best[key]):
            best[key] = r
    winners = {id(r) for r in best.values()}
    return [r for r in kept if id(r) in winners], len(kept) - len(best)


def cap_per_tool(calls: list[dict], max_per_tool: int) -> tuple[list[dict], dict[str, int]]:
    """At most ``max_per_tool`` calls per tool, highest margins first (0 = no
    cap). Returns the calls kept (in their order) and the number capped per tool."""
    if not max_per_tool:
        return calls, {}
    by_tool: dict[str, list[dict]] = {}
    for r in calls:
        by_tool.setdefault(r["tool"], []).append(r)
    keep: set[int] = set()
    capped: dict[str, int] = {}
    for tool, rs in by_tool.items():
        ranked = sorted(rs, key=scored_margin, reverse=True)  # stable: ties keep filter order
        keep.update(id(r) for r in ranked[:max_per_tool])
        if len(rs) > max_per_tool:
            capped[tool] = len(rs) - max_per_tool
    return [r for r in calls if id(r) in keep], capped


def call_provenance(r: dict) -> CallProvenance:
    return CallProvenance(tool=r["tool"], input=r["input"], result=r["result"], char_start=int(r["char_start"]),
                          loss_minus=r["loss_minus"], loss_plus=r["loss_plus"])


def augment(doc: dict, calls: list[dict], separator: str) -> DatasetRow:
    """The document with its calls inline, as a data set row."""
    calls = sorted(calls, key=lambda r: int(r["char_start"]))
    text = insert_calls(doc["text"], [(int(r["char_start"]), r["call_text"]) for r in calls], separator=separator)
    return DatasetRow(text=text, doc_id=str(doc["doc_id"]), augmented=True,
                      calls=json.dumps([call_provenance(r) for r in calls], ensure_ascii=False))


def plain(doc: dict) -> DatasetRow:
    return DatasetRow(text=doc["text"], doc_id=str(doc["doc_id"]), augmented=False, calls="[]")


def read_plain(path: str) -> list[dict]:
    """The documents of ``build.plain_path``: id ``plain:<line>`` unless the line has an ``id``."""
    docs = []
    for n, rec in iter_jsonl(path):
        if not isinstance(rec.get("text"), str) or not rec["text"].strip():
            raise ValueError(f"{path}:{n}: build.plain_path: no non-empty 'text' field")
        docs.append({"doc_id": str(rec.get("id", f"plain:{n}")), "text": rec["text"]})
    return docs


def choose_plain(pool: list[dict], n_augmented: int, cfg: PipelineConfig) -> list[dict]:
    """Documents without calls to keep: all of them, or ``plain_ratio`` per
    augmented one drawn with the seed (in corpus order)."""
    if not cfg.build.drop_without_calls:
        return pool
    n = min(len(pool), round(cfg.build.plain_ratio * n_augmented))
    chosen = sorted(random.Random(cfg.seed).sample(range(len(pool)), n))
    return [pool[i] for i in chosen]


def save_dataset(rows: Sequence[Mapping[str, object]], out: Path) -> None:
    """``save_to_disk`` into a temporary folder, then rename it into place."""
    from datasets import Dataset, Features, Value

    features = Features({name: Value(type_name(tp)) for name, (tp, _) in fields(DatasetRow).items()})
    columns = {name: [r[name] for r in rows] for name in features}
    # Not `.name.tmp-*`: StageFolder.begin unlinks those as files, and this is a folder.
    tmp = out.with_name(f"_{out.name}-tmp-{os.getpid()}")
    if tmp.exists():
        shutil.rmtree(tmp)
    try:
        Dataset.from_dict(columns, features=features).save_to_disk(str(tmp))
    except Exception as e:
        shutil.rmtree(tmp, ignore_errors=True)  # nothing partial is left (a full disk)
        if disk_full(e):
            raise disk_full_error(out) from e
        raise
    if out.exists():
        shutil.rmtree(out)
    os.replace(tmp, out)


def run_stage(cfg: PipelineConfig, force: bool = False, **options: Any) -> StageResult:
    """Write the augmented data set C* (see the module docstring); the stage takes no ``options``."""
    stage_options("build", options)
    plain = {"build.plain_path": cfg.build.plain_path} if cfg.build.plain_path else None
    run = start(cfg, "build", force, inputs=plain)  # plain documents rewritten under their path: built again
    if run.skipped:
        return run.result()
    filter_stage = StageFolder(cfg.run_dir, "filter")
    filter_stage.require(" (build reads the calls it kept)")
    for stale in run.stage.dir.glob("_*-tmp-*"):
        shutil.rmtree(stale, ignore_errors=True)  # a half-written data set of an interrupted run

    docs = read_documents(cfg.run_dir)
    docs_by_id = {str(k): d for k, d in docs.items()}
    kept = read_kept(filter_stage.dir)
    n_first = len(kept)
    kept += chained_kept(cfg)

    valid, rejected = check_positions(kept, docs_by_id)
    winners, n_competing = best_per_position(valid)
    calls, capped = cap_per_tool(winners, cfg.build.max_per_tool)

    augmented_rows, rows = dataset_rows(cfg, docs_by_id, calls)
    save_dataset(rows, run.stage.dir / DATASET)
    fault_point("build", 1)  # kill-and-resume tests: dies with the data set written, manifest not
    by_eye = ({"doc_id": r["doc_id"], "calls": json.loads(r["calls"]), "text": r["text"]} for r in augmented_rows)
    atomic_write_text(run.stage.dir / AUGMENTED, "".join(dumps(r) + "\n" for r in by_eye))
    run.stage.write_rejected(rejected)

    per_tool = Counter(r["tool"] for r in calls)
    counts = {
        "documents": len(rows),
        "augmented": len(augmented_rows),
        "plain": len(rows) - len(augmented_rows),
        "calls": len(calls),
        "per_tool": {tool: {"kept": n, "inserted": per_tool.get(tool, 0), "capped": capped.get(tool, 0)}
                     for tool, n in sorted(Counter(r["tool"] for r in valid).items())},
        "competing_dropped": n_competing,
        "kept_in_later_rounds": len(kept) - n_first,
        "rejected": len(rejected),
    }
    run.stage.finish(run.hash, cfg.seed, counts, dataset=str(run.stage.dir / DATASET))

    print(summary_line(counts, per_tool, capped))
    return run.result()


def check_positions(kept: list[dict], docs_by_id: dict[str, dict]) -> tuple[list[dict], list[dict]]:
    """(kept calls whose document and offset exist, rejected records with the reason)."""
    rejected: list[dict] = []
    valid: list[dict] = []
    for r in kept:
        doc = docs_by_id.get(str(r["doc_id"]))
        if doc is None:
            rejected.append({"where": r["_where"], "doc_id": r["doc_id"],
                             "reason": "doc_id not in sample/documents.jsonl"})
        elif not 0 <= int(r["char_start"]) <= len(doc["text"]):
            rejected.append({"where": r["_where"], "doc_id": r["doc_id"],
                             "reason": f"char_start {r['char_start']} outside text of length {len(doc['text'])}"})
        else:
            valid.append(r)
    return valid, rejected


def dataset_rows(cfg: PipelineConfig, docs_by_id: dict[str, dict],
                 calls: list[dict]) -> tuple[list[DatasetRow], list[DatasetRow]]:
    """(the augmented rows, every row of the data set): the documents with
    calls inline and plain ones mixed in (``build.plain_ratio``), in corpus
    order, then the chosen documents of ``build.plain_path``."""
    calls_by_doc: dict[str, list[dict]] = {}
    for r in calls:
        calls_by_doc.setdefault(str(r["doc_id"]), []).append(r)
    augmented_rows: list[DatasetRow] = []
    pool: list[dict] = []
    bar = tqdm(docs_by_id.items(), desc="build: insert calls", unit="doc", disable=len(docs_by_id) < 1000)
    for doc_id, doc in bar:
        if doc_id in calls_by_doc:
            augmented_rows.append(augment(doc, calls_by_doc[doc_id], cfg.calls.separator))
        else:
            pool.append(doc)
    extra = read_plain(cfg.build.plain_path) if cfg.build.plain_path else []
    clash = next((d["doc_id"] for d in extra if d["doc_id"] in docs_by_id), None)
    if clash is not None:
        raise ValueError(f"{cfg.build.plain_path}: id {clash!r} is also a corpus document id")
    chosen = {str(d["doc_id"]): d for d in choose_plain(pool + extra, len(augmented_rows), cfg)}
    aug_by_id = {r["doc_id"]: r for r in augmented_rows}
    # Corpus order, augmented and plain documents interleaved as they come; then the chosen extra ones.
    rows = [aug_by_id[i] if i in aug_by_id else plain(docs_by_id[i])
            for i in docs_by_id if i in aug_by_id or i in chosen]
    rows += [plain(d) for d in extra if d["doc_id"] in chosen]
    return augmented_rows, rows


def summary_line(counts: dict, per_tool: Counter, capped: dict[str, int]) -> str:
    tools = ", ".join(f"{t} {n:,}" for t, n in per_tool.most_common())
    line = (f"build: {counts['augmented']:,} augmented documents with {counts['calls']:,} calls"
            f"{f' ({tools})' if tools else ''}; {counts['plain']:,} plain mixed in")
    if counts["competing_dropped"] or capped or counts["rejected"]:
        extra = [f"{counts['competing_dropped']:,} competing calls dropped"] if counts["competing_dropped"] else []
        extra += [f"{sum(capped.values()):,} over max_per_tool"] if capped else []
        extra += [f"{counts['rejected']:,} rejected (build/rejected.jsonl)"] if counts["rejected"] else []
        line += "; " + ", ".join(extra)
    return line
