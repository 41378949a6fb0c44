"""Run folders: sharded JSONL records, atomic writes and manifests written last.

Layout of one stage's output, ``RUN_DIR/<stage>/``::

    started.json          config hash of the run in progress
    shard-00000.jsonl     records of work units 0 .. U-1 (U = shard_size)
    shard-00001.jsonl     records of work units U .. 2U-1
    rejected.jsonl        bad inputs, with the reason (if any)
    manifest.json         counts, config hash, seed, versions: written last

A shard is written to a temporary name and renamed, so a shard that exists is
complete; a write that fails (a full disk) removes its temporary file. A
stage interrupted and rerun skips the work units of the shards it finds (same
config hash) and continues; the manifest's existence means the stage
finished. A changed config or ``--force`` deletes only the files above (and
temporary ones), never anything else in the folder.
"""

from __future__ import annotations

import errno
import json
import os
import platform
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

from toolformer.run import stops

MANIFEST = "manifest.json"
STARTED = "started.json"
REJECTED = "rejected.jsonl"


def disk_full(e: BaseException) -> bool:
    """An OSError ENOSPC, or a library's error wrapping one (safetensors' SafetensorError)."""
    if isinstance(e, OSError) and e.errno == errno.ENOSPC:
        return True
    return "No space left on device" in str(e) or "StorageFull" in str(e)


def disk_full_error(path: str | Path) -> OSError:
    """The OSError reported for a full disk while writing ``path`` (names it)."""
    return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))


def atomic_write_text(path: Path, text: str) -> None:
    """Write ``text`` (UTF-8) to a temporary name and rename it to ``path``; a failed or
    interrupted write leaves no temporary file (a full disk raises ENOSPC naming ``path``)."""
    _atomic_write(path, text)


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """:func:`atomic_write_text` for bytes (an image, say)."""
    _atomic_write(path, data)


def _atomic_write(path: Path, content: str | bytes) -> None:
    """Write to ``.NAME.tmp-PID``, flush and fsync it, then rename it to ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with tmp.open("wb") if isinstance(content, bytes) else tmp.open("w", encoding="utf-8") as f:
            f.write(content)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as e:
        tmp.unlink(missing_ok=True)
        if disk_full(e):
            raise disk_full_error(path) from e
        raise


def iter_jsonl(path: str | Path) -> Iterator[tuple[int, dict]]:
    """(line number, object) for every non-blank line of a JSONL file; a line
    that is not a JSON object raises ValueError naming the file and line."""
    path = Path(path)
    with path.open(encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}:{n}: invalid JSON: {e.msg}") from None
            if not isinstance(rec, dict):
                raise ValueError(f"{path}:{n}: expected a JSON object")
            yield n, rec


def read_jsonl(path: str | Path, required: tuple[str, ...] = ()) -> list[dict]:
    """Records of one JSONL file; a bad line or a record without a ``required``
    key raises ValueError naming the file and line."""
    out = []
    for n, rec in iter_jsonl(path):
        missing = [k for k in required if k not in rec]
        if missing:
            raise ValueError(f"{path}:{n}: missing key(s) {', '.join(map(repr, missing))}")
        out.append(rec)
    return out


def dumps(record: dict) -> str:
    return json.dumps(record, ensure_ascii=False, sort_keys=False)


def versions() -> dict:
    import importlib.metadata as md

    out = {"python": platform.python_version()}
    for pkg in ("toolformer", "torch", "transformers", "datasets", "accelerate"):
        try:
            out[pkg] = md.version(pkg)
        except md.PackageNotFoundError:
            out[pkg] = None
    return out


class Stage:
    """One stage's output folder."""

    def __init__(self, run_dir: str | Path, name: str):
        self.name = name
        self.dir = Path(run_dir) / name

    # -- reading -------------------------------------------------------------
    @property
    def manifest_path(self) -> Path:
        return self.dir / MANIFEST

    def manifest(self) -> dict | None:
        if not self.manifest_path.exists():
            return None
        return json.loads(self.manifest_path.read_text(encoding="utf-8"))

    def is_complete(self, config_hash: str | None = None) -> bool:
        m = self.manifest()
        return m is not None and (config_hash is None or m.get("config_hash") == config_hash)

    def shards(self) -> list[Path]:
        return sorted(self.dir.glob("shard-*.jsonl"))

    def records(self) -> Iterator[dict]:
        """Every record of every complete shard, in order."""
        for shard in self.shards():
            for _, rec in iter_jsonl(shard):
                yield rec

    def require(self, what: str = "") -> None:
        if not self.is_complete():
            raise FileNotFoundError(
                f"{self.dir}: stage {self.name!r} has not finished (no {MANIFEST}); run it first{what}"
            )

    # -- writing -------------------------------------------------------------
    def begin(self, config_hash: str, force: bool = False) -> int:
        """Prepare to (re)write; return how many shards are already complete.

        A different config hash or ``force`` deletes the stage's own files
        (shards, rejected records, started.json) and starts over; other files
        in the folder are left alone.
        """
        started = self.dir / STARTED
        if not self.dir.parent.exists():
            from toolformer.run.guard import mark

            mark(self.dir.parent)  # a run folder toolformer creates carries its marker
        if self.dir.exists():
            same = started.exists() and json.loads(started.read_text()).get("config_hash") == config_hash
            if force or not same:
                for own in [*self.shards(), self.dir / REJECTED, started]:
                    own.unlink(missing_ok=True)
        self.dir.mkdir(parents=True, exist_ok=True)
        if self.manifest_path.exists():
            self.manifest_path.unlink()
        if not started.exists():
            atomic_write_text(started, json.dumps({"config_hash": config_hash, "time": time.time()}))
        for tmp in self.dir.glob(".*.tmp-*"):
            if tmp.is_file():
                tmp.unlink()  # a half-written file from an interrupted run
        return len(self.shards())

    def write_shard(self, index: int, records: Iterable[dict]) -> None:
        text = "".join(dumps(r) + "\n" for r in records)
        atomic_write_text(self.dir / f"shard-{index:05d}.jsonl", text)

    def write_rejected(self, rejected: list[dict]) -> None:
        path = self.dir / REJECTED
        if rejected:
            atomic_write_text(path, "".join(dumps(r) + "\n" for r in rejected))
        elif path.exists():
            path.unlink()

    def finish(self, config_hash: str, seed: int, counts: dict, **extra) -> dict:
        manifest = {
            "stage": self.name,
            "config_hash": config_hash,
            "seed": seed,
            "counts": counts,
            "shards": len(self.shards()),
            "versions": versions(),
            "finished": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            **extra,
        }
        atomic_write_text(self.manifest_path, json.dumps(manifest, indent=2, ensure_ascii=False) + "\n")
        return manifest


def run_sharded(stage: Stage, units: list, shard_size: int, first_shard: int, process, progress=None) -> None:
    """Process ``units`` in groups of ``shard_size``, one shard per group.

    ``process(group) -> list[dict]`` returns the records of a group; groups of
    shards already complete are skipped. ``progress`` (a tqdm bar) is advanced
    by the number of units.
    """
    n_groups = (len(units) + shard_size - 1) // shard_size
    if progress is not None and first_shard:
        progress.update(min(len(units), first_shard * shard_size))
    stops.keep(f"{first_shard} of {n_groups} shard(s) of {stage.name} in {stage.dir}")
    for g in range(first_shard, n_groups):
        group = units[g * shard_size : (g + 1) * shard_size]
        with stops.deferred():  # SIGINT/SIGTERM: stop after this shard is written
            stage.write_shard(g, process(group))
            stops.keep(f"{g + 1} of {n_groups} shard(s) of {stage.name} in {stage.dir}")
            if progress is not None:
                progress.update(len(group))
            fault_point(stage.name, g + 1 - first_shard)


def fault_point(stage: str, done: int) -> None:
    """Fault injection for the kill-and-resume tests: with
    ``TOOLFORMER_FAULT=<stage>:<n>[:<signal>]`` in the environment the process
    sends itself the signal (default SIGKILL; e.g. SIGINT) once it has
    completed ``n`` units of work (shards, checkpoints) of that stage, once.
    Unset, this does nothing."""
    import signal

    name, _, rest = os.environ.get("TOOLFORMER_FAULT", "").partition(":")
    n, _, sig = rest.partition(":")
    if name == stage and n.isdigit() and done == int(n):
        os.kill(os.getpid(), getattr(signal, sig or "SIGKILL"))


def fmt_pct(part: int, whole: int) -> str:
    return f"{100.0 * part / whole:.1f} %" if whole else "n/a"


# -- documents scored by the sample stage --------------------------------------
# RUN_DIR/sample/documents.jsonl holds every document (or window of a long
# document) the sample stage scored, once: {"doc_id", "text", "date"}, plus
# "gold_calls" when the corpus record has them (char_start counted in the
# stored text). Later stages refer to documents by doc_id.
DOCUMENTS = "documents.jsonl"
GOLD_CALLS = "gold_calls"


def write_documents(run_dir: str | Path, docs: Iterable[dict]) -> Path:
    path = Path(run_dir) / "sample" / DOCUMENTS
    rows = ({"doc_id": d["doc_id"], "text": d["text"], "date": d.get("date")}
            | ({GOLD_CALLS: d[GOLD_CALLS]} if GOLD_CALLS in d else {}) for d in docs)
    atomic_write_text(path, "".join(dumps(r) + "\n" for r in rows))
    return path


def read_documents(run_dir: str | Path) -> dict[str, dict]:
    """doc_id -> {"doc_id", "text", "date"} (and "gold_calls" if stored), in corpus order."""
    path = Path(run_dir) / "sample" / DOCUMENTS
    if not path.exists():
        raise FileNotFoundError(f"{path}: no scored documents; run the sample stage first")
    return {d["doc_id"]: d for d in read_jsonl(path, ("doc_id",))}
