"""Tool data read once, through a descriptor checked after opening.

A model folder's data (``tools/knowledge.jsonl``, its BM25 index ``tools/knowledge.jsonl.bm25``) is checked
when the folder is loaded (:func:`toolformer.lm.foldertrust.escape`), but a tool opens it later, at its first
call: the folder may have changed in between (a file swapped for a symlink out of it). So loading a folder pins
the real path of each data file it checked (:func:`pin`), and a pinned file is opened once, never through a
link, and read only when the descriptor is of the file at exactly that path with one name (:func:`open_data`:
the path of ``/proc/self/fd/N``; where there is none, device and inode against the path's); else a ``bad_data``
error naming it. Its index is read and written through descriptors of the folder checked the same way
(:func:`load_index`, :func:`save_index`): read from a private copy, written as new files renamed into place,
never through a link or into a file with another name, and kept in memory when that cannot be done; copied into
another folder (:func:`copy_data`, ``save_pretrained``), it is read the same way. A path no folder pinned (the
user's own data) is opened as it is named.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import stat
import tempfile
from pathlib import Path

from toolformer.tools.base import ToolError

INDEX_SUFFIX = ".bm25"
STAMP = "stamp.txt"  # in an index folder: the size and time of the file it indexes, written last

_PINNED: dict[str, str] = {}  # real path of a data file or its index folder -> the file that named it


def pin(path: str | Path, source: str) -> None:
    """Read the data file ``path`` (a real path: no link in it) and its index ``PATH.bm25`` only as the files at
    exactly those paths; ``source`` (a model folder's ``toolformer.json``) named them."""
    _PINNED[str(path)] = _PINNED[str(path) + INDEX_SUFFIX] = source


def pinned(path: str | Path) -> str | None:
    """The file that pinned ``path`` (:func:`pin`), or None."""
    return _PINNED.get(str(path))


def fd_path(fd: int) -> str | None:
    """The real path of what is open as ``fd``; None where the system cannot say."""
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return None


def same_file(fd: int, path: str) -> bool:
    """``fd`` is open on what the real path ``path`` names: the file, not one a link in the path leads to."""
    real = fd_path(fd)
    if real is not None:
        return real == path
    try:
        return os.path.realpath(path) == path and os.path.samestat(os.stat(path, follow_symlinks=False),
                                                                    os.fstat(fd))
    except OSError:
        return False


def open_data(path: Path, hint: str) -> int:
    """A descriptor for reading the data file ``path``; a pinned one is opened without following a link and
    checked to be the file pinned, with one name, else ToolError ``bad_data``. OSError as ``os.open`` raises."""
    source = pinned(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | (os.O_NOFOLLOW if source else 0))
    except OSError as e:
        if source and e.errno == errno.ELOOP:
            raise ToolError("bad_data", f"{path}: now a symlink, not the file {source} named when it was loaded; "
                                        "a model folder's data is read only from inside it", hint) from None
        raise
    if not source:
        return fd
    st = os.fstat(fd)
    if not same_file(fd, str(path)):
        real = fd_path(fd)
        os.close(fd)
        raise ToolError("bad_data", f"{path}: now leads to {real or 'another file'}, not the file {source} "
                                    "named when it was loaded; a model folder's data is read only from inside it",
                        hint)
    if stat.S_ISREG(st.st_mode) and st.st_nlink > 1:
        os.close(fd)
        raise ToolError("bad_data", f"{path}: now has {st.st_nlink} names (a hard link: another may lie outside "
                                    f"the folder {source} describes)", hint)
    return fd


def _index_dir(path: Path, create: bool) -> int | None:
    """A descriptor of the pinned index folder ``path``, opened without a link from its parent, which must be the
    folder pinned (created when ``create``); None when there is none or it is not that folder."""
    try:
        parent = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return None
    try:
        if not same_file(parent, str(path.parent)):
            return None
        if create:
            with contextlib.suppress(FileExistsError):
                os.mkdir(path.name, dir_fd=parent)
        return os.open(path.name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=parent)
    except OSError:
        return None
    finally:
        os.close(parent)


def _copy_index(folder: int, into: Path) -> bool:
    """Copy the index files of the open folder ``folder`` into ``into``, each opened without a link; False when
    one is not a regular file with one name."""
    for name in os.listdir(folder):
        try:
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=folder)
        except OSError:
            return False
        with open(fd, "rb") as f:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or st.st_nlink > 1:
                return False
            (into / name).write_bytes(f.read())
    return True


def load_index(path: Path, stamp: str):
    """The bm25s index saved in ``path`` for the data whose size and time are ``stamp``, or None (none saved,
    another stamp, or a pinned index that is not the folder's own)."""
    import bm25s

    if not pinned(path):
        saved = path / STAMP
        return bm25s.BM25.load(str(path)) if saved.exists() and saved.read_text() == stamp else None
    folder = _index_dir(path, create=False)
    if folder is None:
        return None
    try:
        with tempfile.TemporaryDirectory() as tmp:
            if not _copy_index(folder, Path(tmp)) or not (Path(tmp) / STAMP).is_file() or \
                    (Path(tmp) / STAMP).read_text() != stamp:
                return None
            return bm25s.BM25.load(tmp)
    finally:
        os.close(folder)


def _write_in(folder: int, name: str, data: bytes) -> None:
    """Write ``name`` in the open folder ``folder``: a new file renamed over the name (never written through)."""
    tmp = f".{name}.tmp-{os.getpid()}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644, dir_fd=folder)
    try:
        with open(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, name, src_dir_fd=folder, dst_dir_fd=folder)
    except BaseException:
        os.unlink(tmp, dir_fd=folder)
        raise


def save_index(retriever, path: Path, stamp: str) -> None:
    """Save ``retriever`` into the index folder ``path`` with ``stamp`` (written last); where that cannot be
    done (a read-only folder, a pinned one that is not the folder's own) the index stays in memory only."""
    if not pinned(path):
        try:
            path.mkdir(parents=True, exist_ok=True)
            retriever.save(str(path))
            (path / STAMP).write_text(stamp)
        except OSError:
            pass  # a read-only data folder: keep the index in memory only
        return
    folder = _index_dir(path, create=True)
    if folder is None:
        return
    try:
        with tempfile.TemporaryDirectory() as tmp:
            retriever.save(tmp)
            for name in sorted(os.listdir(tmp)):
                _write_in(folder, name, (Path(tmp) / name).read_bytes())
            _write_in(folder, STAMP, stamp.encode())
    except OSError:
        pass
    finally:
        os.close(folder)


def remove_data(path: Path) -> None:
    """Remove the file, folder or link ``path`` (a link, not what it leads to)."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()


def copy_data(src: Path, dest: Path) -> None:
    """Copy a data file or folder over ``dest`` through a temporary name, with its modification times (a BM25
    index is valid for its file's size and time). A pinned file is read through :func:`open_data`; a pinned
    index folder is copied with its links as links, never read through them."""
    tmp = dest.with_name(dest.name + ".tmp")
    remove_data(tmp)
    if src.is_dir():
        shutil.copytree(src, tmp, symlinks=bool(pinned(src)))
    else:
        with open(open_data(src, ""), "rb") as f, open(tmp, "wb") as out:
            st = os.fstat(f.fileno())
            if not stat.S_ISREG(st.st_mode):
                raise ValueError(f"{src}: not a regular file: tool data is copied only from one")
            shutil.copyfileobj(f, out)
        os.chmod(tmp, stat.S_IMODE(st.st_mode))
        os.utime(tmp, ns=(st.st_atime_ns, st.st_mtime_ns))
    remove_data(dest)
    os.replace(tmp, dest)
