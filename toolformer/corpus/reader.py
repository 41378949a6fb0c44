"""Reading a corpus into documents ``{"doc_id", "text", "date"}`` and windows.

Formats, by the name's ending (``corpus.format: auto``) or set by
``corpus.format``: JSON Lines (``.jsonl``, gzip ``.jsonl.gz``, Zstandard
``.jsonl.zst`` with the ``zstandard`` package), ``.json``, ``.parquet``,
``.txt`` (one document per line), ``.csv``, a folder of such files (one
format), a ``datasets`` ``save_to_disk`` folder, or a hub data set name. Any
other ending is refused with this list rather than guessed, and a file whose
first bytes say it is compressed is never read as plain text.

JSON Lines and ``.txt`` are read line by line so a bad line is rejected with
its file and line number instead of failing the whole corpus; the other
formats go through ``datasets`` (``load_dataset``, ``load_from_disk``), and a
file ``datasets`` cannot read is an error naming it. A document longer than
the window is split into windows (``<id>#w<k>``), never dropped or cut.

Text is text: a record that is not valid Unicode -- a line whose bytes are not
UTF-8, or a lone surrogate in its text, id, date or gold calls (the JSON escape
``"\\ud800"`` decodes to one) -- is rejected (``rejected.jsonl``, with the
reason and where), never repaired: nothing is replaced with U+FFFD behind the
user's back. (Arrow, under the other formats, holds valid UTF-8 only.)

A document longer than ``corpus.max_doc_chars`` characters is first cut into
pieces (``<id>#p<k>``, at a whitespace where there is one) of at most that
many, each then split into windows as any document; the sample stage ends a
shard after a piece (:func:`shard_groups`). So however long one document is
(a 5 MB line), no shard tokenizes or holds more than ``shard_size`` pieces of
that size, and a shard's time stays bounded.

A record's gold calls (``gold_calls``: ``[{"tool", "input", "result",
"char_start"}, ...]``, as the small world's annotation corpus has them) stay
in its document; a window keeps those that start in it, their ``char_start``
counted from the window's start.
"""

from __future__ import annotations

import gzip
import io
import json
import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from itertools import islice
from pathlib import Path

from toolformer.config.schema import CorpusConfig
from toolformer.config.text import decode_utf8, parse_json
from toolformer.rundir.folder import GOLD_CALLS
from toolformer.rundir.inputs import check_hub, require

# Name ending -> (format, compression); the longest matching ending counts.
SUFFIXES = {".jsonl": ("json", None), ".jsonl.gz": ("json", "gzip"), ".jsonl.zst": ("json", "zstd"),
            ".json": ("json", None), ".parquet": ("parquet", None), ".txt": ("text", None), ".csv": ("csv", None)}
FORMATS = ("auto", "json", "parquet", "text", "csv", "disk", "hub")
SUPPORTED = (", ".join(SUFFIXES) + ", a folder of such files, a `datasets` save_to_disk folder "
             "or a hub data set name (corpus.format: " + ", ".join(FORMATS) + ")")
# First bytes of compressed files.
MAGIC = {b"\x1f\x8b": "gzip", b"\x28\xb5\x2f\xfd": "zstd", b"BZh": "bzip2", b"\xfd7zXZ\x00": "xz",
         b"PK\x03\x04": "zip"}


def _suffix(path: Path) -> str | None:
    name = path.name.lower()
    return max((x for x in SUFFIXES if name.endswith(x)), key=len, default=None)


def _file_kind(path: Path, fmt: str) -> tuple[str, str | None]:
    """(format, compression) of one corpus file; the format ``fmt`` unless auto."""
    suffix = _suffix(path)
    if fmt == "auto" and suffix is None:
        raise ValueError(f"{path}: unknown corpus format {''.join(path.suffixes) or path.name!r}; "
                         f"supported: {SUPPORTED}")
    compression = SUFFIXES[suffix][1] if suffix else None
    kind = SUFFIXES[suffix][0] if fmt == "auto" and suffix is not None else fmt  # (auto without one raised)
    if compression is None and kind != "parquet":
        with path.open("rb") as f:
            head = f.read(8)
        packed = next((c for magic, c in MAGIC.items() if head.startswith(magic)), None)
        if packed is not None:
            raise ValueError(f"{path}: the file is {packed}-compressed but its name says plain {kind}; "
                             "decompress it, or name it .jsonl.gz / .jsonl.zst if it is JSON Lines")
    if compression is not None and kind != "json":
        raise ValueError(f"{path}: compressed {kind} is not supported; supported: {SUPPORTED}")
    return kind, compression


def _files(cfg: CorpusConfig, path: Path) -> tuple[str, list[tuple[Path, str | None]]]:
    """(format, [(file, compression)]) of a corpus file or folder of files."""
    if path.is_file():
        kind, compression = _file_kind(path, cfg.format)
        return kind, [(path, compression)]
    files = sorted(p for p in path.iterdir() if p.is_file() and not p.name.startswith(".")
                   and (cfg.format != "auto" or _suffix(p) is not None))
    if not files:
        raise ValueError(f"{path}: no corpus files in the folder; supported: {SUPPORTED}")
    kinds = {p: _file_kind(p, cfg.format) for p in files}
    formats = sorted({k for k, _ in kinds.values()})
    if len(formats) > 1:
        raise ValueError(f"{path}: the folder mixes corpus formats ({', '.join(formats)}); keep one")
    return formats[0], [(p, c) for p, (_, c) in kinds.items()]


def _open(file: Path, compression: str | None):
    """A binary line reader of ``file``, decompressed."""
    if compression == "gzip":
        return gzip.open(file, "rb")
    if compression == "zstd":
        try:
            import zstandard
        except ImportError:
            raise ValueError(f"{file}: reading .zst needs the `zstandard` package "
                             "(pip install zstandard)") from None
        return io.BufferedReader(zstandard.ZstdDecompressor().stream_reader(file.open("rb"), closefd=True))
    return file.open("rb")


_SURROGATE = re.compile("[\ud800-\udfff]")


def invalid_text(text: str, escaped: bool = False) -> str | None:
    """Why ``text`` is not valid Unicode text, or None when it is: its first lone
    surrogate (what a JSON escape ``"\\ud800"`` decodes to), or with ``escaped``
    (text decoded with Python's ``surrogateescape``, as stdin and the command
    line are) the first byte that was not UTF-8."""
    m = _SURROGATE.search(text)
    if m is None:
        return None
    c = ord(m.group())
    if escaped and 0xDC80 <= c <= 0xDCFF:
        return f"not UTF-8 (byte 0x{c - 0xDC00:02x} at character {m.start()})"
    return f"lone surrogate U+{c:04X} at character {m.start()} (not valid Unicode text)"


def _raw(value) -> str:
    """The start of a rejected record as text that can be written (lone surrogates as ``\\udXXX``)."""
    return str(value)[:500].encode("utf-8", "backslashreplace").decode("utf-8")


def _not_text(doc: dict, cfg: CorpusConfig) -> str | None:
    """Why a document's text, id, date or gold calls are not valid Unicode text, or None."""
    for name, value in ((cfg.text_field, doc["text"]), (cfg.id_field, doc["doc_id"]), (cfg.date_field, doc["date"])):
        why = invalid_text(value or "")
        if why is not None:
            return f"field {name!r}: {why}"
    m = _SURROGATE.search(json.dumps(doc.get(GOLD_CALLS), ensure_ascii=False))
    if m is None:
        return None
    return f"field {GOLD_CALLS!r}: lone surrogate U+{ord(m.group()):04X} (not valid Unicode text)"


def _normalise(row: dict, cfg: CorpusConfig, fallback_id: str, where: str, rejected: list, seen: set) -> dict | None:
    text = row.get(cfg.text_field)
    if not isinstance(text, str):
        reason = (f"missing text field {cfg.text_field!r}" if text is None
                  else f"field {cfg.text_field!r} is not a string")
        rejected.append({"source": where, "reason": reason, "raw": _raw(row)})
        return None
    if not text.strip():
        rejected.append({"source": where, "reason": "empty text", "raw": _raw(row)})
        return None
    doc_id = row.get(cfg.id_field)
    doc_id = fallback_id if doc_id is None else str(doc_id)
    date = row.get(cfg.date_field)
    doc = {"doc_id": doc_id, "text": text, "date": str(date) if date not in (None, "") else None}
    if row.get(GOLD_CALLS) is not None:
        doc[GOLD_CALLS] = row[GOLD_CALLS]
    why = _not_text(doc, cfg)
    if why is not None:
        rejected.append({"source": where, "reason": why, "raw": _raw(row)})
        return None
    if doc_id in seen:
        rejected.append({"source": where, "reason": f"duplicate id {doc_id!r}", "raw": _raw(row)})
        return None
    seen.add(doc_id)
    return doc


def _decoded(raw: bytes, where: str, rejected: list) -> str | None:
    """The line ``raw`` as text; None, and a rejection naming ``where``, when it is not UTF-8."""
    try:
        return decode_utf8(raw, where, "not UTF-8 ({reason} at byte {offset})")
    except ValueError as e:
        rejected.append({"source": where, "reason": str(e), "raw": raw[:200].decode("utf-8", "replace")})
        return None


def _read_jsonl(files: list[tuple[Path, str | None]], cfg: CorpusConfig, rejected: list,
                seen: set) -> Iterator[dict]:
    for file, compression in files:
        base = file.name[: len(file.name) - len(_suffix(file) or "")]
        with _open(file, compression) as f:
            for n, raw in _lines(f, file):
                where = f"{file}:{n}"
                line = _decoded(raw, where, rejected)
                if line is None:
                    continue
                if not line.strip():
                    continue  # blank lines are not records
                try:
                    row = parse_json(line)
                except json.JSONDecodeError as e:
                    rejected.append({"source": where, "reason": f"invalid JSON: {e.msg}", "raw": line[:500]})
                    continue
                if not isinstance(row, dict):
                    rejected.append({"source": where, "reason": "not a JSON object", "raw": line[:500]})
                    continue
                doc = _normalise(row, cfg, f"{base}-{n}", where, rejected, seen)
                if doc is not None:
                    yield doc


def _read_text(files: list[tuple[Path, str | None]], cfg: CorpusConfig, rejected: list,
               seen: set) -> Iterator[dict]:
    """The documents of ``.txt`` files, one a line (``\\n``, ``\\r\\n`` or ``\\r`` ends it), with ids 0, 1, ...
    across the files as ``datasets`` numbers its rows; a line that is not UTF-8 is rejected alone."""
    n = 0
    for file, compression in files:
        with _open(file, compression) as f:
            for lineno, raw in _lines(f, file):
                where = f"{file}:{lineno}"
                line = _decoded(raw, where, rejected)
                if line is None:
                    n += 1
                    continue
                for text in line.removesuffix("\n").removesuffix("\r").split("\r"):
                    doc = _normalise({cfg.text_field: text}, cfg, str(n), where, rejected, seen)
                    n += 1
                    if doc is not None:
                        yield doc


def _lines(f, file: Path):
    """(line number, raw line) of an open file; a file that fails to decompress
    is an error naming it."""
    zstd = sys.modules.get("zstandard")
    errors = (OSError, EOFError, *((zstd.ZstdError,) if zstd is not None else ()))
    try:
        yield from enumerate(f, 1)
    except errors as e:
        raise ValueError(f"{file}: cannot be read to the end ({type(e).__name__}: {e})") from None


def _is_saved_dataset(path: Path) -> bool:
    return path.is_dir() and ((path / "state.json").exists() or (path / "dataset_dict.json").exists())


def _load_from_disk(path: Path, split: str):
    import datasets

    ds = datasets.load_from_disk(str(path))
    if isinstance(ds, datasets.DatasetDict):
        if split not in ds:
            raise ValueError(f"{path}: no split {split!r} (splits: {', '.join(ds)}); set corpus.split")
        ds = ds[split]
    return ds


def iter_corpus(cfg: CorpusConfig, rejected: list[dict]) -> Iterator[dict]:
    """The documents of the corpus, in order, read as they are needed (a hub
    or file data set with ``corpus.streaming`` as a stream); bad records are
    appended to ``rejected`` as they are met. Checks the path at the call."""
    docs = _documents(cfg, rejected)
    return islice(docs, cfg.max_docs) if cfg.max_docs else docs


def _documents(cfg: CorpusConfig, rejected: list[dict]) -> Iterator[dict]:
    if cfg.format not in FORMATS:
        raise ValueError(f"corpus.format: {cfg.format!r} is not one of {', '.join(FORMATS)}")
    if cfg.format == "hub":
        check_hub("corpus.path", cfg.path, "dataset")
    else:
        require("corpus.path", cfg.path, "dataset")  # a missing local path, or a hub id that does not answer
    path = Path(cfg.path)
    seen: set[str] = set()
    fmt: str | None = None  # the format of local files read through `datasets`
    if cfg.format == "hub" or (cfg.format == "auto" and not path.exists()):
        import datasets

        ds = datasets.load_dataset(cfg.path, split=cfg.split, streaming=cfg.streaming)
    elif cfg.format == "disk" or (cfg.format == "auto" and _is_saved_dataset(path)):
        ds = _load_from_disk(path, cfg.split)  # memory-mapped Arrow: read as it is iterated
    else:
        fmt, files = _files(cfg, path)
        if fmt == "json" and all(_suffix(f) != ".json" for f, _ in files):
            return _read_jsonl(files, cfg, rejected, seen)  # JSON Lines are always read line by line
        if fmt == "text":
            return _read_text(files, cfg, rejected, seen)
        import datasets

        with _unreadable(cfg.path, fmt):
            ds = datasets.load_dataset(fmt, data_files=[str(f) for f, _ in files], split="train",
                                       streaming=cfg.streaming)
    columns = ds.column_names or []  # a stream of unknown columns is checked on its first row
    if columns and cfg.text_field not in columns:
        raise ValueError(f"{cfg.path}: no column {cfg.text_field!r} (columns: {', '.join(columns)}); "
                         "set corpus.text_field")
    return _rows(ds, cfg, rejected, seen, fmt)


def _rows(ds, cfg: CorpusConfig, rejected: list, seen: set, fmt: str | None = None) -> Iterator[dict]:
    """The documents of a ``datasets`` data set (of local ``fmt`` files: an error reading one names them)."""
    rows = enumerate(ds)
    while True:
        with _unreadable(cfg.path, fmt):  # a stream reads its files as it is iterated
            item = next(rows, None)
        if item is None:
            return
        n, row = item
        doc = _normalise(row, cfg, str(n), f"{cfg.path}[{n}]", rejected, seen)
        if doc is not None:
            yield doc


@contextmanager
def _unreadable(path: str, fmt: str | None) -> Iterator[None]:
    """A ``datasets`` error building a data set of local ``fmt`` files (not UTF-8, malformed) as a ValueError
    naming ``path`` and its cause; with ``fmt`` None, errors pass as they are."""
    import datasets

    try:
        yield
    except datasets.exceptions.DatasetGenerationError as e:
        if fmt is None:
            raise
        causes: list[BaseException] = []
        cause = e.__cause__ or e.__context__
        while cause is not None and len(causes) < 10:
            causes.append(cause)
            cause = cause.__cause__ or cause.__context__
        text = next((c for c in causes if isinstance(c, UnicodeDecodeError)), None)
        if text is not None:
            why = f"not UTF-8 (byte 0x{text.object[text.start]:02x}: {text.reason})"  # where: in a field of it
        else:
            why = f"{type(causes[0]).__name__}: {causes[0]}" if causes else str(e)
        raise ValueError(f"{path}: cannot be read as {fmt} ({why}); a {fmt} file is read whole: fix it, or make it "
                         "JSON Lines (.jsonl), where a bad line is rejected alone") from None


