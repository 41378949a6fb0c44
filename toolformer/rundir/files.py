"""Files written whole and read back checked: atomic writes (a temporary name renamed, removed when the
write fails; a full disk names the file), JSON Lines read with errors naming the file and line, and the
record counts and sha256 digests that manifests list (:mod:`toolformer.rundir.folder`)."""

from __future__ import annotations

import errno
import hashlib
import json
import os
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

from toolformer.config.text import decode_utf8, parse_json


class IntegrityError(ValueError):
    """A file of a run folder is missing, cut short, changed since its manifest was written, or unreadable
    (the command line exits with status 2)."""


LOW_SPACE = 1 << 20
"""Free bytes under which a file system counts as full when a library's write fails without saying why."""


def disk_full(e: BaseException, where: str | Path | None = None) -> bool:
    """An OSError ENOSPC, or a library's error wrapping one (safetensors' SafetensorError). With ``where`` (the
    path being written), also a library's write error that does not say why -- ``torch.save`` raises
    RuntimeError "basic_ios::clear: iostream error" or "unexpected pos" -- while the file system holding
    ``where`` has less than :data:`LOW_SPACE` left (call this before deleting what the failed write left)."""
    if isinstance(e, OSError) and e.errno == errno.ENOSPC:
        return True
    if "No space left on device" in str(e) or "StorageFull" in str(e):
        return True
    return where is not None and isinstance(e, RuntimeError) and free_bytes(Path(where)) < LOW_SPACE


def free_bytes(path: Path) -> int:
    """Bytes an unprivileged write may still use on the file system holding ``path`` (or its nearest existing
    folder); a very large number when that cannot be told."""
    for p in (path, *path.parents):
        try:
            st = os.statvfs(p)
        except OSError:
            continue
        return st.f_bavail * st.f_frsize
    return 1 << 62


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
    mode, encoding = ("wb", None) if isinstance(content, bytes) else ("w", "utf-8")
    with atomic_path(path) as tmp, tmp.open(mode, encoding=encoding) as f:
        f.write(content)
        f.flush()
        os.fsync(f.fileno())


@contextmanager
def atomic_path(path: Path) -> Iterator[Path]:
    """A temporary path (``.NAME.tmp-PID``) to write ``path``'s content to, renamed
    to ``path`` when the block ends without error and removed when it fails."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        yield tmp
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
    with path.open("rb") as f:
        yield from jsonl_records(_decoded(f, path), path)


def _decoded(lines: Iterable[bytes], where: Path) -> Iterator[str]:
    """``lines`` decoded as UTF-8; a line that is not raises ValueError naming the file and line."""
    for n, line in enumerate(lines, 1):
        yield decode_utf8(line, where, "{where}:{line}: invalid UTF-8 (byte {offset}: {reason})", line=n)


def jsonl_records(lines: Iterable[str], where: str | Path) -> Iterator[tuple[int, dict]]:
    """:func:`iter_jsonl` over lines already read (``where`` names them in errors)."""
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            rec = parse_json(line)
        except json.JSONDecodeError as e:
            raise ValueError(f"{where}:{n}: invalid JSON: {e.msg}") from None
        if not isinstance(rec, dict):
            raise ValueError(f"{where}:{n}: expected a JSON object")
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


def read_json(path: Path, remedy: str) -> dict:
    """The JSON object in ``path``; a file that is not one (cut short, garbled, not UTF-8) raises IntegrityError
    naming it, followed by ``remedy``."""
    text = decode_utf8(path.read_bytes(), path, "{where}: unreadable (invalid UTF-8 at byte {offset}): {remedy}",
                       error=IntegrityError, remedy=remedy)
    try:
        data = parse_json(text)
    except json.JSONDecodeError as e:
        raise IntegrityError(f"{path}: unreadable (invalid JSON: {e.msg}, line {e.lineno} column {e.colno}): "
                             f"{remedy}") from None
    if not isinstance(data, dict):
        raise IntegrityError(f"{path}: unreadable (not a JSON object): {remedy}")
    return data


def file_digest(path: Path) -> dict:
    """``{"records": non-blank lines, "sha256": of the bytes}`` of a file of records, read once."""
    digest, n = hashlib.sha256(), 0
    with open(path, "rb") as f:
        for line in f:
            digest.update(line)
            n += bool(line.strip())
    return {"records": n, "sha256": digest.hexdigest()}


def count_records(path: Path) -> int:
    """Non-blank lines of a JSONL file, without parsing them."""
    with open(path, "rb") as f:
        return sum(1 for line in f if line.strip())


def check_sqlite(path: Path, remedy: str) -> None:
    """Raise IntegrityError naming ``path`` (followed by ``remedy``) unless it starts with an SQLite header and
    is as long as that header says (a file cut short fails here, before any query)."""
    with open(path, "rb") as f:
        head = f.read(100)
    if len(head) < 100 or not head.startswith(b"SQLite format 3\x00"):
        raise IntegrityError(f"{path}: not an SQLite database (cut short or overwritten): {remedy}")
    page_size = int.from_bytes(head[16:18], "big")
    page_size = 65536 if page_size == 1 else page_size
    pages = int.from_bytes(head[28:32], "big")
    size = path.stat().st_size
    if pages and head[24:28] == head[92:96] and size < page_size * pages:  # the page count is valid: see the format
        raise IntegrityError(f"{path}: cut short ({size:,} bytes of {page_size * pages:,}): {remedy}")
