"""Records are checked, not trusted: every manifest lists its files of records (record count, sha256), and a stage
that reads a finished stage whose files were cut, deleted, changed or garbled stops with exit status 2 naming the
file and the command that rebuilds it, instead of running on what is left; so does a record of the wrong shape or
a document index of another run. A run folder made by the real stages on a tiny model, damaged the way a full
disk, a bad copy or a stray edit damages one."""

import hashlib
import json
import shutil
from pathlib import Path

import pytest
from helpers import ROOT, run_cli, shard_lines

from toolformer.cli.app import main

STAGES = ("sample", "execute", "filter")


def _overrides(model_dir, run_dir) -> list[str]:
    """The tiny config, cheap: the rule proposers only (no sampling), 4 documents a shard."""
    return [f"run_dir={run_dir}", f"model.path={model_dir}", f"corpus.path={ROOT / 'data' / 'corpus.jsonl'}",
            f"tools.collection={ROOT / 'data' / 'collection.jsonl'}",
            f"tools.knowledge={ROOT / 'data' / 'knowledge.jsonl'}", "shard_size=4", "filter.tau_filter=0.0",
            "tools.enabled=[Calculator, QA]", "sample.method={Calculator: rules, QA: rules}",
            "stages=[sample, execute, filter]"]


@pytest.fixture(scope="module")
def finished_run(tiny_model_dir, tmp_path_factory) -> Path:
    run_dir = tmp_path_factory.mktemp("integrity") / "run"
    assert main(["run", "--config", str(ROOT / "configs" / "tiny.yaml"), *_overrides(tiny_model_dir, run_dir)]) == 0
    assert len(list((run_dir / "sample").glob("shard-*.jsonl"))) >= 3
    return run_dir


@pytest.fixture
def run_dir(finished_run, tmp_path) -> Path:
    """A copy of the finished run, to damage."""
    copy = tmp_path / "run"
    shutil.copytree(finished_run, copy)
    return copy


def _cli(capsys, command: str, model_dir: str, run_dir: Path, *extra: str) -> tuple[int, str]:
    """``toolformer COMMAND --config configs/tiny.yaml ...`` in this process: (exit status, stderr)."""
    capsys.readouterr()
    code = main([command, "--config", str(ROOT / "configs" / "tiny.yaml"), *extra,
                 *_overrides(model_dir, run_dir)])
    return code, capsys.readouterr().err


def _error(err: str) -> str:
    """The one error line the command printed (never a traceback)."""
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if line.startswith("toolformer: error:")]
    assert len(lines) == 1, err[-2000:]
    return lines[0]


def _records(path: Path) -> int:
    return sum(1 for line in path.read_bytes().splitlines() if line.strip())


def test_every_manifest_lists_its_files_with_records_and_sha256(finished_run):
    for stage in STAGES:
        manifest = json.loads((finished_run / stage / "manifest.json").read_text())
        shards = sorted(p.name for p in (finished_run / stage).glob("shard-*.jsonl"))
        expected = shards + (["documents.jsonl"] if stage == "sample" else [])
        assert sorted(manifest["files"]) == sorted(expected) and manifest["shards"] == len(shards)
        for name, listed in manifest["files"].items():
            data = (finished_run / stage / name).read_bytes()
            assert listed == {"records": _records(finished_run / stage / name),
                              "sha256": hashlib.sha256(data).hexdigest()}
    total = sum(listed["records"] for name, listed in
                json.loads((finished_run / "execute" / "manifest.json").read_text())["files"].items())
    assert total == len(shard_lines(finished_run, "sample")) > 0


def test_shard_cut_at_a_line_boundary_stops_the_next_stage(run_dir, tiny_model_dir, capsys):
    shard = run_dir / "execute" / "shard-00001.jsonl"
    lines = shard.read_text().splitlines(keepends=True)
    assert len(lines) > 2
    shard.write_text("".join(lines[:2]))  # valid JSON Lines, fewer of them
    filter_manifest = (run_dir / "filter" / "manifest.json").read_bytes()
    code, err = _cli(capsys, "filter", tiny_model_dir, run_dir, "--force")
    assert code == 2
    line = _error(err)
    assert f"{shard}: 2 records, manifest.json says {len(lines)}" in line
    assert "`toolformer execute --force`" in line
    assert (run_dir / "filter" / "manifest.json").read_bytes() == filter_manifest  # nothing rewritten


def test_deleted_middle_shard_stops_the_next_stage(run_dir, tiny_model_dir, capsys):
    shards = sorted((run_dir / "sample").glob("shard-*.jsonl"))
    middle = shards[len(shards) // 2]
    middle.unlink()
    code, err = _cli(capsys, "execute", tiny_model_dir, run_dir, "--force")
    assert code == 2
    line = _error(err)
    assert f"{middle}: missing" in line and "`toolformer sample --force`" in line
    # Without --force (execute complete, so it would be skipped) the damage is found all the same.
    code, err = _cli(capsys, "execute", tiny_model_dir, run_dir)
    assert code == 2 and f"{middle}: missing" in _error(err)


def test_shard_with_one_byte_changed_stops_the_next_stage(run_dir, tiny_model_dir, capsys):
    shard = run_dir / "execute" / "shard-00000.jsonl"
    data = shard.read_bytes()
    i = data.index(b'"tool": "') + len(b'"tool": "')
    shard.write_bytes(data[:i] + bytes([data[i] ^ 1]) + data[i + 1:])  # same lines, one letter of a tool name
    code, err = _cli(capsys, "filter", tiny_model_dir, run_dir, "--force")
    assert code == 2
    line = _error(err)
    assert f"{shard}: changed since the stage wrote it" in line and "`toolformer execute --force`" in line


def test_extra_shard_stops_the_next_stage(run_dir, tiny_model_dir, capsys):
    shards = sorted((run_dir / "execute").glob("shard-*.jsonl"))
    extra = run_dir / "execute" / f"shard-{len(shards):05d}.jsonl"
    shutil.copy(shards[0], extra)  # records twice
    code, err = _cli(capsys, "filter", tiny_model_dir, run_dir, "--force")
    assert code == 2 and f"{extra}: not listed in manifest.json" in _error(err)


def test_truncated_document_index_is_exit_2_naming_it(run_dir, tiny_model_dir, capsys):
    index = run_dir / "sample" / "documents.sqlite"
    data = index.read_bytes()
    index.write_bytes(data[: len(data) // 3])
    code, err = _cli(capsys, "filter", tiny_model_dir, run_dir, "--force")
    assert code == 2
    line = _error(err)
    assert f"{index}: cut short" in line and "delete it" in line
    index.write_bytes(b"\0" * len(data))  # overwritten: not a database at all
    code, err = _cli(capsys, "filter", tiny_model_dir, run_dir, "--force")
    assert code == 2 and f"{index}: not an SQLite database" in _error(err)
    index.unlink()  # the remedy the message gives: the index is made again from documents.jsonl
    code, err = _cli(capsys, "filter", tiny_model_dir, run_dir, "--force")
    assert code == 0, err[-2000:]


def test_document_index_damaged_inside_is_exit_2_naming_it(run_dir, tiny_model_dir, capsys):
    index = run_dir / "sample" / "documents.sqlite"
    data = bytearray(index.read_bytes())
    data[4096:] = b"\xff" * (len(data) - 4096)  # every page past the first garbled, the length kept
    index.write_bytes(bytes(data))
    code, err = _cli(capsys, "filter", tiny_model_dir, run_dir, "--force")
    assert code == 2 and f"{index}: unreadable" in _error(err)


def test_cut_documents_file_stops_the_stages_that_read_it(run_dir, tiny_model_dir, capsys):
    docs = run_dir / "sample" / "documents.jsonl"
    lines = docs.read_text().splitlines(keepends=True)
    docs.write_text("".join(lines[:3]))
    code, err = _cli(capsys, "filter", tiny_model_dir, run_dir, "--force")
    assert code == 2
    assert f"{docs}: 3 records, manifest.json says {len(lines)}" in _error(err)


@pytest.mark.parametrize("garbage", [b"garbage\n", b'{"stage": "execute", "config_h', b"[1, 2]\n", b"\xff\xfe{}"])
def test_garbled_manifest_is_exit_2_naming_it(garbage, run_dir, tiny_model_dir, capsys):
    manifest = run_dir / "execute" / "manifest.json"
    manifest.write_bytes(garbage)
    code, err = _cli(capsys, "filter", tiny_model_dir, run_dir)
    assert code == 2
    line = _error(err)
    assert f"{manifest}: unreadable" in line and "`toolformer execute --force`" in line
    # Its own manifest garbled: the stage says so, and --force (the remedy) reruns it.
    code, err = _cli(capsys, "execute", tiny_model_dir, run_dir)
    assert code == 2 and f"{manifest}: unreadable" in _error(err)
    code, err = _cli(capsys, "execute", tiny_model_dir, run_dir, "--force")
    assert code == 0, err[-2000:]
    assert json.loads(manifest.read_text())["stage"] == "execute"


def _as_older_manifest(stage_dir: Path) -> None:
    """The manifest as a toolformer before per-file checksums wrote it."""
    path = stage_dir / "manifest.json"
    manifest = json.loads(path.read_text())
    del manifest["files"]
    path.write_text(json.dumps(manifest, indent=2))


def test_older_manifests_still_read_and_checked_for_what_they_record(run_dir, tiny_model_dir, capsys):
    for stage in STAGES:
        _as_older_manifest(run_dir / stage)
    code, err = _cli(capsys, "filter", tiny_model_dir, run_dir, "--force")
    assert code == 0, err[-2000:]
    assert json.loads((run_dir / "filter" / "manifest.json").read_text())["files"]  # rewritten: now with its files
    shards = sorted((run_dir / "execute").glob("shard-*.jsonl"))
    shards[1].unlink()
    code, err = _cli(capsys, "filter", tiny_model_dir, run_dir, "--force")
    assert code == 2
    assert f"{run_dir / 'execute'}: {len(shards) - 1} shard file(s), manifest.json says {len(shards)}" in _error(err)


@pytest.mark.parametrize("damage", ["broken JSON", "invalid UTF-8"])
def test_garbled_shard_line_is_exit_2_naming_file_and_line(damage, run_dir, tiny_model_dir, capsys):
    _as_older_manifest(run_dir / "execute")  # no checksum to catch it first: the reader names the line
    shard = run_dir / "execute" / "shard-00001.jsonl"
    lines = shard.read_bytes().splitlines(keepends=True)
    lines[2] = lines[2][:10] + b"\n" if damage == "broken JSON" else lines[2][:10] + b"\xff\xfe" + lines[2][10:]
    shard.write_bytes(b"".join(lines))
    code, err = _cli(capsys, "filter", tiny_model_dir, run_dir, "--force")
    assert code == 2
    line = _error(err)
    assert f"{shard}:3: " + ("invalid JSON" if damage == "broken JSON" else "invalid UTF-8") in line


@pytest.mark.slow
def test_interrupted_stage_resumes_without_being_flagged(finished_run, run_dir, tiny_model_dir):
    args = ["filter", "--config", "configs/tiny.yaml", *_overrides(tiny_model_dir, run_dir)]
    killed = run_cli([*args, "--force"], {"TOOLFORMER_FAULT": "filter:2"})
    assert killed.returncode == -9, killed.stderr[-2000:]  # SIGKILL after 2 shards: no manifest yet
    assert not (run_dir / "filter" / "manifest.json").exists()
    assert len(list((run_dir / "filter").glob("shard-*.jsonl"))) == 2
    again = run_cli(args)
    assert again.returncode == 0, again.stderr[-2000:]
    assert "resuming after 2 complete shard(s)" in again.stdout
    assert shard_lines(run_dir, "filter") == shard_lines(finished_run, "filter")  # none lost, none twice
    manifest = json.loads((run_dir / "filter" / "manifest.json").read_text())
    assert manifest["files"] == json.loads((finished_run / "filter" / "manifest.json").read_text())["files"]


def test_cut_shard_of_a_chain_round_stops_build(run_dir, tiny_model_dir, capsys, monkeypatch):
    # The shipped sample documents hold no chained calls: let every round-2 candidate be scored so the round
    # writes records (what is checked here is the shard, not the chain rule).
    monkeypatch.setattr("toolformer.stages.chain.chained", lambda doc, char, call_input: True)
    monkeypatch.setattr("toolformer.stages.chain.states_result", lambda text, char, result: True)
    code, err = _cli(capsys, "chain", tiny_model_dir, run_dir, "chain.rounds=2")
    assert code == 0, err[-2000:]
    shards = sorted((run_dir / "chain" / "round-2").glob("shard-*.jsonl"))
    assert shards and json.loads((run_dir / "chain" / "manifest.json").read_text())["files"].keys() == {
        f"round-2/{p.name}" for p in shards}
    assert shards[0].read_text().strip()
    shards[0].write_text("")  # a file of no records, as a full disk leaves one
    code, err = _cli(capsys, "build", tiny_model_dir, run_dir, "chain.rounds=2")
    assert code == 2
    line = _error(err)
    assert f"{shards[0]}: 0 records" in line and "`toolformer chain --force`" in line


def _edit_record(shard: Path, line: int, **changes) -> None:
    """Change fields of record ``line`` (from 1) of a shard and list the new file in its manifest (count and
    sha256 recomputed): an edit the checksums do not catch, so the reader must."""
    lines = shard.read_text().splitlines(keepends=True)
    lines[line - 1] = json.dumps({**json.loads(lines[line - 1]), **changes}) + "\n"
    shard.write_text("".join(lines))
    path = shard.parent / "manifest.json"
    manifest = json.loads(path.read_text())
    manifest["files"][shard.name] = {"records": len(lines), "sha256": hashlib.sha256(shard.read_bytes()).hexdigest()}
    path.write_text(json.dumps(manifest))


@pytest.mark.parametrize("changes,expected", [
    ({"tool": "NoSuchTool"}, "tool 'NoSuchTool' is not in tools.enabled (Calculator, QA)"),
    ({"position": "x"}, "field 'position' is the string 'x', not int as in every execute record"),
    ({"result": 12}, "field 'result' is int, not string or null as in every execute record"),
])
def test_a_record_of_the_wrong_shape_stops_the_next_stage_naming_its_line(changes, expected, run_dir,
                                                                          tiny_model_dir, capsys):
    shard = run_dir / "execute" / "shard-00000.jsonl"
    _edit_record(shard, 1, **changes)
    code, err = _cli(capsys, "filter", tiny_model_dir, run_dir, "--force")
    assert code == 2
    line = _error(err)
    assert f"{shard}:1: {expected}" in line and "`toolformer execute --force`" in line


def test_a_filter_record_with_a_null_tool_is_named_by_inspect_and_build(run_dir, tiny_model_dir, capsys):
    shard = run_dir / "filter" / "shard-00000.jsonl"
    _edit_record(shard, 3, tool=None)
    capsys.readouterr()
    assert main(["inspect", str(run_dir), "--config", str(ROOT / "configs" / "tiny.yaml")]) == 2
    assert f"{shard}:3: field 'tool' is null, not string as in every filter record" in _error(capsys.readouterr().err)
    code, err = _cli(capsys, "build", tiny_model_dir, run_dir)
    assert code == 2 and f"{shard}:3: field 'tool' is null" in _error(err)


def test_the_document_index_of_another_run_is_refused_naming_it(run_dir, tiny_model_dir, tmp_path, capsys):
    from toolformer.rundir.folder import index_documents

    other = tmp_path / "other" / "documents.jsonl"
    other.parent.mkdir()
    other.write_text(json.dumps({"doc_id": "x1", "text": "Another corpus.", "date": None}) + "\n")
    index = run_dir / "sample" / "documents.sqlite"
    shutil.copy(index_documents(other), index)  # newer than documents.jsonl: not rebuilt by its age
    code, err = _cli(capsys, "filter", tiny_model_dir, run_dir, "--force")
    assert code == 2
    line = _error(err)
    assert f"{index}: the index of another documents.jsonl, not this run's" in line and "delete it" in line
    index.unlink()  # the remedy: rebuilt from this run's documents.jsonl
    code, err = _cli(capsys, "filter", tiny_model_dir, run_dir, "--force")
    assert code == 0, err[-2000:]
