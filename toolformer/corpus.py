"""Reading a corpus into documents ``{"doc_id", "text", "date"}`` and windows.

Local JSONL is read line by line so a bad line is rejected with its file and
line number instead of failing the whole corpus; Parquet, CSV, text files and
hub data sets go through ``datasets.load_dataset``. A document longer than
the window is split into windows (``<id>#w<k>``), never dropped or cut.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from toolformer.config import CorpusConfig

_SUFFIX_FORMAT = {".jsonl": "json", ".json": "json", ".parquet": "parquet", ".txt": "text", ".csv": "csv"}


@dataclass
class Corpus:
    documents: list[dict]
    rejected: list[dict] = field(default_factory=list)  # {"source", "line", "reason", "raw"}


def _format(cfg: CorpusConfig, path: Path) -> str:
    if cfg.format != "auto":
        return cfg.format
    if path.is_dir():
        suffixes = {p.suffix for p in path.iterdir() if p.is_file()}
        for s, f in _SUFFIX_FORMAT.items():
            if s in suffixes:
                return f
        raise ValueError(f"{path}: no .jsonl/.parquet/.txt/.csv files in folder")
    if path.exists():
        return _SUFFIX_FORMAT.get(path.suffix, "text")
    return "hub"


def _normalise(row: dict, cfg: CorpusConfig, fallback_id: str, where: str, rejected: list, seen: set) -> dict | None:
    text = row.get(cfg.text_field)
    if not isinstance(text, str):
        reason = f"missing text field {cfg.text_field!r}" if text is None else f"field {cfg.text_field!r} is not a string"
        rejected.append({"source": where, "reason": reason, "raw": str(row)[:500]})
        return None
    if not text.strip():
        rejected.append({"source": where, "reason": "empty text", "raw": str(row)[:500]})
        return None
    doc_id = row.get(cfg.id_field)
    doc_id = fallback_id if doc_id is None else str(doc_id)
    if doc_id in seen:
        rejected.append({"source": where, "reason": f"duplicate id {doc_id!r}", "raw": str(row)[:500]})
        return None
    seen.add(doc_id)
    date = row.get(cfg.date_field)
    return {"doc_id": doc_id, "text": text, "date": str(date) if date not in (None, "") else None}


def _read_jsonl(path: Path, cfg: CorpusConfig, rejected: list, seen: set, limit: int) -> list[dict]:
    docs = []
    files = sorted(path.glob("*.jsonl")) if path.is_dir() else [path]
    for file in files:
        with file.open("rb") as f:
            for n, raw in enumerate(f, 1):
                where = f"{file}:{n}"
                try:
                    line = raw.decode("utf-8")
                except UnicodeDecodeError as e:
                    rejected.append({"source": where, "reason": f"not UTF-8 ({e.reason} at byte {e.start})",
                                     "raw": raw[:200].decode("utf-8", "replace")})
                    continue
                if not line.strip():
                    continue  # blank lines are not records
                try:
                    row = json.loads(line)
                except json.JSONDecodeError as e:
                    rejected.append({"source": where, "reason": f"invalid JSON: {e.msg}", "raw": line[:500]})
                    continue
                if not isinstance(row, dict):
                    rejected.append({"source": where, "reason": "not a JSON object", "raw": line[:500]})
                    continue
                doc = _normalise(row, cfg, f"{file.stem}-{n}", where, rejected, seen)
                if doc is not None:
                    docs.append(doc)
                    if limit and len(docs) >= limit:
                        return docs
    return docs


def read_corpus(cfg: CorpusConfig) -> Corpus:
    """All documents of the corpus, in order, plus the rejected records."""
    path = Path(cfg.path)
    fmt = _format(cfg, path)
    rejected: list[dict] = []
    seen: set[str] = set()
    if fmt == "json" and (path.suffix == ".jsonl" or path.is_dir() and any(path.glob("*.jsonl"))):
        return Corpus(_read_jsonl(path, cfg, rejected, seen, cfg.max_docs), rejected)
    import datasets

    if fmt == "hub":
        ds = datasets.load_dataset(cfg.path, split=cfg.split)
    else:
        files = sorted(str(p) for p in path.iterdir() if p.is_file()) if path.is_dir() else [str(path)]
        ds = datasets.load_dataset(fmt, data_files=files, split="train")
    if cfg.text_field not in ds.column_names:
        raise ValueError(f"{cfg.path}: no column {cfg.text_field!r} (columns: {', '.join(ds.column_names)}); "
                         "set corpus.text_field")
    docs = []
    for n, row in enumerate(ds):
        doc = _normalise(row, cfg, str(n), f"{cfg.path}[{n}]", rejected, seen)
        if doc is not None:
            docs.append(doc)
            if cfg.max_docs and len(docs) >= cfg.max_docs:
                break
    return Corpus(docs, rejected)


def split_windows(docs: list[dict], tokenizer, max_tokens: int) -> list[dict]:
    """Split documents longer than ``max_tokens`` tokens into consecutive windows
    at token boundaries; each window keeps the document's date."""
    out = []
    for doc in docs:
        enc = tokenizer(doc["text"], add_special_tokens=False, return_offsets_mapping=True)
        offsets = enc["offset_mapping"]
        if len(offsets) <= max_tokens:
            out.append(doc)
            continue
        for k, start in enumerate(range(0, len(offsets), max_tokens)):
            chunk = offsets[start : start + max_tokens]
            a = chunk[0][0] if k else 0
            b = offsets[start + max_tokens][0] if start + max_tokens < len(offsets) else len(doc["text"])
            out.append({"doc_id": f"{doc['doc_id']}#w{k}", "text": doc["text"][a:b], "date": doc["date"]})
    return out
