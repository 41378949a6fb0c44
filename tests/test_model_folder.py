"""The model folder describes itself (toolformer.json): tool data copied or
referenced, used by generate, chat, evaluate and ToolformerModel; settings
after --set are never prompts. The slow tests tune the tiny model (configs/tiny.yaml)
until it calls QA, once for the module."""

import io
import json
import re
import shutil
import sys
from argparse import Namespace
from pathlib import Path

import pytest
from helpers import ROOT, write_build

from toolformer.api import ToolformerModel
from toolformer.cli.app import main
from toolformer.cli.interact import collect_prompts, looks_like_setting
from toolformer.cli.parser import settings_argv
from toolformer.config.load import load_config
from toolformer.config.schema import PipelineConfig
from toolformer.lm.foldertrust import FolderTrustError
from toolformer.lm.modelfolder import SPEC_FILE, folder_settings, read_spec, write_spec

PROMPT = "Question: How long is the Ketey? Answer:"
KETEY = {"subject": "River Ketey", "relation": "length how long kilometres far", "object": "484",
         "text": "The Ketey is 484 kilometres long.", "aliases": ["Ketey"]}


def knowledge(path: Path, length: str = "484") -> Path:
    """The shipped facts and the Ketey's length (which data/knowledge.jsonl does not know)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text((ROOT / "data" / "knowledge.jsonl").read_text() + json.dumps({**KETEY, "object": length}) + "\n")
    return path


def tiny_config(tmp_path, *overrides) -> PipelineConfig:
    return load_config(PipelineConfig, ROOT / "configs" / "tiny.yaml",
                       [f"run_dir={tmp_path / 'run'}", f"tools.collection={ROOT / 'data' / 'collection.jsonl'}",
                        *overrides])


def described_tiny(tmp_path, tiny_model_dir, *overrides, max_mb=50.0) -> Path:
    """The tiny random model in a folder of its own, with a toolformer.json."""
    folder = tmp_path / "model"
    shutil.copytree(tiny_model_dir, folder)
    write_spec(tiny_config(tmp_path, *overrides), folder, max_mb)
    return folder


def json_lines(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


def test_spec_copies_small_data_and_references_large(tmp_path, tiny_model_dir):
    from toolformer.tools import build_tool

    know = knowledge(tmp_path / "world" / "knowledge.jsonl")
    cfg = tiny_config(tmp_path, f"tools.knowledge={know}", "tools.enabled=[Calculator, QA]")
    assert build_tool("QA", cfg.tools).run("How long is the Ketey?") == "484"  # builds the BM25 index beside it
    folder = described_tiny(tmp_path, tiny_model_dir, f"tools.knowledge={know}", "tools.enabled=[Calculator, QA]")
    spec = json.loads((folder / SPEC_FILE).read_text())
    assert spec["calls"] == {"style": "plain", "separator": " ", "start": "[", "end": "]", "arrow": "→",
                             "arrow_alternatives": ["->"], "special_tokens": False}
    assert spec["decoding"] == {"top_k_trigger": 10, "max_calls": 1, "max_new_tokens": 12, "constrained": False,
                                "sampling": "greedy"}
    tools = spec["tools"]
    assert tools["enabled"] == ["Calculator", "QA"] and tools["settings"]["knowledge"] == "tools/knowledge.jsonl"
    assert "collection" not in tools["settings"] and tools["settings"]["max_result_chars"] == 300
    rec = tools["data"]["knowledge"]
    assert rec["copied"] and rec["source"] == str(know) and rec["bytes"] == know.stat().st_size
    import hashlib

    assert rec["sha256"] == hashlib.sha256(know.read_bytes()).hexdigest()
    assert (folder / "tools" / "knowledge.jsonl").read_bytes() == know.read_bytes()
    assert (folder / "tools" / "knowledge.jsonl.bm25" / "stamp.txt").exists()
    assert folder_settings(spec, folder)["tools"]["knowledge"] == str(folder / "tools" / "knowledge.jsonl")

    # Over the size limit: recorded by absolute path, and the old copy is gone.
    limit = (know.stat().st_size - 1) / 1e6
    write_spec(tiny_config(tmp_path, f"tools.knowledge={know}", "tools.enabled=[Calculator, QA]"), folder, limit)
    spec = read_spec(folder)
    assert spec["tools"]["settings"]["knowledge"] == str(know) and not spec["tools"]["data"]["knowledge"]["copied"]
    assert not (folder / "tools").exists() or not any((folder / "tools").iterdir())
    card = json.dumps(spec)
    assert "tools/knowledge" not in card


def test_moved_folder_and_missing_data(tmp_path, tiny_model_dir):
    know = knowledge(tmp_path / "world" / "knowledge.jsonl")
    big = tmp_path / "big" / "collection.jsonl"
    big.parent.mkdir()
    big.write_text((ROOT / "data" / "collection.jsonl").read_text() * 3)
    folder = described_tiny(tmp_path, tiny_model_dir, f"tools.knowledge={know}", f"tools.collection={big}",
                            max_mb=know.stat().st_size / 1e6)
    spec = read_spec(folder)
    assert spec["tools"]["settings"]["collection"] == str(big)  # not copied: over the limit
    moved = tmp_path / "elsewhere" / "moved"
    moved.parent.mkdir()
    shutil.move(folder, moved)
    know.unlink()
    # Data recorded by absolute path lies outside the folder: read only when the user says so.
    with pytest.raises(FolderTrustError, match=rf"tools.collection: {re.escape(str(big))} is an absolute path; .*"
                                               r"--trust-folder-tools"):
        ToolformerModel.from_pretrained(moved)
    tf = ToolformerModel.from_pretrained(moved, overrides=[f"tools.collection={big}"])
    assert tf.config.tools.collection == str(big) and tf.setup()["refused"] == []
    tf = ToolformerModel.from_pretrained(moved, device="cpu", dtype="float32", trust_folder_tools=True)
    assert tf.config.tools.knowledge == str(moved / "tools" / "knowledge.jsonl")
    assert tf.config.tools.collection == str(big) and tf.config.model.dtype == "float32"
    setup = tf.setup()
    assert setup["description"] == str(moved / SPEC_FILE) and setup["overridden"] == []
    assert setup["data"]["QA"]["origin"] == "copied into the model folder"
    assert setup["data"]["WikiSearch"]["origin"] == "recorded by the model folder"
    # Referenced data that is gone: an error at load, naming the file and where it was recorded.
    big.unlink()
    with pytest.raises(FileNotFoundError, match=rf"{re.escape(str(big))}: the data of tool WikiSearch "
                                                rf"\(tools.collection, recorded in .*moved/{SPEC_FILE}\)"):
        ToolformerModel.from_pretrained(moved, trust_folder_tools=True)
    assert main(["generate", "--model", str(moved), "--trust-folder-tools", "x"]) == 2


def test_folder_without_description_names_the_defaults(tiny_model_dir, monkeypatch):
    monkeypatch.chdir(ROOT)  # the defaults' data paths are relative to the repository
    with pytest.warns(UserWarning, match=r"has no toolformer.json .*using tools Calculator, Calendar, WikiSearch, "
                                         r"QA with tools.collection=data/collection.jsonl, "
                                         r"tools.knowledge=data/knowledge.jsonl and call style plain"):
        tf = ToolformerModel.from_pretrained(tiny_model_dir)
    assert tf.spec is None and tf.setup()["description"] is None
    bad = Path(tiny_model_dir).parent / "bad-spec"
    shutil.copytree(tiny_model_dir, bad)
    (bad / SPEC_FILE).write_text("{}")
    with pytest.raises(ValueError, match=r"bad-spec/toolformer.json: no `format` number"):
        ToolformerModel.from_pretrained(bad)


def test_settings_are_split_from_prompts():
    assert settings_argv(["generate", "--model", "M", "a=b", "--set", "x.y=1", "z=2"]) == (
        ["generate", "--model", "M", "a=b"], ["x.y=1", "z=2"])
    assert settings_argv(["chat", "--model", "M", "--", "tools.enabled=[QA]"]) == (
        ["chat", "--model", "M"], ["tools.enabled=[QA]"])
    assert settings_argv(["run", "--", "x=1"]) == (["run", "--", "x=1"], [])
    assert looks_like_setting("tools.knowledge=f.jsonl") and looks_like_setting("seed=3")
    assert not looks_like_setting("2+3=5") and not looks_like_setting("Question: x.y=1 or not?")


def test_prompts_from_arguments_file_and_stdin(tmp_path):
    def args(*prompts, file=None):
        return Namespace(prompts=list(prompts), file=file)

    text = tmp_path / "p.txt"
    text.write_text("first prompt\n\n  second  \n")
    assert collect_prompts(args("a", file=str(text))) == (["a", "first prompt", "  second  "], [None] * 3)
    rows = tmp_path / "p.jsonl"
    rows.write_text('{"prompt": "Today is", "date": "2023-01-30"}\n{"prompt": "tools.x=1"}\n')
    assert collect_prompts(args(file=str(rows))) == (["Today is", "tools.x=1"], ["2023-01-30", None])
    rows.write_text('{"prompt": "ok"}\n{"text": "no prompt"}\n')
    with pytest.raises(ValueError, match=r"p.jsonl:2: expected an object with a string `prompt`"):
        collect_prompts(args(file=str(rows)))
    assert collect_prompts(args(), io.StringIO("from stdin\n")) == (["from stdin"], [None])
    assert collect_prompts(args(file="-"), io.StringIO('{"prompt": "p"}\n')) == (["p"], [None])
    with pytest.raises(ValueError, match="no prompt: give prompts as arguments"):
        collect_prompts(args(), io.StringIO(""))
    with pytest.raises(ValueError, match=r"prompt 'tools.knowledge=k.jsonl' reads as a setting: put settings after "
                                         r"--set"):
        collect_prompts(args("a prompt", "tools.knowledge=k.jsonl"))
    with pytest.raises(FileNotFoundError, match="nope.txt: prompt file not found"):
        collect_prompts(args(file=str(tmp_path / "nope.txt")))


def test_set_overrides_tools_and_is_never_a_prompt_fast(tmp_path, tiny_model_dir, capsys):
    folder = described_tiny(tmp_path, tiny_model_dir)
    for sep in ("--set", "--"):
        assert main(["generate", "--model", str(folder), "one", "--json", "--max-new-tokens", "2", "--max-calls", "0",
                     sep, "tools.enabled=[Calculator]", "evaluate.top_k_trigger=3"]) == 0
        out = capsys.readouterr()
        (line,) = json_lines(out.out)
        assert line["prompt"] == "one" and line["setup"]["enabled"] == ["Calculator"]
        assert line["setup"]["overridden"] == ["tools.enabled"] and line["setup"]["data"] == {}
        assert line["setup"]["decoding"] == {"max_new_tokens": 2, "top_k_trigger": 3, "max_calls": 0,
                                                 "constrained": False}
        assert f"tools Calculator from {folder / SPEC_FILE} (overridden: tools.enabled)" in out.err
    assert main(["generate", "--model", str(folder), "one", "tools.enabled=[QA]"]) == 2
    assert "reads as a setting: put settings after --set" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        main(["generate", "--model", str(folder), "one", "--set", "oops"])
    assert e.value.code == 2 and "--set: 'oops' is not KEY=VALUE" in capsys.readouterr().err


def test_chat_commands_from_stdin(tmp_path, tiny_model_dir, monkeypatch, capsys):
    folder = described_tiny(tmp_path, tiny_model_dir)
    monkeypatch.setattr(sys, "stdin", io.StringIO("/help\n/topk 3\n/calls x\n/disabled\nhello\n/bogus\n/quit\nnever\n"))
    assert main(["chat", "--model", str(folder), "--max-new-tokens", "2"]) == 0
    out = capsys.readouterr().out
    assert f"tools Calculator, Calendar, WikiSearch, QA from {folder / SPEC_FILE}" in out
    assert "top_k_trigger = 3" in out and "/calls takes a whole number" in out
    assert "tools disabled: no call is made" in out and "unknown command /bogus" in out
    assert out.count("› ") == 7  # the line after /quit is never read


# --- a model tuned by the tiny config until it calls QA (slow) ---


@pytest.fixture(scope="module")
def tuned(tmp_path_factory, tiny_model_dir):
    """RUN/model tuned on one QA call, whose knowledge file (the only one that
    knows the Ketey) is deleted after tuning: only the folder's copy remains."""
    from toolformer.stages.finetune import run_stage

    root = tmp_path_factory.mktemp("tuned")
    know = knowledge(root / "world" / "knowledge.jsonl")
    write_build(root / "run", [f"{PROMPT} [QA(How long is the Ketey?) → 484] 484 kilometres."] * 16)
    cfg = tiny_config(root, f"model.path={tiny_model_dir}", f"tools.knowledge={know}", "evaluate.max_new_tokens=24",
                      "finetune.max_steps=60", "finetune.learning_rate=0.02", "finetune.warmup_ratio=0",
                      "finetune.dev_ratio=0", "finetune.max_length=64", "finetune.save_every=0",
                      "finetune.batch_size=4", "finetune.micro_batch_size=4")
    run_stage(cfg)
    shutil.rmtree(know.parent)
    return root / "run" / "model"


def readme_generate_example() -> list[str]:
    """The README's `toolformer generate` example, as arguments."""
    import shlex

    readme = (ROOT / "README.md").read_text()
    line = re.search(r"^\s*toolformer generate --model runs/demo/model .*$", readme, re.M).group(0)
    return shlex.split(line.strip())[1:]


@pytest.mark.slow
def test_readme_generate_example_answers_from_the_folders_data(tuned, capsys):
    args = readme_generate_example()
    assert args == ["generate", "--model", "runs/demo/model", PROMPT]
    assert main([a.replace("runs/demo/model", str(tuned)) for a in args]) == 0
    out = capsys.readouterr()
    assert out.out.startswith(f"{PROMPT} [QA(How long is the Ketey?) → 484] 484")
    assert "  call QA(How long is the Ketey?) → 484" in out.err
    assert f"QA data {tuned / 'tools' / 'knowledge.jsonl'} (copied into the model folder)" in out.err
    spec = read_spec(tuned)
    assert spec["tools"]["enabled"] == ["Calculator", "Calendar", "WikiSearch", "QA"]
    assert spec["decoding"]["max_new_tokens"] == 24
    card = (tuned / "README.md").read_text()
    assert "## Tools" in card and "`tools/knowledge.jsonl`, copied into this folder" in card


@pytest.mark.slow
def test_moved_folder_generates_the_same(tuned, tmp_path, monkeypatch, capsys):
    here = tmp_path / "here"
    shutil.copytree(tuned, here)
    assert main(["generate", "--model", str(here), PROMPT, "--json"]) == 0
    (before,) = json_lines(capsys.readouterr().out)
    moved = tmp_path / "far" / "away"
    moved.parent.mkdir()
    shutil.move(here, moved)
    monkeypatch.chdir(tmp_path)
    assert main(["generate", "--model", str(moved), PROMPT, "--json"]) == 0
    (after,) = json_lines(capsys.readouterr().out)
    assert (after["text"], after["calls"]) == (before["text"], before["calls"])
    assert after["calls"] == [{"tool": "QA", "input": "How long is the Ketey?", "result": "484", "error": None}]
    assert after["setup"]["data"]["QA"]["path"] == str(moved / "tools" / "knowledge.jsonl")


@pytest.mark.slow
def test_set_overrides_the_folders_tools(tuned, tmp_path, capsys):
    other = knowledge(tmp_path / "other.jsonl", length="999")
    assert main(["generate", "--model", str(tuned), PROMPT, "--json", "--set", f"tools.knowledge={other}"]) == 0
    (line,) = json_lines(capsys.readouterr().out)
    assert line["prompt"] == PROMPT and line["calls"][0]["result"] == "999"
    assert line["setup"]["overridden"] == ["tools.knowledge"]
    assert line["setup"]["data"]["QA"] == {"key": "tools.knowledge", "path": str(other), "origin": "set by the config"}
    assert main(["generate", "--model", str(tuned), PROMPT, "--json", "--", "tools.enabled=[Calculator]"]) == 0
    (line,) = json_lines(capsys.readouterr().out)
    assert line["calls"][0]["error"]["code"] == "unknown_tool"


@pytest.mark.slow
def test_chat_shows_each_call_as_it_happens(tuned, monkeypatch, capsys):
    monkeypatch.setattr(sys, "stdin", io.StringIO(f"{PROMPT}\n/disabled\n{PROMPT}\n"))  # ends without /quit
    assert main(["chat", "--model", str(tuned)]) == 0
    out = capsys.readouterr().out
    first, second = out.split("tools disabled")
    assert "\n  call QA(How long is the Ketey?) → 484\n" in first
    assert "without calls:" in first and " 484 kilometres" in first
    assert "call QA" not in second


@pytest.mark.slow
def test_python_api_generates_and_saves(tuned, tmp_path):
    tf = ToolformerModel.from_pretrained(tuned, device="cpu", dtype="float32")
    g = tf.generate(PROMPT)
    assert g.calls == [{"tool": "QA", "input": "How long is the Ketey?", "result": "484", "error": None}]
    assert g.text.startswith(" [QA(How long is the Ketey?) → 484] 484") and "[" not in g.text_without_calls
    assert [x.calls for x in tf.generate([PROMPT, PROMPT], disabled=True)] == [[], []]
    seen = []
    tf.generate(PROMPT, on_call=lambda i, call, before: seen.append((i, call["result"], before)))
    assert seen == [(0, "484", "")]
    saved = tf.save_pretrained(tmp_path / "saved")
    assert (saved / "model.safetensors").exists() and (saved / "tools" / "knowledge.jsonl").exists()
    assert read_spec(saved)["tools"]["data"]["knowledge"]["source"] == str(tuned / "tools" / "knowledge.jsonl")
    again = ToolformerModel.from_pretrained(saved).generate(PROMPT)
    assert (again.text, again.calls) == (g.text, g.calls)
    with pytest.raises(ValueError, match="is the folder this model was loaded from"):
        tf.save_pretrained(tuned)


@pytest.mark.slow
def test_evaluate_uses_the_folders_tools(tuned, tmp_path):
    from toolformer.config.load import from_dict
    from toolformer.stages import evaluate as ev_stage

    qa = tmp_path / "qa.jsonl"
    qa.write_text(json.dumps({"question": "How long is the Ketey?", "answer": "484"}) + "\n")
    run = tmp_path / "run"

    def cfg(tools_from):
        return from_dict(PipelineConfig, {
            "run_dir": str(run), "model": {"path": str(tuned), "device": "cpu"},
            "tools": {"knowledge": str(ROOT / "data" / "knowledge.jsonl"),
                      "collection": str(ROOT / "data" / "collection.jsonl")},
            "finetune": {"output_dir": str(tuned)},
            "evaluate": {"rows": ["toolformer"], "tools_from": tools_from, "max_new_tokens": 24,
                         "tasks": [{"name": "qa", "path": str(qa), "format": "triviaqa",
                                    "prompt": "Question: {question} Answer:"}]}}, "<test>")

    res = ev_stage.run_stage(cfg("model")).output  # the config's QA reads data/knowledge.jsonl: no Ketey
    row = res["rows"]["toolformer"]
    assert row["tasks"]["qa"]["correct"] == 1 and row["tool_setup"]["description"] == str(tuned / SPEC_FILE)
    assert row["tool_setup"]["data"]["QA"]["path"] == str(tuned / "tools" / "knowledge.jsonl")
    res = ev_stage.run_stage(cfg("config"), force=True).output
    pred = json.loads((run / "eval" / "predictions" / "toolformer" / "qa.jsonl").read_text())
    assert pred["calls"][0]["error"]["code"] == "not_found" and res["rows"]["toolformer"]["tool_setup"]["description"] \
        is None


@pytest.mark.slow
def test_chat_under_a_pseudo_terminal(tuned):
    """The same loop with a terminal on both ends (colours on, input not echoed by chat)."""
    import os
    import pty
    import select
    import subprocess
    import time

    main_fd, term = pty.openpty()
    env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "FORCE_COLOR")} | {"TERM": "xterm"}
    proc = subprocess.Popen([sys.executable, "-m", "toolformer.cli", "chat", "--model", str(tuned)], cwd=ROOT,
                            stdin=term, stdout=term, stderr=term, close_fds=True, env=env)
    os.close(term)
    seen = bytearray()

    def wait_for(marker: bytes, after: int) -> int:
        """Read until ``marker`` shows after position ``after``; the position after it."""
        deadline = time.monotonic() + 120
        while seen.find(marker, after) == -1 and time.monotonic() < deadline:
            if select.select([main_fd], [], [], 0.5)[0]:
                try:
                    seen.extend(os.read(main_fd, 65536))
                except OSError:  # the child closed the terminal
                    break
        return seen.find(marker, after) + len(marker)

    try:
        at = 0
        for line in (PROMPT, "/quit"):
            at = wait_for("› ".encode(), at)
            os.write(main_fd, line.encode() + b"\r")
        assert proc.wait(timeout=60) == 0
    finally:
        proc.kill()
        os.close(main_fd)
    raw = seen.decode(errors="replace")
    assert "\x1b[" in raw  # rich colours a terminal
    assert "  call QA(How long is the Ketey?) → 484" in re.sub(r"\x1b\[[0-9;]*m", "", raw)
