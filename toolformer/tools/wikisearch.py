"""WikiSearch: BM25 over a local document collection, returns short snippets.

A tool's data file (WikiSearch's collection, QA's knowledge) is read whole into memory, so it must be a regular
file of at most :data:`MAX_DATA_BYTES`: a device (``/dev/zero``), a FIFO, a folder or a larger file is refused at
once with a ``bad_data`` error naming the path, and the read itself stops at the cap.
"""

from __future__ import annotations

import os
import re
import stat
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

from toolformer.config.load import share_path
from toolformer.config.text import decode_utf8
from toolformer.tools.base import TEXT_PATTERN, Tool, ToolError, prepare_data, uninterrupted
from toolformer.tools.datafiles import INDEX_SUFFIX, load_index, open_data, pinned, save_index

_WORD = re.compile(r"\w+", re.UNICODE)

MAX_DATA_BYTES = 1 << 30
"""The largest collection or knowledge file a tool loads (1 GiB): it is held in memory with its BM25 index."""


def tokenize_words(text: str) -> list[str]:
    return [w.lower() for w in _WORD.findall(text)]


def _check_regular(path: Path, st: os.stat_result, hint: str) -> None:
    """Refuse a data file that is not a regular file of at most MAX_DATA_BYTES."""
    if not stat.S_ISREG(st.st_mode):
        kind = ("a folder" if stat.S_ISDIR(st.st_mode) else "a FIFO" if stat.S_ISFIFO(st.st_mode)
                else "a symlink (a model folder's data is read only from inside it)" if stat.S_ISLNK(st.st_mode)
                else "a device" if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode) else "a socket")
        raise ToolError("bad_data", f"{path}: {kind}, not a regular file", hint)
    if st.st_size > MAX_DATA_BYTES:
        raise ToolError("bad_data", f"{path}: {st.st_size:,} bytes, over the {MAX_DATA_BYTES:,} a tool's data file "
                                    "may have", hint)


def _lines(f, path: Path) -> Iterator[str]:
    """The lines of the open binary file ``f``, decoded, reading no more than MAX_DATA_BYTES in all."""
    left, n = MAX_DATA_BYTES, 0
    while line := f.readline(left + 1):
        n += 1
        left -= len(line)
        if left < 0:
            raise ToolError("bad_data", f"{path}: grew past {MAX_DATA_BYTES:,} bytes while it was read")
        yield decode_utf8(line, path, "{where}:{line}: not UTF-8 text", line=n)


def read_collection(path: str | Path, required: tuple[str, ...], setting: str = "tools.collection") -> list[dict]:
    """A tool's JSONL collection; a missing file, or one that is not a regular file of at most MAX_DATA_BYTES,
    is the tool's error naming the path (its hint names the ``setting`` that gives it); a bad line or a record
    without a ``required`` key is a ValueError naming the file and line."""
    return read_data(path, required, setting)[0]


def read_data(path: str | Path, required: tuple[str, ...], setting: str) -> tuple[list[dict], str]:
    """(:func:`read_collection`, the stamp of the file read: its size and modification time), the file opened
    once (a model folder's through a descriptor checked after opening: :mod:`toolformer.tools.datafiles`)."""
    from toolformer.rundir.files import jsonl_records

    path = Path(path)
    hint = f"{setting}: a JSONL file of at most {MAX_DATA_BYTES:,} bytes"
    try:
        # Before opening (opening a FIFO waits for a writer); a model folder's file is not followed out of it.
        _check_regular(path, os.stat(path, follow_symlinks=not pinned(path)), hint)
        fd = open_data(path, hint)
    except FileNotFoundError:
        raise ToolError("missing_data", f"{path}: file not found", hint) from None
    except OSError as e:
        raise ToolError("bad_data", f"{path}: cannot be read: {e.strerror}", hint) from None
    out = []
    with open(fd, "rb") as f:
        st = os.fstat(fd)
        _check_regular(path, st, hint)  # the file opened is the one checked
        for n, rec in jsonl_records(_lines(f, path), path):
            missing = [k for k in required if k not in rec]
            if missing:
                raise ValueError(f"{path}:{n}: missing key(s) {', '.join(map(repr, missing))}")
            out.append(rec)
    return out, f"{st.st_size}:{st.st_mtime_ns}"


PROGRESS_DOCS = 10_000
"""Building the index of at least this many documents says so on stderr first (it may take a while)."""


class BM25Index:
    """A bm25s index over ``texts``, saved beside the collection and reloaded
    when the collection has not changed (same size and modification time). ``what`` names the data in the
    line printed before a long build."""

    def __init__(self, texts: list[str], cache_dir: Path | None = None, stamp: str = "", what: str = ""):
        import bm25s

        self.size = len(texts)
        saved = load_index(cache_dir, stamp) if cache_dir else None
        if saved is None:
            if self.size >= PROGRESS_DOCS:
                where = f"saved in {cache_dir} for later runs" if cache_dir else "kept in memory"
                print(f"tools: building the BM25 index of {what or 'a tool'}: {self.size:,} documents ({where})",
                      file=sys.stderr, flush=True)
            saved = bm25s.BM25()
            saved.index([tokenize_words(t) for t in texts], show_progress=False)
            if cache_dir:
                save_index(saved, cache_dir, stamp)
        self.retriever = saved

    def search(self, query: str, k: int) -> list[tuple[int, float]]:
        words = tokenize_words(query)
        if not words or self.size == 0:
            return []
        k = min(k, self.size)
        ids, scores = self.retriever.retrieve([words], k=k, show_progress=False)
        return [(int(i), float(s)) for i, s in zip(ids[0], scores[0]) if s > 0]


def index_cache(path: Path) -> Path | None:
    """Where the index of the data file ``path`` is saved: ``PATH.bm25`` beside it, or nowhere (kept in memory)
    when the file is one of the package's own (its sample data, read from an installed package): an install is
    not written into."""
    if share_path().resolve() in path.resolve().parents:
        return None
    return path.with_name(path.name + INDEX_SUFFIX)


class WikiSearch(Tool):
    name = "WikiSearch"
    description = (
        "Searches a local encyclopedia (a collection of titled documents) with BM25 "
        "and returns the best-matching snippet(s) as 'Title > text', cut to a fixed length."
    )
    input_description = "a search query, a few words"
    example = "Danube mouth"
    input_pattern = TEXT_PATTERN
    prompt = (
        "Your task is to add calls to a Wikipedia Search API to a piece of text. A call "
        "looks up a fact the text states. Write a call as \"[WikiSearch(query)]\", where "
        "\"query\" is a few search words. Examples:\n"
        "Input: The Danube flows through ten countries before it reaches the Black Sea.\n"
        "Output: The Danube flows through ten countries before it reaches the "
        "[WikiSearch(Danube mouth)] Black Sea.\n"
        "Input: The first ascent of the mountain was made in 1865.\n"
        "Output: The first ascent of the mountain was made in [WikiSearch(Matterhorn first ascent)] 1865.\n"
        "Input: Lisbon is the capital of Portugal.\n"
        "Output: Lisbon is the capital of [WikiSearch(Lisbon capital of)] Portugal.\n"
        "Input: {text}\n"
        "Output:"
    )

    def __init__(self, collection: str | Path, top_k: int = 1, snippet_chars: int = 200):
        self.path = Path(collection)
        self.top_k = top_k
        self.snippet_chars = snippet_chars
        self._docs: list[dict] | None = None
        self._index: BM25Index | None = None
        self._loading = threading.Lock()  # one load at a time: concurrent first calls wait for it

    def _load(self) -> None:
        with self._loading, uninterrupted():  # the read is capped; a call given up on still leaves it loaded
            if self._index is None:
                self._docs, stamp = read_data(self.path, ("title", "text"), "tools.collection")
                self._index = BM25Index([d["title"] + " " + d["text"] for d in self._docs], index_cache(self.path),
                                        stamp, f"WikiSearch's collection {self.path}")

    def prepare(self) -> None:
        prepare_data(self._load)

    def snippet(self, doc: dict) -> str:
        text = " ".join(doc["text"].split())
        if len(text) > self.snippet_chars:
            text = text[: self.snippet_chars].rsplit(" ", 1)[0] + "…"
        return f"{doc['title']} > {text}"

    def run(self, tool_input: str, date: str | None = None) -> str:
        if not tool_input.strip():
            raise ToolError("empty", "empty query", "a few search words, e.g. [WikiSearch(Danube mouth)]")
        self._load()
        assert self._index is not None and self._docs is not None  # set by _load
        hits = self._index.search(tool_input, self.top_k)
        if not hits:
            raise ToolError("not_found", f"no document matches {tool_input!r}")
        return " | ".join(self.snippet(self._docs[i]) for i, _ in hits)
