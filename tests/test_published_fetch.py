"""``toolformer published fetch`` (toolformer.published.sources): what ``--out`` may be, the size and time a
download may take, and a stop during one. A small mirror written here (``file://``, or an HTTP server on
127.0.0.1 in a thread) stands in for the sources, its files' sha256 and sizes patched into the tables."""

from __future__ import annotations

import errno
import hashlib
import http.server
import os
import signal
import threading
import time
from pathlib import Path

import pytest

from toolformer.cli.app import main
from toolformer.published import sources
from toolformer.published.config import DATA_ENV

REAL = os.environ.get(DATA_ENV, "")
FILES = {"math/gsm8k/train.jsonl": b'{"question": "q1", "answer": "#### 1"}\n',
         "math/gsm8k/test.jsonl": b'{"question": "q2", "answer": "#### 2"}\n',
         "math/ASDiv.xml": b"<Machine-Reading-Corpus-File/>\n"}


@pytest.fixture
def mirror(tmp_path, monkeypatch) -> Path:
    """A mirror of three published files, the tables patched to them (their sha256, their sizes)."""
    root = tmp_path / "mirror"
    for rel, data in FILES.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    monkeypatch.setattr(sources, "READ", tuple(FILES))
    monkeypatch.setattr(sources, "FILES", {r: hashlib.sha256(d).hexdigest() for r, d in FILES.items()})
    monkeypatch.setattr(sources, "SIZES", {r: len(d) for r, d in FILES.items()})
    return root


def fetch_cli(out: Path, source: str, *extra: str) -> int:
    return main(["published", "fetch", "--out", str(out), "--source", source, *extra])


def one_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "Traceback" not in err[0], err
    return err[0]


def temporaries(folder: Path) -> list[Path]:
    return list(folder.rglob(sources.TEMP + "*"))


def test_out_that_is_a_file_is_one_line_and_the_file_kept(mirror, tmp_path, capsys):
    (tmp_path / "outfile").write_text("precious")
    assert fetch_cli(tmp_path / "outfile", mirror.as_uri()) == 2
    assert f"--out: {tmp_path / 'outfile'} is a file, not a folder" in one_line(capsys)
    assert (tmp_path / "outfile").read_text() == "precious"


def test_a_users_folder_is_refused_and_with_force_only_data_paths_are_written(mirror, tmp_path, capsys):
    mine = tmp_path / "mine"
    (mine / "math/gsm8k").mkdir(parents=True)
    (mine / "math/gsm8k/train.jsonl").write_text("my own notes")
    (mine / "notes.txt").write_text("notes")
    assert fetch_cli(mine, mirror.as_uri()) == 2
    line = one_line(capsys)
    assert str(mine) in line and "notes.txt" in line and "--force" in line
    assert (mine / "math/gsm8k/train.jsonl").read_text() == "my own notes"
    assert sorted(p.name for p in mine.rglob("*")) == ["gsm8k", "math", "notes.txt", "train.jsonl"]
    assert fetch_cli(mine, mirror.as_uri(), "--force") == 0
    assert (mine / "notes.txt").read_text() == "notes" and not (mine / sources.MARKER).exists()
    assert all((mine / rel).read_bytes() == data for rel, data in FILES.items())


def test_an_empty_or_published_only_folder_is_fetched_into_and_marked(mirror, tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    assert sources.fetch(empty, base=mirror.as_uri(), quiet=True) == list(FILES)
    assert (empty / sources.MARKER).is_file()
    older = tmp_path / "older"  # a folder of an earlier fetch: the published layout and nothing else
    (older / "math/gsm8k").mkdir(parents=True)
    (older / "math/gsm8k/test.jsonl").write_bytes(FILES["math/gsm8k/test.jsonl"])
    assert sources.foreign_entries(older) == []
    assert sources.fetch(older, base=mirror.as_uri(), quiet=True) == ["math/gsm8k/train.jsonl", "math/ASDiv.xml"]
    assert (older / sources.MARKER).is_file()
    assert sources.fetch(older, base=mirror.as_uri(), quiet=True) == []  # all there, each as published


def test_a_data_file_that_is_not_the_published_one_is_replaced_only_with_force(mirror, tmp_path, capsys):
    out = tmp_path / "out"
    sources.fetch(out, base=mirror.as_uri(), quiet=True)
    (out / "math/ASDiv.xml").write_text("<edited/>")
    assert fetch_cli(out, mirror.as_uri()) == 2
    line = one_line(capsys)
    assert f"{out / 'math/ASDiv.xml'}: not the published math/ASDiv.xml" in line and "--force" in line
    assert (out / "math/ASDiv.xml").read_text() == "<edited/>"
    assert fetch_cli(out, mirror.as_uri(), "--force") == 0
    assert (out / "math/ASDiv.xml").read_bytes() == FILES["math/ASDiv.xml"]


def test_a_folder_at_a_data_path_is_refused_before_any_download_even_with_force(mirror, tmp_path, capsys):
    out = tmp_path / "out"
    (out / "math/ASDiv.xml").mkdir(parents=True)
    (out / "math/ASDiv.xml/keep.txt").write_text("mine")
    for force in ((), ("--force",)):
        assert fetch_cli(out, mirror.as_uri(), *force) == 2
        line = one_line(capsys)
        assert str(out / "math/ASDiv.xml") in line, line
        assert (out / "math/ASDiv.xml/keep.txt").read_text() == "mine"
        assert not temporaries(out) and not (out / "math/gsm8k").exists()


@pytest.mark.parametrize(("code", "rc", "says"), [(errno.EACCES, 2, "choose a folder you can write"),
                                                  (errno.EROFS, 1, "file system is fixed")])
def test_a_folder_that_cannot_be_written_is_one_line(mirror, tmp_path, monkeypatch, capsys, code, rc, says):
    """A folder the user may not write is the user's choice (exit 2); a read-only file system the machine's (1)."""
    def refuse(*args, dir=None, **kw):
        raise OSError(code, os.strerror(code), str(dir))

    monkeypatch.setattr(sources.tempfile, "mkstemp", refuse)
    assert fetch_cli(tmp_path / "out", mirror.as_uri()) == rc
    line = one_line(capsys)
    assert f"cannot write {tmp_path / 'out' / 'math/gsm8k'} ({os.strerror(code)})" in line and says in line


def test_a_download_past_the_published_size_is_refused_and_leaves_nothing(mirror, tmp_path):
    (mirror / "math/ASDiv.xml").write_bytes(FILES["math/ASDiv.xml"] + b" ")  # one byte more
    out = tmp_path / "out"
    with pytest.raises(sources.DataError, match=r"ASDiv.xml: more than 31 bytes, the size of the published"):
        sources.fetch(out, base=mirror.as_uri(), files=("math/ASDiv.xml",), quiet=True)
    assert not (out / "math/ASDiv.xml").exists() and not temporaries(out)
    (mirror / "math/gsm8k/train.jsonl").unlink()
    (mirror / "math/gsm8k/train.jsonl").symlink_to("/dev/zero")  # a source without end
    with pytest.raises(sources.DataError, match=f"{mirror.as_uri()}/math/gsm8k/train.jsonl: more than 39 bytes"):
        sources.fetch(out, base=mirror.as_uri(), files=("math/gsm8k/train.jsonl",), quiet=True)
    assert not (out / "math/gsm8k/train.jsonl").exists() and not temporaries(out)


def test_every_published_file_has_a_size_and_relations_a_generous_bound():
    assert set(sources.SIZES) == set(sources.FILES)
    assert sources.size_limit(sources.RELATIONS) >= 100 * sources.SIZES[sources.RELATIONS]
    assert sources.size_limit("math/ASDiv.xml") == sources.SIZES["math/ASDiv.xml"] == 947_401


@pytest.mark.skipif(not REAL or not Path(REAL).is_dir(), reason=f"${DATA_ENV} does not name a folder of the "
                                                                 "published files")
def test_the_sizes_are_those_of_the_published_files():
    assert {rel: (Path(REAL) / rel).stat().st_size for rel in sources.FILES} == sources.SIZES


class Drip(http.server.BaseHTTPRequestHandler):
    """Sends 10 bytes every 20 ms, without end (until the client goes)."""

    def log_message(self, *args) -> None:
        pass

    def do_GET(self) -> None:
        self.send_response(200)
        self.end_headers()
        try:
            while not getattr(self.server, "closing", False):
                self.wfile.write(b"x" * 10)
                self.wfile.flush()
                time.sleep(0.02)
        except OSError:
            pass


class DripServer(http.server.ThreadingHTTPServer):
    daemon_threads = True
    closing = False  # set when the test ends: each handler stops sending


@pytest.fixture
def drip():
    """The URL of a mirror on 127.0.0.1 whose every file drips forever."""
    server = DripServer(("127.0.0.1", 0), Drip)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/"
    server.closing = True
    server.shutdown()
    server.server_close()


def test_a_source_that_drips_is_refused_at_the_deadline(mirror, drip, tmp_path, monkeypatch):
    monkeypatch.setitem(sources.SIZES, "math/ASDiv.xml", 1 << 20)
    out, start = tmp_path / "out", time.monotonic()
    with pytest.raises(sources.DataError, match=f"{drip}math/ASDiv.xml: not downloaded within 0.5 s"):
        sources.fetch(out, base=drip, files=("math/ASDiv.xml",), quiet=True, timeout_s=0.5)
    assert time.monotonic() - start < 3
    assert not (out / "math/ASDiv.xml").exists() and not temporaries(out)


def test_sigterm_during_a_download_removes_it_and_is_one_line(mirror, drip, tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sources.SIZES, "math/gsm8k/train.jsonl", 1 << 20)
    out, seen = tmp_path / "out", []

    def signal_once_downloading() -> None:  # only while the download runs: never after the command ended
        deadline = time.monotonic() + 10
        while not temporaries(out) and time.monotonic() < deadline:
            time.sleep(0.01)
        seen.extend(temporaries(out))
        if seen:
            os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=signal_once_downloading, daemon=True).start()
    assert fetch_cli(out, drip, "--timeout", "20") == 143 and seen
    assert "stopped by SIGTERM; kept the 0 published file(s) fetched and checked so far" in one_line(capsys)
    assert not temporaries(out) and not (out / "math/gsm8k/train.jsonl").exists()


@pytest.mark.parametrize("value", ["0", "-1", "nan", "soon"])
def test_timeout_takes_a_positive_number_of_seconds(tmp_path, capsys, value):
    with pytest.raises(SystemExit) as stop:
        main(["published", "fetch", "--out", str(tmp_path / "out"), "--timeout", value])
    assert stop.value.code == 2 and f"argument --timeout: {value!r}" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
