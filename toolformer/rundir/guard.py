"""Run folders are owned and locked: a run never destroys what it did not make.

* **Ownership.** When toolformer creates a folder to write into (a run folder,
  an output folder outside it) it writes the marker file ``.toolformer-run``;
  an empty folder is marked the same way. A folder that is not empty and has
  no marker is refused (exit 2, the fix in the message), before anything in it
  is touched. Inside an owned folder the stages delete only their own files
  (:meth:`toolformer.rundir.folder.StageFolder.begin`).
* **Lock.** A command that writes into a folder holds an exclusive
  ``fcntl.flock`` on ``.toolformer-lock`` in it for as long as it runs; the
  kernel releases the lock when the process ends, however it ends. The lock
  file records the holder's PID, start time and command, so a second command
  on the same folder is refused at once with them (exit 2).
* **Launches.** Under ``accelerate launch`` / ``torchrun`` (``WORLD_SIZE`` > 1)
  only the main process (``RANK`` 0) takes the lock; every other process waits
  until it is held by the main process of its own launch (the same
  ``MASTER_ADDR:MASTER_PORT``) and is refused when another command holds it.
* **Model folders.** ``finetune.output_dir`` may not be, or lie inside, a
  folder the fine-tune reads (``model.path``, ``model.tokenizer``,
  ``finetune.dataset``): saving there would overwrite the base model.
"""

from __future__ import annotations

import fcntl
import json
import os
import shlex
import socket
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

MARKER = ".toolformer-run"
LOCK = ".toolformer-lock"
JOIN_TIMEOUT_S = 120.0  # how long a non-main process waits for its main process to lock the folder


class RunFolderError(ValueError):
    """A folder may not be used (not ours, in use, or overlapping a model folder read)."""


def launch_id() -> str | None:
    """What the processes of one ``accelerate launch``/``torchrun`` share: the
    rendezvous address; None for a single process."""
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return None
    return f"{os.environ.get('MASTER_ADDR', '')}:{os.environ.get('MASTER_PORT', '')}"


def is_main_process() -> bool:
    return launch_id() is None or int(os.environ.get("RANK", "0")) == 0


def _foreign_entries(path: Path) -> list[str]:
    """Names in ``path`` that make it somebody else's folder: any, unless it has our marker."""
    if not path.exists() or (path / MARKER).exists():
        return []
    return sorted(p.name for p in path.iterdir() if p.name != LOCK)


def check_owned(path: Path, key: str) -> None:
    """Refuse a folder that is not empty and has no marker (touching nothing)."""
    if path.exists() and not path.is_dir():
        raise RunFolderError(f"{key}: {path} is a file, not a folder; choose a folder")
    names = _foreign_entries(path)
    if names:
        shown = ", ".join(names[:5]) + (", ..." if len(names) > 5 else "")
        raise RunFolderError(
            f"{key}: {path} is not empty ({shown}) and toolformer did not create it (no {MARKER} in it); "
            f"toolformer refuses to write where it could overwrite or delete files it did not make. "
            f"Fix: set {key} to a new or empty folder; if {path} is a run folder of an older toolformer, "
            f"mark it as one with `touch {path / MARKER}`")


def _holder(path: Path) -> dict:
    try:
        return json.loads((path / LOCK).read_text(encoding="utf-8") or "{}")
    except (OSError, json.JSONDecodeError):
        return {}


def _wait_for_holder(path: Path, timeout_s: float = 2.0) -> dict:
    """The holder of a lock found taken. It writes its record right after taking
    the lock; a command that lost a race by microseconds waits that long."""
    deadline = time.monotonic() + timeout_s
    while True:
        holder = _holder(path)
        if holder.get("pid") or time.monotonic() > deadline:
            return holder
        time.sleep(0.02)


def _alive(holder: dict) -> bool:
    """Whether the recorded holder still runs (always assumed on another host)."""
    pid = holder.get("pid")
    if not isinstance(pid, int):
        return False
    if holder.get("host") != socket.gethostname():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _in_use(path: Path, key: str, holder: dict) -> str:
    who = (f"process {holder['pid']} (started {holder.get('started', '?')}: {holder.get('command', '?')})"
           if holder.get("pid") else "another process")
    return (f"{key}: {path} is in use by {who}; two commands on one folder would mix or delete each other's "
            f"files. Wait for it to finish (or stop it), or choose another {key}")


def mark(path: Path) -> None:
    """Create ``path`` if needed and write the marker that makes it toolformer's
    (written in place, not renamed: its existence is what counts, and another
    process of the launch must never see a temporary file instead)."""
    path.mkdir(parents=True, exist_ok=True)
    if not (path / MARKER).exists():
        (path / MARKER).write_text(json.dumps({
            "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "note": "made by toolformer, which deletes or overwrites only its own files in this folder",
        }) + "\n", encoding="utf-8")


@contextmanager
def claim(folder: str | Path, key: str = "run_dir") -> Iterator[Path]:
    """Hold ``folder`` for the duration of the block: refuse a folder that is not
    ours or that another command holds; create and mark it if new; lock it."""
    path = Path(folder)
    if not is_main_process():
        _join_launch(path, key)
        yield path
        return
    check_owned(path, key)  # before anything is created in it
    path.mkdir(parents=True, exist_ok=True)
    fd = os.open(path / LOCK, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise RunFolderError(_in_use(path, key, _wait_for_holder(path))) from None
        try:
            holder = {"pid": os.getpid(), "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                      "command": shlex.join(["toolformer", *sys.argv[1:]]), "host": socket.gethostname(),
                      "launch": launch_id()}
            os.ftruncate(fd, 0)
            os.pwrite(fd, (json.dumps(holder) + "\n").encode(), 0)
            check_owned(path, key)  # files may have appeared since the first look
            mark(path)
            yield path
        finally:
            os.ftruncate(fd, 0)  # still holding the lock: nobody reads a stale holder
    finally:
        os.close(fd)  # releases the lock


def _join_launch(path: Path, key: str) -> None:
    """A non-main process: wait until the main process of this launch holds the lock."""
    mine = launch_id()
    deadline = time.monotonic() + JOIN_TIMEOUT_S
    while True:
        holder = _holder(path)
        if holder.get("pid") and _alive(holder):
            if holder.get("launch") == mine:
                return
            raise RunFolderError(_in_use(path, key, holder))
        if time.monotonic() > deadline:
            raise RunFolderError(f"{key}: {path}: the main process of this launch ({mine}) did not lock it "
                                 f"within {JOIN_TIMEOUT_S:.0f} s")
        time.sleep(0.2)


def check_finetune_output(cfg) -> None:
    """Refuse a fine-tune output folder that is, or lies inside, a folder it reads."""
    out_key = "finetune.output_dir" if cfg.finetune.output_dir else "run_dir (the tuned model goes to RUN_DIR/model)"
    out = Path(cfg.finetune.output_dir or Path(cfg.run_dir) / "model").expanduser().resolve()
    reads = {"model.path": cfg.model.path, "model.tokenizer": cfg.model.tokenizer,
             "finetune.dataset": cfg.finetune.dataset}
    for key, value in reads.items():
        if not value or not Path(value).expanduser().exists():
            continue  # not set, or a hub id
        src = Path(value).expanduser().resolve()
        if out == src or src in out.parents:
            where = "is the same folder as" if out == src else "lies inside"
            raise RunFolderError(f"{out_key}: {out} {where} {key} ({value}), which the fine-tune reads; saving "
                                 f"the tuned model there would overwrite it. Set finetune.output_dir to another folder")
