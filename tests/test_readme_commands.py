"""The README's commands work as written after its Quick start.

Every shell command in README.md's code blocks (bash, console and plain blocks; lines that start with
``toolformer``, ``bash scripts/``, ``python -m``, ``python scripts/``, ``accelerate`` or ``.venv/bin/``) is
checked without heavy work: a ``toolformer`` command parses as :func:`toolformer.cli.app.main` parses it and its
settings load; the configs, scripts, data and modules it names exist; a script is valid bash and finds
``.venv`` itself. The cheap ones then run for real in a fresh shell (``.venv/bin`` first on PATH, as
``source .venv/bin/activate`` gives), and a console block's shown output must be what they print."""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import io
import os
import re
import shlex
import socket
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest
from helpers import ROOT

from toolformer.cli.parser import PROMPT_COMMANDS, build_parser, settings_argv, tool_argv
from toolformer.config.load import ConfigError, load_config
from toolformer.config.schema import PipelineConfig

README = ROOT / "README.md"
VENV_BIN = ROOT / ".venv" / "bin"
SHELL_BLOCKS = ("", "bash", "sh", "shell", "console")
ENV_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
# Repository paths a command names (a config, a script, shipped data): each must exist.
REPO_PATH = re.compile(r"^(configs|scripts|data|tests)/")
# What the Quick start's `bash scripts/demo.sh` writes (runs/demo), and the tiny demo the README runs next
# (`CONFIG=configs/tiny.yaml bash scripts/demo.sh`: runs/tiny-model): commands may name them before they exist.
MADE_BY_DEMOS = ("runs/demo/", "runs/tiny-model")
# toolformer commands cheap enough to run for real: seconds, nothing trained or downloaded.
CHEAP_SUBCOMMANDS = ("tool", "tools", "tiny-model", "tasks")
CHEAP_MODULES = ("toolformer.corpus.records",)
README_MAX_LINES = 450


@dataclass(frozen=True)
class Command:
    """One shell command of the README: its line, its words, the variables it sets, the output shown."""

    line: int
    argv: tuple[str, ...]
    env: tuple[tuple[str, str], ...] = ()
    output: tuple[str, ...] | None = None  # the lines a console block shows after the command

    @property
    def kind(self) -> str:
        return command_kind(self.argv)

    def __str__(self) -> str:
        return f"README.md:{self.line}: {shlex.join(self.argv)}"


def command_kind(argv: tuple[str, ...]) -> str:
    """What runs the command ('' for a line that is none of the README's kinds of command)."""
    first, second = argv[0], argv[1] if len(argv) > 1 else ""
    if first == "toolformer":
        return "toolformer"
    if first == "bash" and second.startswith("scripts/"):
        return "script"
    if first == "python" and second == "-m":
        return "module"
    if first == "python" and second.startswith("scripts/"):
        return "python-script"
    if first == "accelerate":
        return "accelerate"
    return "venv" if first.startswith(".venv/bin/") else ""


def code_blocks(text: str) -> list[tuple[str, int, list[str]]]:
    """(language, number of its first line, lines) of each fenced code block."""
    blocks, lang, start, body = [], None, 0, []
    for n, line in enumerate(text.splitlines(), 1):
        if line.startswith("```"):
            if lang is None:
                lang, start, body = line[3:].strip(), n + 1, []
            else:
                blocks.append((lang, start, body))
                lang = None
        elif lang is not None:
            body.append(line)
    return blocks


def parse_line(line_no: int, line: str, output: tuple[str, ...] | None) -> Command | None:
    """A shell line as a Command: comments dropped, leading VAR=value assignments kept apart."""
    words = shlex.split(line, comments=True)
    env = []
    while words and ENV_ASSIGNMENT.match(words[0]):
        name, value = words.pop(0).split("=", 1)
        env.append((name, value))
    if not words or not command_kind(tuple(words)):
        return None
    return Command(line_no, tuple(words), tuple(env), output)


def block_commands(lang: str, start: int, body: list[str]) -> list[Command]:
    """The commands of one block: continuation lines joined; in a console block only ``$`` lines, each with
    the output lines shown after it."""
    console, commands, i = lang == "console", [], 0
    while i < len(body):
        line_no, line = start + i, body[i]
        i += 1
        if console and not line.startswith("$ "):
            continue
        line = line[2:] if console else line
        while line.rstrip().endswith("\\") and i < len(body):
            line = line.rstrip()[:-1] + " " + body[i].strip()
            i += 1
        shown = []
        while console and i < len(body) and not body[i].startswith("$ "):
            shown.append(body[i])
            i += 1
        command = parse_line(line_no, line, tuple(shown) if console else None)
        if command:
            commands.append(command)
    return commands


def readme_commands(text: str | None = None) -> list[Command]:
    """Every command of the README's shell code blocks, in order."""
    text = README.read_text(encoding="utf-8") if text is None else text
    return [c for lang, start, body in code_blocks(text) if lang in SHELL_BLOCKS
            for c in block_commands(lang, start, body)]


def parse_toolformer(argv: list[str]) -> tuple[argparse.Namespace | None, str]:
    """``toolformer ARGV`` parsed as :func:`toolformer.cli.app.main` parses it: (arguments, error). A help
    request gives (None, '')."""
    parser = build_parser()
    argv, settings = settings_argv(tool_argv(list(argv)))
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            args, extra = parser.parse_known_args(argv)
    except SystemExit as e:
        return None, "" if e.code == 0 else (err.getvalue().strip().splitlines() or [f"exit {e.code}"])[-1]
    if args.command is None:
        return None, "no command"
    if extra:
        if not hasattr(args, "overrides") or any("=" not in e or e.startswith("-") for e in extra):
            return None, f"unrecognized arguments: {' '.join(extra)}"
        args.overrides = [*args.overrides, *extra]
    if args.command in PROMPT_COMMANDS:
        bad = [x for x in settings if "=" not in x]
        if bad:
            return None, f"--set: {bad[0]!r} is not KEY=VALUE"
        args.overrides = settings
    return args, ""


def named_path_exists(path: str) -> bool:
    """A path a command names exists in the repository, or one of the demos the README runs writes it."""
    return (ROOT / path).exists() or path.startswith(MADE_BY_DEMOS)


def toolformer_problems(argv: list[str]) -> list[str]:
    """What is wrong with ``toolformer ARGV``: it does not parse, its config is missing, a setting does not
    load (an unknown key, a wrong type)."""
    args, error = parse_toolformer(argv)
    if error or args is None:
        return [error] if error else []
    config = getattr(args, "config", None)
    if config and not named_path_exists(config):
        return [f"--config {config} does not exist"]
    if args.command in PROMPT_COMMANDS:
        from toolformer.cli.interact import looks_like_setting

        problems = [f"prompt {p!r} reads as a setting" for p in args.prompts if looks_like_setting(p)]
        if problems:
            return problems
    if not hasattr(args, "overrides"):
        return []
    path = ROOT / config if config and (ROOT / config).exists() else None
    try:
        if args.command in ("demo", "world"):  # the small world's config (toolformer.smallworld.config)
            from toolformer.smallworld.config import load_smallworld

            load_smallworld(path, list(args.overrides))
        else:
            load_config(PipelineConfig, path, list(args.overrides))
    except (ConfigError, ValueError, TypeError, FileNotFoundError) as e:
        return [f"settings: {e}"]
    return []


def n_processes(words: list[str]) -> list[str]:
    """The process count a launch script takes first."""
    return [] if words and words[0].isdigit() else [f"the number of processes comes first, got {words[:1]}"]


def script_problems(command: Command) -> list[str]:
    """A ``bash scripts/X.sh`` command: the script exists, is valid bash and finds the venv itself; what it
    passes to toolformer parses."""
    script = ROOT / command.argv[1]
    if not script.is_file():
        return [f"{command.argv[1]} does not exist"]
    syntax = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
    problems = [f"bash -n: {syntax.stderr.strip()}"] if syntax.returncode else []
    if ".venv" not in script.read_text():
        problems.append(f"{script.name} does not look for .venv, so it runs whatever python is on PATH")
    rest = list(command.argv[2:])
    if script.name == "accelerate_run.sh":
        problems += n_processes(rest) + toolformer_problems(rest[1:])
    elif script.name == "accelerate_finetune.sh":
        problems += n_processes(rest) + toolformer_problems(["finetune", *rest[1:]])
    elif script.name == "demo.sh":
        config = dict(command.env).get("CONFIG", "configs/demo.yaml")
        problems += toolformer_problems(["demo" if config == "configs/demo.yaml" else "run", "--config", config,
                                         *rest])
    elif script.name == "gpu_check.sh" and set(rest) - {"--cpu"}:
        problems.append(f"gpu_check.sh takes only --cpu, got {rest}")
    return problems


def module_problems(command: Command) -> list[str]:
    """``python -m MODULE ...``: the module exists; toolformer.cli's arguments parse."""
    module = command.argv[2] if len(command.argv) > 2 else ""
    if not module or importlib.util.find_spec(module) is None:
        return [f"no module {module!r}"]
    return toolformer_problems(list(command.argv[3:])) if module == "toolformer.cli" else []


def accelerate_problems(command: Command) -> list[str]:
    """``accelerate launch ... -m toolformer.cli ARGS``: accelerate is installed and ARGS parse."""
    problems = [] if importlib.util.find_spec("accelerate.commands.launch") else ["accelerate is not installed"]
    argv = list(command.argv)
    if "-m" not in argv:
        return problems + ["accelerate launch without -m MODULE"]
    module, rest = argv[argv.index("-m") + 1], argv[argv.index("-m") + 2:]
    if module != "toolformer.cli":
        return problems + [f"launches {module}, not toolformer.cli"]
    return problems + toolformer_problems(rest)


CHECKS = {
    "toolformer": lambda c: toolformer_problems(list(c.argv[1:])),
    "script": script_problems,
    "module": module_problems,
    "python-script": lambda c: [] if (ROOT / c.argv[1]).is_file() else [f"{c.argv[1]} does not exist"],
    "accelerate": accelerate_problems,
    "venv": lambda c: [] if (ROOT / c.argv[0]).exists() else [f"{c.argv[0]} does not exist"],
}


def command_problems(command: Command) -> list[str]:
    """Everything wrong with one README command, short of running it."""
    values = [w.split("=", 1)[-1] for w in (*command.argv, *(f"{k}={v}" for k, v in command.env))]
    missing = [f"{v} does not exist" for v in values if REPO_PATH.match(v) and not (ROOT / v).exists()]
    return missing + CHECKS[command.kind](command)


def is_cheap(command: Command) -> bool:
    if command.kind == "module":
        return command.argv[2] in CHEAP_MODULES
    return command.kind == "toolformer" and (command.argv[1] in CHEAP_SUBCOMMANDS or command.argv[1:] == ("--help",))


def fresh_env() -> dict[str, str]:
    """A new shell after ``source .venv/bin/activate``: .venv/bin first on PATH, nothing else of this process's
    Python setup."""
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONHOME", "PYTHONPATH")}
    path = [p for p in env.get("PATH", "").split(os.pathsep) if p and Path(p).resolve() != VENV_BIN.resolve()]
    env["PATH"] = os.pathsep.join([str(VENV_BIN), *path])
    return env


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def anchor(heading: str) -> str:
    """GitHub's anchor of a heading."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


COMMANDS = readme_commands()
needs_venv = pytest.mark.skipif(not (VENV_BIN / "python").exists(), reason="no .venv (made by scripts/setup.sh)")


def test_readme_is_a_page_whose_contents_and_doc_links_resolve():
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= README_MAX_LINES, "README.md grew past a page: move detail to docs/"
    prose = re.sub(r"^```.*?^```", "", text, flags=re.M | re.S)
    sections = [anchor(h) for h in re.findall(r"^##+ (.+)$", prose, re.M)]
    links = re.findall(r"\]\(#([^)]+)\)", text)
    assert set(links) <= set(sections), f"contents link to no heading: {set(links) - set(sections)}"
    top = {anchor(h) for h in re.findall(r"^## (.+)$", prose, re.M)} - {"contents"}
    assert top <= set(links), f"sections missing from the contents: {top - set(links)}"
    docs = re.findall(r"\]\(((?:docs/)[^)#]+)", text)
    assert docs and all((ROOT / d).is_file() for d in docs), docs


def test_quick_start_is_the_two_commands_then_the_venv():
    text = README.read_text(encoding="utf-8")
    assert [shlex.join(c.argv) for c in COMMANDS[:2]] == ["bash scripts/demo.sh", "bash scripts/test.sh"]
    activate = [start + i for lang, start, body in code_blocks(text) if lang in SHELL_BLOCKS
                for i, line in enumerate(body) if line.strip() == "source .venv/bin/activate"]
    first_toolformer = next(c.line for c in COMMANDS if c.kind == "toolformer")
    assert activate and COMMANDS[1].line < activate[0] < first_toolformer, \
        "say `source .venv/bin/activate` once, right after Quick start, before any toolformer command"


def test_every_run_folder_the_readme_names_is_one_a_shown_command_writes():
    text = README.read_text(encoding="utf-8")
    written = {"demo", "tiny-model"}  # the Quick start's demo and the tiny demo
    for c in COMMANDS:
        outputs = [w.split("=", 1)[1] for w in c.argv if w.startswith("run_dir=")]
        outputs += [c.argv[i + 1] for i, w in enumerate(c.argv[:-1]) if w == "--out"]
        written |= {o.split("/")[1] for o in outputs if o.startswith("runs/")}
    named = set(re.findall(r"\bruns/([\w.-]+)", text))
    assert named <= written, f"run folders nobody can recreate from the README: {sorted(named - written)}"


def test_the_extractor_finds_each_kind_of_command():
    kinds = {c.kind for c in COMMANDS}
    assert {"toolformer", "script", "module", "accelerate"} <= kinds, kinds
    assert any(c.output for c in COMMANDS), "no console block with output to compare"
    assert any(is_cheap(c) for c in COMMANDS if c.argv[:2] == ("toolformer", "tiny-model"))


@pytest.mark.parametrize("command", COMMANDS, ids=str)
def test_readme_command_parses_and_names_what_exists(command):
    assert command_problems(command) == [], str(command)


@pytest.mark.parametrize("line, problem", [
    ("toolformer runn --config configs/demo.yaml", "invalid choice"),
    ("toolformer run --config configs/nope.yaml", "configs/nope.yaml does not exist"),
    ("toolformer run --config configs/tiny.yaml filter.tau_filtr=0.5", "tau_filtr"),
    ("toolformer generate --model runs/demo/model tools.enabled=[QA]", "reads as a setting"),
    ("toolformer tool Calculator 1+1 --jsn", "--jsn"),
    ("bash scripts/accelerate_run.sh run --config configs/tiny.yaml", "number of processes"),
    ("bash scripts/no_such.sh", "does not exist"),
    ("CONFIG=configs/tiny.yaml bash scripts/demo.sh finetune.max_step=3", "max_step"),
    ("python -m toolformer.no_such_module", "no module"),
    ("accelerate launch -m toolformer.cli run --config configs/default.yaml seed=x", "seed"),
])
def test_a_broken_command_is_caught(line, problem):
    (command,) = readme_commands(f"```bash\n{line}\n```\n")
    assert any(problem in p for p in command_problems(command)), command_problems(command)


@pytest.mark.slow
@needs_venv
@pytest.mark.parametrize("command", [c for c in COMMANDS if is_cheap(c)], ids=str)
def test_cheap_readme_command_runs_in_a_fresh_shell(command, tmp_path):
    argv, shown_out = list(command.argv), None
    if "--out" in argv:  # tiny-model: into a new folder, not the repository's runs/
        i = argv.index("--out") + 1
        shown_out, argv[i] = argv[i], str(tmp_path / "out")
    done = subprocess.run(["bash", "-c", shlex.join(argv)], cwd=ROOT, env={**fresh_env(), **dict(command.env)},
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"{command}: exit {done.returncode}\n{done.stderr[-3000:]}"
    printed = done.stdout.replace(str(tmp_path / "out"), shown_out) if shown_out else done.stdout
    if command.output is not None:
        assert printed.splitlines() == list(command.output), str(command)
    assert printed.strip(), f"{command} printed nothing"


@pytest.mark.slow
@needs_venv
def test_launch_scripts_find_the_venv_without_it_on_path(tmp_path):
    fake = tmp_path / "bin" / "python"
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\necho 'the python on PATH ran' >&2\nexit 97\n")
    fake.chmod(0o755)
    env = {"HOME": str(tmp_path), "PATH": f"{fake.parent}{os.pathsep}/usr/bin{os.pathsep}/bin",
           "OMP_NUM_THREADS": "1", "MAIN_PROCESS_PORT": str(free_port())}
    one = subprocess.run(["bash", str(ROOT / "scripts" / "accelerate_run.sh"), "1", "--help"], cwd=tmp_path,
                         env=env, capture_output=True, text=True, timeout=120)
    assert one.returncode == 0 and "usage: toolformer" in one.stdout, one.stderr
    two = subprocess.run(["bash", str(ROOT / "scripts" / "accelerate_finetune.sh"), "2", "--help"], cwd=tmp_path,
                         env=env, capture_output=True, text=True, timeout=300)
    assert two.returncode == 0, two.stderr[-3000:]
    assert two.stdout.count("usage: toolformer finetune") == 2, two.stdout
