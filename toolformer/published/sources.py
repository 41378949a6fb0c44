"""The published files this world reads: their sha256 (as their sources publish them), where to fetch them, the
check that runs before anything is built (``check_data``) and ``toolformer published fetch``.

``relations.jsonl`` is checked line by line: the line of each relation whose facts the world reads has its
recorded sha256 (the file may hold more relations). Every other file is checked whole. ``check_data`` reads each
file once and returns the bytes it checked: the world is built from those, never from the files read again (a
file replaced after the check is not read)."""

from __future__ import annotations

import hashlib
import http.client
import json
import os
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

from toolformer.rundir import stops
from toolformer.worlds.files import sha256_file

FETCH_COMMAND = "toolformer published fetch --out DIR"
MARKER = ".toolformer-fetch"
"""The file ``fetch`` writes into a folder it made (or found empty, or holding only published files): its own."""
TEMP = ".fetch-"
"""The prefix of a download under way (a temporary file beside its data file, renamed when checked)."""
TIMEOUT_S = 300.0
"""Seconds a file may take to download (``--timeout``): a source that drips bytes is refused after it."""
SOCKET_TIMEOUT_S = 60.0
CHUNK = 1 << 16

FILES: dict[str, str] = {
    "lama/trex/P101.jsonl": "d3bfb3039effe21d51882e62390ec4bcaa1b3271c1573c2d7fbc9510ec7f6567",
    "lama/trex/P103.jsonl": "af67b0b4ddb78d72c869e239471d8cd9bff694979f364dc55bad264f82680a60",
    "lama/trex/P106.jsonl": "38419c902b10798de72ec9b85012d898012c48f2c7279e5c7308acea7fb7c1a9",
    "lama/trex/P127.jsonl": "f360dea859ff39a95dccf3eee4a88dce8ba48dc28cb4901c165d6234dcbb9224",
    "lama/trex/P1303.jsonl": "cf6848f7b9fe882977706500fca669dd8050260fb934accaf5f6a47f1e224664",
    "lama/trex/P136.jsonl": "bc685add733237951dc6257b85152406c448479c9bd70a609bbf410b0e4acb9a",
    "lama/trex/P138.jsonl": "3b56101e1e8d87fd8e76ea67a8604a7a0c97cbcced5be8fae98599f43242d66f",
    "lama/trex/P140.jsonl": "e3f761f480880b345ba232013253c86103d831182915c72c18586f7bb463aa29",
    "lama/trex/P159.jsonl": "fc47af91adb94e0dc30f497edea51c93defd04a501b1829cad18024aa4f2600d",
    "lama/trex/P178.jsonl": "01bfe37b8652b7eb2634a34050201dd713cf70ee6b4a9be3cddeffe9be9ce939",
    "lama/trex/P19.jsonl": "43bd78be684935218e0ff5bdd498a07a7716d0cb61d6a51e5421b8090b7d38d3",
    "lama/trex/P264.jsonl": "651041064738a606f1419ffb0e62af0934ceec5919b8ee464e0685b0a09d8119",
    "lama/trex/P27.jsonl": "b50998606f7b2b1694f7b586acf24e2622c8fb71699fd8969aeaedc7185de585",
    "lama/trex/P31.jsonl": "b26d5d60f926db14618e03dfa2864a937ab856f13450e055e97eb24a1883d17e",
    "lama/trex/P364.jsonl": "ed36cdb62d89ccde732c43ed2548d95c1ef40a35f87dbd0a903f74f7fe3e50a6",
    "lama/trex/P39.jsonl": "3dbdf5979466eee1978dcbe9d9d3ace521e97a33313056c0c76d8c379aa6cbbd",
    "lama/trex/P407.jsonl": "63d138722f694d860622d59cf20cccd76844704aa43b59159d12d89ce502d712",
    "lama/trex/P413.jsonl": "d1c5779b085a5ed6f1da4ab490420a0ad1e3772eabb0a9d9dd2490fd8cd5a090",
    "lama/trex/P463.jsonl": "76ea531241ee81eabedc22ad1b49d133a83c45f722862ad10b49d81aa6b92910",
    "lama/trex/P495.jsonl": "972af554eb265e4f86bc27bbb9cdfa68d28ba6194aa0f993c55c93c9f28579c6",
    "lama/trex/P527.jsonl": "7de7e2bd86f3eab8fed7a26a558bc830a1adfb53b9d3afaf49b4da06c97264c4",
    "lama/trex/P937.jsonl": "63c2398058f91b792754e2bb29d06fe43687e21151a8d01ca26f26daa36a9974",
    "lama/trex/relations.jsonl": "71aba4e901c0b3cfc1752261ed50741f5b8d71f5c5f5a297e07ed42ae396da0d",
    "math/ASDiv.xml": "ef8904068482919ac48c8eeaaf6df344b8a308ba66d048c2d4d87eab82dc4929",
    "math/gsm8k/test.jsonl": "3730d312f6e3440559ace48831e51066acaca737f6eabec99bccb9e4b3c39d14",
    "math/gsm8k/train.jsonl": "17f347dc51477c50d4efb83959dbb7c56297aba886e5544ee2aaed3024813465",
    "math/mawps/MAWPS.json": "00fbff19273045bba127ea4e881e381c813b4c452c139cf2c5c996addf131e9a",
    "math/mawps/mawps_fold0_test.orig.jsonl": "32b13aa0476a11c8c17391d86ae1745fd29c021772d7871ad3776cd0a27f41c4",
    "math/mawps/mawps_single.json": "410d1eb2ef5344c3b35f3c6fed88c47c9711845a5ecfeaf74985bfa7944eb7f1",
    "math/mawps/single_testset.json": "f708eb6cad56f2ad6bd09e266e83f8011c59edf486e487cfc9c06c22e021cf5e",
    "math/mawps/testset.json": "f0d767e8f8bb979358f02a38a07b9363879ab458d945de77cfc475d4942baa27",
    "math/mawps/trainset.json": "a4a41869f6474ef7b69730d73620570a8429a5d91769b3f3907949d15fcfeb1a",
    "math/mawps/validset.json": "1740756acdefae3740a4f4afd8ad14497d41933bcb6d70e720780a41d712b11f",
}
"""Relative path in the data folder → sha256 of the file as published."""

SIZES: dict[str, int] = {
    "lama/trex/P101.jsonl": 1_098_177,
    "lama/trex/P103.jsonl": 1_659_072,
    "lama/trex/P106.jsonl": 839_235,
    "lama/trex/P127.jsonl": 2_190_705,
    "lama/trex/P1303.jsonl": 1_196_430,
    "lama/trex/P136.jsonl": 1_715_356,
    "lama/trex/P138.jsonl": 3_032_737,
    "lama/trex/P140.jsonl": 1_206_129,
    "lama/trex/P159.jsonl": 2_146_613,
    "lama/trex/P178.jsonl": 2_247_236,
    "lama/trex/P19.jsonl": 781_810,
    "lama/trex/P264.jsonl": 1_046_849,
    "lama/trex/P27.jsonl": 1_394_712,
    "lama/trex/P31.jsonl": 1_407_553,
    "lama/trex/P364.jsonl": 946_051,
    "lama/trex/P39.jsonl": 1_195_492,
    "lama/trex/P407.jsonl": 1_324_101,
    "lama/trex/P413.jsonl": 790_220,
    "lama/trex/P463.jsonl": 924_820,
    "lama/trex/P495.jsonl": 1_539_183,
    "lama/trex/P527.jsonl": 3_818_371,
    "lama/trex/P937.jsonl": 1_113_440,
    "lama/trex/relations.jsonl": 9_240,
    "math/ASDiv.xml": 947_401,
    "math/gsm8k/test.jsonl": 749_738,
    "math/gsm8k/train.jsonl": 4_166_206,
    "math/mawps/MAWPS.json": 925_855,
    "math/mawps/mawps_fold0_test.orig.jsonl": 848_053,
    "math/mawps/mawps_single.json": 648_923,
    "math/mawps/single_testset.json": 64_551,
    "math/mawps/testset.json": 106_547,
    "math/mawps/trainset.json": 846_814,
    "math/mawps/validset.json": 107_482,
}
"""Relative path → its size in bytes as published (measured from the files of FILES): ``fetch`` refuses a
download of more (``relations.jsonl``, checked by line and allowed to hold more relations: up to
RELATIONS_MAX_BYTES)."""
RELATIONS_MAX_BYTES = 1 << 20

RELATIONS = "lama/trex/relations.jsonl"
RELATION_LINES: dict[str, str] = {
    "P101": "ca54a20880bdaff83075176bceda37a7ab4bc4b1a15e1deaecf0fb254e1cfd34",
    "P103": "dcd92c928269ad911ed621152ecbfd16dcac5f77f6c2c9898c23c738284856a4",
    "P106": "a73d07908503c89964d6553fdb708a3e1dc447269a5fd7a905a5d1db945712e9",
    "P127": "a9e1d18516e93e3481e4dd3acab5df05a607296d690ab7f3c60a1c8e8407be65",
    "P1303": "4619436069d99cb005e6c915b38a468826308cfa38b0e462a5d92ecffe014b68",
    "P136": "da3bf6c64f5d365f5cd152b48f1edf06d3d8137deb28625c97303bafbba17840",
    "P138": "34958f826073681c3ebb2d5afab558a1f89bec337e626964824ce6868ae2ed5d",
    "P140": "c1ff9f5f5e8c69c8ff50be530fbb10ffbefc58e00645a94a47e90198e735de0d",
    "P159": "a144ea2bc83b806458ff38996cfab4c2a396d67d98c05adab4df5091d690bdc5",
    "P178": "d3ca73c769bb415da27e82e5ce9b321b933bed4e7ecd1ff3130647be9dd96f55",
    "P19": "32d0865f7ea80d31a1fd1016267ff332b1f5323867887779a40ee4f27b7b4245",
    "P264": "e792c1dd11a11421c8721aed93a0e5ecba4f06ed546b514977cbe993ca932366",
    "P27": "bed0caa5ded2ca515939eb7c7213b31b9dc2250302feb50b881506aa76917afb",
    "P31": "f543050a17db88f4f000536204e836d0791f7e1152fe0348438f338eaf94f4ea",
    "P364": "85bf58581645f6181082ed17257871d5bae300b4b712817bf5c91b3eba6b1389",
    "P39": "699f7a4785f7b2faf7969de41103ac15d8b896bdf66d69e5b790de47e615c598",
    "P407": "4bf5aa1c0807ab556f70af2dea2bac7f3f5604fafe692ca17b90c390379e6e9b",
    "P413": "c0c2cf0276faa44e94f4c1d99d114b1780e28188fc9c5c6765856038429b7531",
    "P463": "965341bf648f49a5bf38d28a1e90652d12b231a9fcb0d8cd4b25340e210a638c",
    "P495": "9ec804b23465a63181b793566cc71e4ebd1174c579a1e4df65a23ef432ce416e",
    "P527": "8c311640ce19aa345e131a3927580a71a9d266b7bd47306f155a61f3e494169a",
    "P937": "3177dbcb975dc5e9222a037a19862e57993761b6b5f8dafd8033965c0961d147",
}
"""Relation id → sha256 of its line in relations.jsonl (without the line break)."""

READ = ("math/gsm8k/train.jsonl", "math/gsm8k/test.jsonl", "math/ASDiv.xml", "math/mawps/trainset.json",
        "math/mawps/validset.json", "math/mawps/testset.json",
        *sorted(f"lama/trex/{r}.jsonl" for r in RELATION_LINES), RELATIONS)
"""The files the world reads (the others of FILES are published beside them and checked when present)."""

_RAW = "https://raw.githubusercontent.com/"
SOURCES: dict[str, str] = {
    "math/gsm8k/": _RAW + "openai/grade-school-math/3101c7d/grade_school_math/data/",
    "math/ASDiv.xml": _RAW + "chaochun/nlu-asdiv-dataset/883f90a/dataset/ASDiv.xml",
    "math/mawps/single_testset.json": _RAW + "LYH-YF/MWPToolkit/0993beb/dataset/mawps-single/testset.json",
    "math/mawps/mawps_single.json": _RAW + "LYH-YF/MWPToolkit/0993beb/dataset/mawps-single/mawps_single.json",
    "math/mawps/": _RAW + "LYH-YF/MWPToolkit/0993beb/dataset/mawps/",
    "lama/trex/relations.jsonl": _RAW + "norakassner/BERT-kNN/f9c832b/data/relations.jsonl",
    "lama/trex/": _RAW + "norakassner/BERT-kNN/f9c832b/data/TREx/",
}
"""Where each file is published (repository @ commit); the longest matching key wins, a folder's key takes the
file's name."""


class DataError(ValueError):
    """A published file is missing or not as published: the message names it and the command that fetches it."""


def source_url(rel: str, base: str = "") -> str:
    """The URL of ``rel``: under ``base`` (a mirror of the data folder's layout, e.g. ``file:///copy/``) when
    given, else its source."""
    if base:
        return base.rstrip("/") + "/" + rel
    key = max((k for k in SOURCES if rel == k or (k.endswith("/") and rel.startswith(k))), key=len)
    return SOURCES[key] + (rel[len(key):] if key.endswith("/") else "")


def relation_lines(raw: bytes) -> dict[str, str]:
    """Relation id → sha256 of its line, for every line of ``raw`` (relations.jsonl's bytes) that is a JSON object
    with a relation."""
    out = {}
    for line in raw.split(b"\n"):
        try:
            rec = json.loads(line)
        except (ValueError, RecursionError):
            continue
        if isinstance(rec, dict) and isinstance(rec.get("relation"), str):
            out[rec["relation"]] = hashlib.sha256(line.rstrip(b"\r")).hexdigest()
    return out


def file_problem(folder: Path, rel: str) -> str | None:
    """Why ``folder/rel`` is not the published file, or None when it is."""
    path = folder / rel
    return "missing" if not path.is_file() else _content_problem(path, rel)


def _content_problem(path: Path, rel: str) -> str | None:
    """Why the file at ``path`` is not the published ``rel``, or None when it is."""
    if rel == RELATIONS:
        return bytes_problem(path.read_bytes(), rel)
    digest = sha256_file(path)
    return None if digest == FILES[rel] else f"sha256 {digest[:12]}… is not the published {FILES[rel][:12]}…"


def bytes_problem(raw: bytes, rel: str) -> str | None:
    """Why ``raw`` is not the published ``rel``, or None when it is."""
    if rel == RELATIONS:
        found = relation_lines(raw)
        bad = [r for r, h in RELATION_LINES.items() if found.get(r) != h]
        return f"the line of {', '.join(bad[:3])}{' ...' if len(bad) > 3 else ''} is not as published" if bad else None
    digest = hashlib.sha256(raw).hexdigest()
    return None if digest == FILES[rel] else f"sha256 {digest[:12]}… is not the published {FILES[rel][:12]}…"


def read_data(folder: str | Path) -> dict[str, bytes]:
    """The bytes of each file the world reads that ``folder`` holds (relative path → bytes), each read once;
    nothing checked here (:func:`check_data` does)."""
    folder = Path(folder)
    return {rel: (folder / rel).read_bytes() for rel in READ if (folder / rel).is_file()}


def check_data(folder: str | Path) -> dict[str, bytes]:
    """The bytes of every file the world reads (relative path → bytes, :func:`read_data`), each checked against
    its published sha256: the world reads these, never the files again. Else :class:`DataError` naming the
    first file that is missing or not as published and the command that fetches them."""
    files = read_data(folder)
    for rel in READ:
        why = "missing" if rel not in files else bytes_problem(files[rel], rel)
        if why:
            raise DataError(f"{Path(folder) / rel}: {why}; fetch the published files with `{FETCH_COMMAND}` (or set "
                            "published.data_dir / $TOOLFORMER_PUBLISHED_DATA to a folder that has them)")
    return files


def size_limit(rel: str) -> int:
    """The most bytes ``fetch`` accepts for ``rel``: its published size (``relations.jsonl``: a generous bound)."""
    return max(RELATIONS_MAX_BYTES, SIZES.get(rel, 0)) if rel == RELATIONS else SIZES[rel]


def _layout_folders(files: tuple[str, ...] | list[str]) -> set[str]:
    """Every folder of the published layout that holds one of ``files`` (``math``, ``math/gsm8k``, ...)."""
    return {"/".join(rel.split("/")[:k]) for rel in files for k in range(1, rel.count("/") + 1)}


def foreign_entries(out: Path) -> list[str]:
    """Paths under ``out`` that make it somebody else's folder: none when fetch marked it (MARKER), else every
    entry that is not a folder or file of the published layout (nor a download of fetch's under way)."""
    if not out.is_dir() or (out / MARKER).is_file():
        return []
    folders, found, todo = _layout_folders(list(FILES)), [], [""]
    while todo:
        sub = todo.pop()
        with os.scandir(out / sub) as entries:
            for e in entries:
                rel = f"{sub}/{e.name}" if sub else e.name
                if e.is_dir(follow_symlinks=False) and rel in folders:
                    todo.append(rel)
                elif not (e.is_file(follow_symlinks=False) and (rel in FILES or sub and e.name.startswith(TEMP))):
                    found.append(rel)
    return sorted(found)


def _in_the_way(out: Path, rel: str) -> str | None:
    """Why ``out/rel`` cannot be written whatever ``--force`` says (a folder there, a file at one of its folders)."""
    for parent in reversed(Path(rel).parents[:-1]):
        if (out / parent).exists() and not (out / parent).is_dir():
            return f"{out / parent}: a file where fetch needs a folder for {rel}; move it away or choose another --out"
    if (out / rel).is_dir():
        return f"{out / rel}: a folder where the published file {rel} goes; move it away or choose another --out"
    return None


def check_out(out: Path, files: tuple[str, ...], force: bool) -> list[str]:
    """Refuse ``out`` (DataError, exit 2) before anything in it is touched: a file; a folder or file in the way of
    a data file; a folder of the user's (not empty, not marked by fetch, holding more than the published layout)
    unless ``force``; a data file that is not the published one unless ``force``. Returns the files to fetch."""
    if out.exists() and not out.is_dir():
        raise DataError(f"--out: {out} is a file, not a folder; choose a folder for the published files")
    for rel in files:
        why = _in_the_way(out, rel)
        if why:
            raise DataError(why)
    foreign = [] if force else foreign_entries(out)
    if foreign:
        shown = ", ".join(foreign[:5]) + (", ..." if len(foreign) > 5 else "")
        raise DataError(f"--out: {out} holds files fetch did not write ({shown}) and no {MARKER}; fetch refuses to "
                        "write where it could replace files it did not make. Choose a new or empty folder, or pass "
                        "--force to write the published files into it (only their own paths are written)")
    todo = []
    for rel in files:
        dest = out / rel
        present = dest.exists() or dest.is_symlink()
        why = _content_problem(dest, rel) if dest.is_file() else ("not a regular file" if present else None)
        if why and not force:
            raise DataError(f"{dest}: not the published {rel} ({why}); pass --force to replace it with the "
                            "published file")
        if why or not present:
            todo.append(rel)
    return todo


def _chunks(url: str, rel: str, timeout_s: float) -> Iterator[bytes]:
    """The bytes of ``url``, refused (DataError) past ``size_limit(rel)`` bytes or ``timeout_s`` seconds."""
    limit, end = size_limit(rel), time.monotonic() + timeout_s
    too_big = (f"{url}: more than {limit:,} bytes, the size of the published {rel}; refused, nothing written "
               f"for {rel}")
    try:
        r = urllib.request.urlopen(url, timeout=min(timeout_s, SOCKET_TIMEOUT_S))  # noqa: S310 (ours or the user's)
    except (OSError, ValueError, http.client.HTTPException) as e:
        raise DataError(f"{url}: could not download {rel} ({e})") from None
    with r:
        declared = r.headers.get("Content-Length") or ""
        if declared.isdigit() and int(declared) > limit:
            raise DataError(too_big)
        read, total = getattr(r, "read1", r.read), 0
        while True:
            try:
                chunk = read(CHUNK)
            except (OSError, ValueError, http.client.HTTPException) as e:
                raise DataError(f"{url}: could not download {rel} ({e})") from None
            if not chunk:
                return
            total += len(chunk)
            if total > limit:
                raise DataError(too_big)
            if time.monotonic() > end:
                raise DataError(f"{url}: not downloaded within {timeout_s:g} s (--timeout); refused, nothing "
                                f"written for {rel}")
            yield chunk


def _fetch_one(url: str, rel: str, dest: Path, timeout_s: float) -> None:
    """Download ``url`` into a temporary file beside ``dest``, check it and rename it to ``dest``; on any failure
    or stop (SIGINT, SIGTERM) the temporary file is removed."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(dir=dest.parent, prefix=TEMP)
    staged = Path(name)
    try:
        with os.fdopen(fd, "wb") as tmp:
            for chunk in _chunks(url, rel, timeout_s):
                tmp.write(chunk)
        why = _content_problem(staged, rel)
        if why:
            raise DataError(f"{url}: {why}; nothing written for {rel}")
        staged.replace(dest)
    except BaseException:
        staged.unlink(missing_ok=True)
        raise


def fetch(out: str | Path, base: str = "", files: tuple[str, ...] | None = None, quiet: bool = False, *,
          force: bool = False, timeout_s: float = TIMEOUT_S) -> list[str]:
    """Download ``files`` (default: READ) into ``out`` (from their sources, or from the mirror ``base``), each
    within its published size and ``timeout_s`` seconds and checked before it is moved into place; a file already
    there and as published is kept. ``out`` is checked first (:func:`check_out`): a user's folder or a file that
    is not the published one is refused unless ``force``. Returns the files downloaded."""
    out = Path(out)
    todo = check_out(out, READ if files is None else files, force)
    if not out.exists() or not foreign_entries(out):
        out.mkdir(parents=True, exist_ok=True)
        if not (out / MARKER).is_file():
            (out / MARKER).write_text("published files written by `toolformer published fetch`\n", encoding="utf-8")
    fetched: list[str] = []
    for rel in todo:
        stops.keep(f"the {len(fetched)} published file(s) fetched and checked so far in {out} (no partial download)")
        url, dest = source_url(rel, base), out / rel
        _fetch_one(url, rel, dest, timeout_s)
        fetched.append(rel)
        if not quiet:
            print(f"fetch: {rel} ({dest.stat().st_size:,} bytes, checked)")
    return fetched
