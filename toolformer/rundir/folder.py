"""Run folders: sharded JSONL records, atomic writes and manifests written last.

Layout of one stage's output, ``RUN_DIR/<stage>/``::

    started.json          config hash of the run in progress
    shard-00000.jsonl     records of work group 0 (shard_size documents, or upstream shard 0)
    shard-00001.jsonl     records of work group 1
    part-00000.*          what a shard's work left beside it (sample: its documents and counts)
    rejected.jsonl        bad inputs, with the reason (if any)
    manifest.json         counts, config hash, seed, versions, and per file of records
                          (shards, documents.jsonl) its record count and sha256: written last

A shard is written to a temporary name and renamed, so a shard that exists is
complete (its parts are written before it); a write that fails (a full disk)
removes its temporary file. A stage interrupted and rerun skips the groups
whose shards it finds (same config hash) and continues; the manifest's
existence means the stage finished. Under ``accelerate launch`` shard ``g``
is the work of rank ``g mod N`` (:mod:`toolformer.rundir.parallel`). A changed
config or ``--force`` deletes only the files above (and temporary ones),
never anything else in the folder. A stage that reads a finished stage
checks its files against its manifest first (:meth:`StageFolder.require`): a file
missing, cut short or changed, a manifest or index that cannot be read, is an
:class:`IntegrityError` naming the file and the command that rebuilds it.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import sqlite3
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

from toolformer.rundir.files import (
    IntegrityError,
    atomic_path,
    atomic_write_text,
    check_sqlite,
    dumps,
    file_digest,
    iter_jsonl,
    read_json,
    read_jsonl,
)
from toolformer.rundir.sharding import chunked, shard_index

MANIFEST = "manifest.json"
STARTED = "started.json"
FORMAT = 2
"""Format of the files toolformer writes into a run folder and a base model's record, in every manifest: a
folder written in another format is refused (exit 2) until ``--force`` makes it again. 2: toolformer 0.2.0 (the
settings retired then no longer hash; format 1 is every earlier version, whose manifests have no ``format``)."""
REJECTED = "rejected.jsonl"
DOCUMENTS = "documents.jsonl"  # the sample stage's scored documents (see below)
# The files of records a manifest checks (searched in the stage's folder and its subfolders: the chain's rounds).
CHECKED = ("shard-*.jsonl", DOCUMENTS)


def versions() -> dict:
    import importlib.metadata as md

    out: dict[str, str | None] = {"python": platform.python_version()}
    for pkg in ("toolformer", "torch", "transformers", "datasets", "accelerate"):
        try:
            out[pkg] = md.version(pkg)
        except md.PackageNotFoundError:
            out[pkg] = None
    return out


class StageFolder:
    """One stage's output folder; ``command`` is the ``toolformer`` command that writes it (default: ``name``)."""

    def __init__(self, run_dir: str | Path, name: str, command: str | None = None):
        self.name = name
        self.dir = Path(run_dir) / name
        self.command = command or name

    @property
    def rebuild(self) -> str:
        """What to do about a file of this stage that fails its check."""
        return f"rerun `toolformer {self.command} --force` (with this run's --config and overrides) to rebuild it"

    # -- reading -------------------------------------------------------------
    @property
    def manifest_path(self) -> Path:
        return self.dir / MANIFEST

    def manifest(self) -> dict | None:
        """The stage's manifest (None before it finished); one that is not a JSON object raises IntegrityError."""
        if not self.manifest_path.exists():
            return None
        return read_json(self.manifest_path, self.rebuild)

    def is_complete(self, config_hash: str | None = None) -> bool:
        m = self.manifest()
        return m is not None and (config_hash is None or m.get("config_hash") == config_hash)

    def shards(self) -> list[Path]:
        return sorted(self.dir.glob("shard-*.jsonl"), key=shard_index)

    def shard_path(self, index: int) -> Path:
        return self.dir / f"shard-{index:05d}.jsonl"

    def part_path(self, index: int, suffix: str) -> Path:
        """A file a shard's work leaves beside it (written before the shard)."""
        return self.dir / f"part-{index:05d}{suffix}"

    def parts(self, suffix: str) -> list[Path]:
        return sorted(self.dir.glob(f"part-*{suffix}"), key=shard_index)

    def records(self) -> Iterator[dict]:
        """Every record of every complete shard, in order."""
        for shard in self.shards():
            for _, rec in iter_jsonl(shard):
                yield rec

    def require(self, what: str = "") -> None:
        """The stage has finished and its files are those its manifest lists (:meth:`verify`)."""
        if not self.is_complete():
            raise FileNotFoundError(
                f"{self.dir}: stage {self.name!r} has not finished (no {MANIFEST}); run it first{what}"
            )
        self.verify()

    def checked_files(self) -> dict[str, Path]:
        """The stage's files of records (:data:`CHECKED`, here and in subfolders), by path relative to its folder."""
        found = {p.relative_to(self.dir).as_posix(): p for pattern in CHECKED for p in self.dir.rglob(pattern)
                 if p.is_file()}
        return dict(sorted(found.items()))

    def verify(self, only: str | None = None) -> None:
        """Check a finished stage's files of records (or the one named ``only``) against its manifest: each is
        there with the record count and sha256 it lists, and no such file it does not list is. A manifest without
        that list (an older toolformer's) is checked for its number of shards. A stage without a manifest (not
        finished, or resuming) is not checked. The first file that fails raises IntegrityError naming it."""
        m = self.manifest()
        if m is None:
            return
        check_format(m, self.manifest_path, self.rebuild)
        files = m.get("files")
        if files is None:  # an older manifest: its shard count is all it records
            n, have = m.get("shards"), len(self.shards())
            if only is None and isinstance(n, int) and n != have:
                raise IntegrityError(f"{self.dir}: {have} shard file(s), {MANIFEST} says {n}: {self.rebuild}")
            return
        if not isinstance(files, dict) or not all(isinstance(v, dict) for v in files.values()):
            raise IntegrityError(f"{self.manifest_path}: 'files' is not a map of file -> records and sha256: "
                                 f"{self.rebuild}")
        for rel, listed in files.items():
            if only is None or rel == only:
                self._check_file(self._listed(rel), listed)
        if only is None:
            extra = [p for rel, p in self.checked_files().items() if rel not in files]
            if extra:
                raise IntegrityError(f"{extra[0]}: not listed in {MANIFEST} (added after the stage finished): "
                                     f"{self.rebuild}")

    def _listed(self, rel: str) -> Path:
        """The file a manifest lists as ``rel``: a file of records (:data:`CHECKED`) inside the stage's folder,
        else IntegrityError naming the manifest (no absolute path, no ``..``: nothing outside is opened)."""
        parts = Path(rel).parts
        if Path(rel).is_absolute() or ".." in parts or not parts or not any(Path(rel).match(p) for p in CHECKED):
            raise IntegrityError(f"{self.manifest_path}: lists {rel!r}, not a file of records inside {self.dir}: "
                                 f"{self.rebuild}")
        return self.dir / rel

    def _check_file(self, path: Path, listed: dict) -> None:
        """``path`` has the count and sha256 its manifest entry ``listed`` gives, and is no symlink (nor under one)."""
        n = listed.get("records")
        link = next((p for p in (path, *path.parents) if p != self.dir and self.dir in p.parents and p.is_symlink()),
                    None)
        if link is not None:
            raise IntegrityError(f"{link}: a symlink (to {link.resolve()}), not a file the stage wrote: "
                                 f"{self.rebuild}")
        if not path.is_file():
            raise IntegrityError(f"{path}: missing, {MANIFEST} says it has {n} records: {self.rebuild}")
        got = file_digest(path)
        if n is not None and got["records"] != n:
            raise IntegrityError(f"{path}: {got['records']} records, {MANIFEST} says {n}: {self.rebuild}")
        if listed.get("sha256") not in (None, got["sha256"]):
            raise IntegrityError(f"{path}: changed since the stage wrote it (its sha256 is not the one {MANIFEST} "
                                 f"lists): {self.rebuild}")

    # -- writing -------------------------------------------------------------
    def begin(self, config_hash: str, force: bool = False) -> int:
        """Prepare to (re)write; return how many shards are already complete.

        A different config hash or ``force`` deletes the stage's own files
        (shards, rejected records, started.json) and starts over; other files
        in the folder are left alone.
        """
        started = self.dir / STARTED
        if not self.dir.parent.exists():
            from toolformer.rundir.guard import mark

            mark(self.dir.parent)  # a run folder toolformer creates carries its marker
        if self.dir.exists():
            same = not force and started.exists() and read_json(
                started, f"delete it (the stage starts over), or {self.rebuild}").get("config_hash") == config_hash
            if not same:
                for own in [*self.shards(), *self.parts(""), self.dir / REJECTED, started]:
                    own.unlink(missing_ok=True)
        self.dir.mkdir(parents=True, exist_ok=True)
        if self.manifest_path.exists():
            self.manifest_path.unlink()
        if not started.exists():
            atomic_write_text(started, json.dumps({"format": FORMAT, "config_hash": config_hash, "time": time.time()}))
        for tmp in self.dir.glob(".*.tmp-*"):
            if tmp.is_file():
                tmp.unlink()  # a half-written file from an interrupted run
        return len(self.shards())

    def write_shard(self, index: int, records: Iterable[dict]) -> None:
        atomic_write_text(self.shard_path(index), "".join(dumps(r) + "\n" for r in records))

    def write_rejected(self, rejected: list[dict]) -> None:
        path = self.dir / REJECTED
        if rejected:
            atomic_write_text(path, "".join(dumps(r) + "\n" for r in rejected))
        elif path.exists():
            path.unlink()

    def check_format(self) -> None:
        """The stage's manifest, or the record of its unfinished run, is of :data:`FORMAT` (or absent)."""
        for path in (self.manifest_path, self.dir / STARTED):
            if path.exists():
                check_format(read_json(path, self.rebuild), path, self.rebuild)

    def finish(self, config_hash: str, seed: int, counts: dict, **extra) -> dict:
        """Write the manifest: counts, config hash, seed, versions, and the record count and sha256 of each of
        the stage's files of records (what :meth:`verify` checks)."""
        manifest = {
            "format": FORMAT,
            "stage": self.name,
            "config_hash": config_hash,
            "seed": seed,
            "counts": counts,
            "shards": len(self.shards()),
            "files": {rel: file_digest(p) for rel, p in self.checked_files().items()},
            "versions": versions(),
            "finished": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            **extra,
        }
        atomic_write_text(self.manifest_path, json.dumps(manifest, indent=2, ensure_ascii=False) + "\n")
        return manifest


def check_format(record: dict, path: Path, rebuild: str) -> None:
    """``record`` (a manifest read from ``path``) was written in :data:`FORMAT`, else a ValueError (exit 2)
    saying what to do (``rebuild``)."""
    found = record.get("format", 1)
    if found != FORMAT:
        older = isinstance(found, int) and found < FORMAT
        raise ValueError(f"{path}: written by {'an older' if older else 'another'} toolformer "
                         f"(format {found}; this version reads format {FORMAT}), not mixed with new results: "
                         f"{rebuild}, or start a new run_dir")


def upstream_total(stage: StageFolder) -> int | None:
    """How many records a finished stage wrote, from its manifest's per-tool counts (None if it has none)."""
    per_tool = ((stage.manifest() or {}).get("counts") or {}).get("per_tool")
    return sum(c.get("candidates", 0) for c in per_tool.values()) if per_tool else None


def fmt_pct(part: float, whole: float = 1, digits: int = 1) -> str:
    """``part`` of ``whole`` as a percentage with ``digits`` decimals, ``"12.5 %"``; ``"n/a"`` when ``whole``
    is 0. A share in [0, 1] is ``fmt_pct(share)``."""
    return f"{100.0 * part / whole:.{digits}f} %" if whole else "n/a"


# -- documents scored by the sample stage --------------------------------------
# RUN_DIR/sample/documents.jsonl holds every document (or window of a long
# document) the sample stage scored, once: {"doc_id", "text", "date"}, plus
# "gold_calls" when the corpus record has them (char_start counted in the
# stored text). Later stages refer to documents by doc_id (DOCUMENTS, above).
GOLD_CALLS = "gold_calls"


DOCUMENT_INDEX = "documents.sqlite"


def document_row(d: dict) -> dict:
    return {"doc_id": d["doc_id"], "text": d["text"], "date": d.get("date")} | (
        {GOLD_CALLS: d[GOLD_CALLS]} if GOLD_CALLS in d else {})


def write_documents(run_dir: str | Path, docs: Iterable[dict]) -> Path:
    """``documents.jsonl`` and its index ``documents.sqlite`` (doc_id -> line),
    written from ``docs`` as they come (never all in memory)."""
    path = Path(run_dir) / "sample" / DOCUMENTS
    digest = hashlib.sha256()
    with atomic_path(path) as tmp, tmp.open("w", encoding="utf-8") as f:

        def rows() -> Iterator[dict]:  # each row written to the file as the index takes it
            for d in docs:
                row = document_row(d)
                line = dumps(row) + "\n"
                f.write(line)
                digest.update(line.encode("utf-8"))
                yield row

        index_documents(path, rows(), digest)
        f.flush()
        os.fsync(f.fileno())
    return path


def index_documents(path: Path, rows: Iterable[dict] | None = None, digest=None) -> Path:
    """``documents.sqlite`` beside ``documents.jsonl``: doc_id -> its row (``rows``, or the rows of the file
    when not given), and the sha256 of the file it indexes (``digest``, fed as ``rows`` were written)."""
    index = path.with_name(DOCUMENT_INDEX)
    rows = rows if rows is not None else (rec for _, rec in iter_jsonl(path))
    with atomic_path(index) as tmp:
        tmp.unlink(missing_ok=True)
        db = sqlite3.connect(tmp)
        try:
            db.execute("CREATE TABLE documents (doc_id TEXT PRIMARY KEY, row TEXT NOT NULL)")
            for chunk in chunked(rows, 1000):
                db.executemany("INSERT OR REPLACE INTO documents VALUES (?, ?)",
                               ((str(r["doc_id"]), dumps(r)) for r in chunk))
            sha = digest.hexdigest() if digest is not None else file_digest(path)["sha256"]
            db.execute("CREATE TABLE source (sha256 TEXT NOT NULL)")
            db.execute("INSERT INTO source VALUES (?)", (sha,))
            db.commit()
        finally:
            db.close()
    return index


class DocumentStore:
    """The documents of ``RUN_DIR/sample`` looked up by doc_id from
    ``documents.sqlite`` (built from ``documents.jsonl`` when a run folder of
    an older toolformer has none), so no stage holds every document.
    ``documents.jsonl`` is checked against the sample stage's manifest; an
    index that is not a whole SQLite database raises IntegrityError naming it."""

    def __init__(self, run_dir: str | Path):
        self.path = Path(run_dir) / "sample" / DOCUMENTS
        if not self.path.exists():
            raise FileNotFoundError(f"{self.path}: no scored documents; run the sample stage first")
        StageFolder(run_dir, "sample").verify(DOCUMENTS)
        self.index = self.path.with_name(DOCUMENT_INDEX)
        if not self.index.exists() or self.index.stat().st_mtime < self.path.stat().st_mtime:
            index_documents(self.path)
        self.remedy = (f"it is the index of {DOCUMENTS}: delete it and rerun to rebuild it (or rerun "
                       "`toolformer sample --force`)")
        check_sqlite(self.index, self.remedy)
        with self._reading():
            self.db = sqlite3.connect(f"{self.index.resolve().as_uri()}?mode=ro", uri=True, check_same_thread=False)
        try:
            with self._reading():
                self.db.execute("SELECT row FROM documents LIMIT 1").fetchall()
                self._check_source()
        except IntegrityError:
            self.db.close()
            raise

    def _check_source(self) -> None:
        """The index is that of this ``documents.jsonl`` (the sha256 it was built from is the one the sample
        manifest lists), not another run's copied in. An index of an older toolformer records no source."""
        if not self.db.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'source'").fetchone():
            return
        built_from = self.db.execute("SELECT sha256 FROM source").fetchone()
        listed = ((StageFolder(self.path.parent.parent, "sample").manifest() or {}).get("files") or {}).get(DOCUMENTS)
        if isinstance(listed, dict) and listed.get("sha256") not in (None, built_from and built_from[0]):
            raise IntegrityError(f"{self.index}: the index of another {DOCUMENTS}, not this run's: {self.remedy}")

    @contextmanager
    def _reading(self) -> Iterator[None]:
        """An SQLite error (a damaged index) raised as IntegrityError naming the index."""
        try:
            yield
        except (sqlite3.DatabaseError, json.JSONDecodeError) as e:
            raise IntegrityError(f"{self.index}: unreadable ({e}): {self.remedy}") from None

    def __getitem__(self, doc_id: str) -> dict:
        with self._reading():
            row = self.db.execute("SELECT row FROM documents WHERE doc_id = ?", (str(doc_id),)).fetchone()
            if row is None:
                raise IntegrityError(f"{self.path}: no document {doc_id!r}, which a record of this run names: "
                                     "rerun `toolformer sample --force` (with this run's --config and overrides)")
            return json.loads(row[0])

    def close(self) -> None:
        self.db.close()


def read_documents(run_dir: str | Path) -> dict[str, dict]:
    """doc_id -> {"doc_id", "text", "date"} (and "gold_calls" if stored), in corpus order."""
    path = Path(run_dir) / "sample" / DOCUMENTS
    if not path.exists():
        raise FileNotFoundError(f"{path}: no scored documents; run the sample stage first")
    StageFolder(run_dir, "sample").verify(DOCUMENTS)
    return {d["doc_id"]: d for d in read_jsonl(path, ("doc_id",))}
