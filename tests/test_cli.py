import json

import pytest
from helpers import ROOT, run_cli

from toolformer.cli.app import main


@pytest.mark.slow
def test_help_lists_stage_commands():
    out = run_cli(["--help"])
    assert out.returncode == 0
    for cmd in ("run", "sample", "execute", "filter", "chain", "build", "finetune", "evaluate", "inspect", "tool",
                "generate"):
        assert cmd in out.stdout


@pytest.mark.slow
def test_python_dash_m_with_the_package_name():
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-m", "toolformer", "--help"], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert "usage: toolformer" in out.stdout and "finetune" in out.stdout


def test_tool_json_result_and_error(capsys):
    assert main(["tool", "Calculator", "18 + 12 * 3", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out == {"tool": "Calculator", "input": "18 + 12 * 3", "result": "54", "error": None}
    assert main(["tool", "Calculator", "__import__('os').system('id')", "--json"]) == 1
    out = json.loads(capsys.readouterr().out)
    assert out["result"] is None and out["error"]["code"] == "not_arithmetic"


def test_tool_calendar_and_wikisearch(capsys, repo_root, monkeypatch):
    monkeypatch.chdir(repo_root)
    assert main(["tool", "Calendar", "", "--date", "2023-01-30"]) == 0
    assert capsys.readouterr().out.strip() == "Today is Monday, January 30, 2023."
    assert main(["tool", "WikiSearch", "Aldermoor Bridge"]) == 0
    assert capsys.readouterr().out.startswith("Aldermoor Bridge > ")


def test_usage_errors_exit_2(tmp_path, capsys):
    assert main(["tool", "Nope", "x"]) == 2
    bad = tmp_path / "bad.yaml"
    bad.write_text("# x\nfilter:\n  nonsense: 1\n")
    assert main(["sample", "--config", str(bad)]) == 2
    assert "filter.nonsense: unknown key" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        main(["tool"])
    assert e.value.code == 2


def test_tiny_model_tokenizer_texts_come_from_a_named_folder(tmp_path, repo_root):
    from toolformer.lm.modeling import tiny_tokenizer_texts

    with pytest.raises(FileNotFoundError, match=r"no corpus\.jsonl.*--data"):
        tiny_tokenizer_texts(tmp_path)
    texts = tiny_tokenizer_texts(repo_root / "data")
    corpus = (repo_root / "data" / "corpus.jsonl").read_text(encoding="utf-8").splitlines()
    assert set(corpus) <= set(texts)


def test_tool_inputs_that_start_with_a_dash(capsys):
    assert main(["tool", "Calculator", "-(-(-1))"]) == 0
    assert capsys.readouterr().out.strip() == "-1"
    for args in (["tool", "Calculator", "--", "-(-(-1))", "--json"], ["tool", "--json", "Calculator", "-(-(-1))"],
                 ["tool", "Calculator", "-(-(-1))", "--json"]):
        assert main(args) == 0, args
        assert json.loads(capsys.readouterr().out) == {"tool": "Calculator", "input": "-(-(-1))", "result": "-1",
                                                       "error": None}


def test_calendar_says_invalid_date(capsys):
    assert main(["tool", "Calendar", "", "--date", "2023-02-30", "--json"]) == 1
    error = json.loads(capsys.readouterr().out)["error"]
    assert error["code"] == "bad_date" and "invalid date" in error["message"] and "YYYY" not in error["message"]
    assert main(["tool", "Calendar", "", "--date", "30.02.2023"]) == 1
    assert "is not YYYY-MM-DD" in capsys.readouterr().err


def test_generate_reports_a_cut_prompt(tiny_model_dir, capsys):
    long = " ".join(f"word{i}" for i in range(1200))
    assert main(["generate", "--model", tiny_model_dir, "--json", "--max-new-tokens", "2", "--disabled", long,
                 "short"]) == 0
    out = capsys.readouterr()
    cut, whole = [json.loads(x) for x in out.out.splitlines()]
    assert cut["prompt_tokens_cut"] > 0 and whole["prompt_tokens_cut"] == 0
    assert f"generate: prompt 1: its first {cut['prompt_tokens_cut']} token(s) were cut" in out.err
    assert "prompt 2" not in out.err
