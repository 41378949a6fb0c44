"""A model folder's own files, checked before anything loads them.

A model folder (weights, tokenizer, ``toolformer.json``) is data from elsewhere: loading it reads no file outside
it and, when it is damaged, fails with one line naming the file (exit 2), not a traceback of the library that
tripped over it.

- :func:`check_own_files`: no file of the folder is a symlink leading out of it (``model.safetensors``,
  ``config.json``, ``toolformer.json``, the tokenizer's files, ...); a symlink to a file inside it is allowed,
  and so is a hub cache snapshot's link into its own repository's ``blobs/``. Its tools' data is checked by
  :func:`toolformer.lm.foldertrust.escape`.
- :func:`check_damage`: ``config.json`` and the other JSON files are JSON objects (nested at most as deep as
  Python's parser goes), the weights are there, and a ``.safetensors`` file is as long as its header says.
- :func:`read_folder_json`: one JSON file of the folder, opened once and checked to be the folder's own.
"""

from __future__ import annotations

import json
import os
import stat
import struct
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

JSON_FILES = ("config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
              "special_tokens_map.json", "added_tokens.json", "vocab.json", "model.safetensors.index.json")
"""The JSON files a model folder may hold: each that is there must be a JSON object."""
WEIGHTS = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin", "pytorch_model.bin.index.json")
"""A model folder holds at least one of these (what ``from_pretrained`` looks for)."""
MAX_HEADER = 100_000_000  # the largest safetensors header the format allows


class FolderFileError(ValueError):
    """A model folder's own file leads out of it, or is missing or damaged (exit 2, naming the file)."""


def _within(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def _hub_blob(link: Path, target: Path) -> bool:
    """``link`` lies in a hub cache snapshot (``models--org--name/snapshots/REV/``) and ``target`` in the blobs
    of the same repository: how the hub cache stores every file."""
    snapshot = link.parent
    repo = snapshot.parent.parent
    return (snapshot.parent.name == "snapshots" and repo.name.startswith("models--")
            and _within(target, repo / "blobs"))


def check_own_files(folder: str | Path) -> None:
    """Every file of ``folder`` (not its subfolders: ``tools/`` is its data's, ``checkpoints/`` is never loaded)
    lies inside it: a symlink leading out raises :class:`FolderFileError` naming it."""
    root = Path(folder).resolve()
    for entry in sorted(os.scandir(root), key=lambda e: e.name):
        if not entry.is_symlink():
            continue
        link = root / entry.name
        target = link.resolve()
        if target.is_dir() or _within(target, root) or _hub_blob(link, target):
            continue
        raise FolderFileError(f"{Path(folder) / entry.name}: a symlink to {target}, outside the model folder; a "
                              "model folder reads no file outside itself: copy the file into the folder")


def parse_json(data: bytes, where: str | Path) -> object:
    """The JSON value in ``data``; bytes that are not UTF-8 JSON, or JSON nested deeper than the parser goes,
    raise :class:`FolderFileError` naming ``where``."""
    try:
        return json.loads(data.decode("utf-8"))
    except UnicodeDecodeError as e:
        raise FolderFileError(f"{where}: not UTF-8 text (byte {e.start})") from None
    except json.JSONDecodeError as e:
        raise FolderFileError(f"{where}: not valid JSON ({e.msg}: line {e.lineno} column {e.colno})") from None
    except RecursionError:
        raise FolderFileError(f"{where}: JSON nested too deeply to read") from None


def read_folder_json(path: str | Path) -> object:
    """The JSON value of the file ``path`` of a model folder, read through one descriptor that is checked to be
    the file of that name inside the folder (not a symlink leading out, :func:`check_own_files`)."""
    path = Path(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as e:
        raise FolderFileError(f"{path}: cannot be read ({e.strerror})") from None
    with open(fd, "rb") as f:
        real = _fd_path(fd)
        root = path.parent.resolve()
        if real is not None and not _within(Path(real), root) and not _hub_blob(root / path.name, Path(real)):
            raise FolderFileError(f"{path}: leads to {real}, outside the model folder; a model folder reads no file "
                                  "outside itself: copy the file into the folder")
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise FolderFileError(f"{path}: not a regular file")
        return parse_json(f.read(), path)


def _fd_path(fd: int) -> str | None:
    """The real path of the file open as ``fd`` (None where the system cannot say)."""
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return None


def check_safetensors(path: Path) -> None:
    """``path`` starts with a safetensors header and is as long as the header says, else FolderFileError."""
    size = path.stat().st_size
    with path.open("rb") as f:
        head = f.read(8)
        n = struct.unpack("<Q", head)[0] if len(head) == 8 else -1
        if not 0 < n <= min(MAX_HEADER, size - 8):
            raise FolderFileError(f"{path}: not a safetensors file (no header): cut short or overwritten")
        header = parse_json(f.read(n), path)
    ends = [v.get("data_offsets", [0, 0])[1] for k, v in header.items() if k != "__metadata__"
            and isinstance(v, dict) and isinstance(v.get("data_offsets"), list) and len(v["data_offsets"]) == 2
            ] if isinstance(header, dict) else None
    if ends is None or not all(isinstance(e, int) for e in ends):
        raise FolderFileError(f"{path}: not a safetensors file (its header is not a map of tensors)")
    need = 8 + n + max(ends, default=0)
    if size < need:
        raise FolderFileError(f"{path}: cut short ({size:,} bytes of the {need:,} its header lists)")


def check_damage(folder: str | Path) -> None:
    """A local model folder has its ``config.json`` and weights, and its JSON and safetensors files can be read;
    else :class:`FolderFileError` naming the file."""
    folder = Path(folder)
    if not (folder / "config.json").is_file():
        raise FolderFileError(f"{folder / 'config.json'}: missing: {folder} is not a model folder "
                              "(save_pretrained writes it)")
    for name in JSON_FILES:
        path = folder / name
        if path.is_file() and not isinstance(parse_json(path.read_bytes(), path), dict):
            raise FolderFileError(f"{path}: not a JSON object")
    if not any((folder / name).is_file() for name in WEIGHTS):
        raise FolderFileError(f"{folder}: no weights ({' or '.join(WEIGHTS[::2])}): not a complete model folder")
    for path in sorted(folder.glob("*.safetensors")):
        check_safetensors(path)


@contextmanager
def loading_errors(folder: str | Path) -> Iterator[None]:
    """What loading ``folder`` with transformers raises about a damaged file (an OSError other than a missing
    path, safetensors' error) as one :class:`FolderFileError` naming the folder."""
    try:
        yield
    except FileNotFoundError:
        raise
    except Exception as e:
        if not isinstance(e, OSError) and type(e).__name__ != "SafetensorError":
            raise
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise FolderFileError(f"{folder}: cannot be loaded ({first})") from None
