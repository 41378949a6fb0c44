"""The package's layers (CONTRIBUTING.md, "Layout"): a module imports only
its own layer and the layers above it; nothing imports the command line; no
module imports itself through others (an import circle). The length limits hold
for toolformer/ and tests/, and a test that starts a Python process is marked
slow (CONTRIBUTING.md, "Tests")."""

import ast
import re
from pathlib import Path

import pytest
from helpers import ROOT

PACKAGE = ROOT / "toolformer"
TESTS = ROOT / "tests"
LAYERS = [("version",), ("config",), ("rundir",), ("tools",), ("lm",), ("api",), ("corpus", "tasks"), ("inspect",),
          ("stages",), ("pipeline",), ("worlds",), ("smallworld",), ("published",),
          ("bench", "preflight", "integrations"), ("cli", "__main__")]
RANK = {name: i for i, names in enumerate(LAYERS) for name in names}
IMPORT = re.compile(r"^\s*(?:from|import) toolformer\.([a-z_]+)", re.M)


def test_every_module_imports_only_layers_above_it():
    offences = []
    for f in sorted(PACKAGE.rglob("*.py")):
        me = f.relative_to(PACKAGE).with_suffix("").parts[0]
        if me == "__init__":
            continue
        assert me in RANK, f"{f}: not in any layer of tests/test_layout.py and CONTRIBUTING.md"
        for other in IMPORT.findall(f.read_text(encoding="utf-8")):
            if other != me and RANK[other] > RANK[me]:
                offences.append(f"{f.relative_to(ROOT)} imports toolformer.{other}")
    assert not offences, offences


def import_graph(root: Path) -> dict[str, set[str]]:
    """Module -> the modules of the package ``root`` it imports, by every import statement at any depth (in a
    function, in ``if TYPE_CHECKING:``). ``from p import n`` imports ``p.n`` when that is a module, else ``p``."""
    modules = {}
    for f in sorted(root.rglob("*.py")):
        parts = f.relative_to(root.parent).with_suffix("").parts
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = f
    graph: dict[str, set[str]] = {}
    for name, f in modules.items():
        targets = []
        for node in ast.walk(ast.parse(f.read_text(encoding="utf-8"), str(f))):
            if isinstance(node, ast.Import):
                targets += [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                assert node.level == 0 and node.module, f"{f}:{node.lineno}: a relative import"
                targets += [f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in modules else node.module
                            for a in node.names]
        deps = set()
        for t in targets:
            while t and t not in modules:  # `import p.q.r` of a name in p.q; outside the package: nothing
                t = t.rpartition(".")[0]
            if t:
                deps.add(t)
        graph[name] = deps - {name}
    return graph


def import_cycles(graph: dict[str, set[str]]) -> list[str]:
    """One circle (``a -> b -> a``) per group of modules that import one another (a strongly connected
    component of ``graph``, Tarjan's algorithm), through the group's first module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    groups: list[set[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = set()
            while not group or w != v:
                w = stack.pop()
                group.add(w)
            if len(group) > 1:
                groups.append(group)

    for v in sorted(graph):
        if v not in index:
            visit(v)
    circles = []
    for group in groups:  # the shortest way back to the first module, inside its group
        first = min(group)
        paths = {first: [first]}
        frontier = [first]
        while frontier and first not in {w for v in frontier for w in graph[v]}:
            nxt = []
            for v in frontier:
                for w in sorted(graph[v] & group):
                    if w not in paths:
                        paths[w] = paths[v] + [w]
                        nxt.append(w)
            frontier = nxt
        last = min(v for v in frontier if first in graph[v])
        circles.append(" -> ".join(paths[last] + [first]))
    return sorted(circles)


def test_import_cycles_are_found_through_functions_and_type_checking(tmp_path):
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    files = {
        "__init__.py": "",
        "a.py": "import os\nimport pkg.b\n",
        "b.py": "def f():\n    from pkg import a\n    return a\n",  # a -> b -> a, through a function
        "c.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.sub.d import D\n",
        "sub/__init__.py": "",
        "sub/d.py": "from pkg.c import C\n",  # c -> sub.d -> c, through TYPE_CHECKING
        "e.py": "from pkg import a, b\nfrom pkg.sub import d\n",  # imports into circles, in none
    }
    for name, text in files.items():
        (pkg / name).write_text(text)
    graph = import_graph(pkg)
    assert graph["pkg.e"] == {"pkg.a", "pkg.b", "pkg.sub.d"}
    assert import_cycles(graph) == ["pkg.a -> pkg.b -> pkg.a", "pkg.c -> pkg.sub.d -> pkg.c"]


def test_no_import_cycles():
    """No module of toolformer/ imports itself through others, not even inside a function or for type checking."""
    assert import_cycles(import_graph(PACKAGE)) == []


def test_config_names_what_the_layers_below_register():
    """The config, the top layer, checks tool, call style and evaluation format names against its own lists;
    they are the registries' names."""
    from toolformer.config.evaluation import TASK_FORMATS
    from toolformer.config.schema import CALL_STYLES
    from toolformer.config.tools import BUILTIN_TOOLS
    from toolformer.tasks import FORMATS
    from toolformer.tools import REGISTRY
    from toolformer.tools.calls import STYLES

    assert sorted(BUILTIN_TOOLS) == sorted(REGISTRY)
    assert sorted(CALL_STYLES) == sorted(STYLES)
    assert sorted(TASK_FORMATS) == sorted(FORMATS)


FUNCTION_LINES = 60  # the longest function or method, its decorators left out
FILE_LINES = 400  # the longest module (tables of data go in data files: toolformer/smallworld/forms/*.json)


def long_functions(files: list[Path]) -> list[str]:
    """``file:line name: n lines`` for every function or method of ``files`` longer than FUNCTION_LINES."""
    found = []
    for f in files:
        for node in ast.walk(ast.parse(f.read_text(encoding="utf-8"), str(f))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = node.end_lineno - node.lineno + 1
                if n > FUNCTION_LINES:
                    found.append(f"{f}:{node.lineno} {node.name}: {n} lines")
    return found


def long_files(files: list[Path]) -> list[str]:
    """``file: n lines`` for every file of ``files`` longer than FILE_LINES."""
    return [f"{f}: {n} lines" for f in files if (n := len(f.read_text(encoding="utf-8").splitlines())) > FILE_LINES]


def test_long_functions_and_files_are_found(tmp_path):
    body = "".join(f"x{i} = {i}\n" for i in range(FUNCTION_LINES - 1))  # with its def: FUNCTION_LINES lines
    in_def, in_method = body.replace("x", "    x"), body.replace("x", "        x")
    (tmp_path / "ok.py").write_text(f"def fits():\n{in_def}\n\nclass C:\n    def fits(self):\n{in_method}")
    (tmp_path / "long.py").write_text(f"class C:\n    @staticmethod\n    def too_long():\n{in_method}        return 1\n"
                                      + "\n" * (FILE_LINES - FUNCTION_LINES - 2))
    files = [tmp_path / "ok.py", tmp_path / "long.py"]
    assert long_functions(files) == [f"{tmp_path / 'long.py'}:3 too_long: {FUNCTION_LINES + 1} lines"]
    assert long_files(files) == [f"{tmp_path / 'long.py'}: {FILE_LINES + 1} lines"]


def test_no_function_longer_than_60_lines():
    """A longer function is split into helpers that say what each part computes; a longer test into the checks
    it makes, each a function named for what it asserts (tests/ too)."""
    assert long_functions(sorted(PACKAGE.rglob("*.py"))) == []
    assert long_functions(sorted(TESTS.rglob("*.py"))) == []


def test_no_module_longer_than_400_lines():
    """A longer module is split along a seam into a module of the same package (its names importable from
    where they were); a longer test file by subject into files named for what they test (tests/ too)."""
    assert long_files(sorted(PACKAGE.rglob("*.py"))) == []
    assert long_files(sorted(TESTS.rglob("*.py"))) == []


# A test that starts a Python process is marked slow (pyproject.toml, the `slow` marker). Seen here: the helpers
# and clients below, subprocess or asyncio with sys.executable among the arguments, and a shell (bash or sh) that
# runs a script or a command line (each one the suite starts runs toolformer; `bash -n`, a syntax check, does
# not); through a function of the test's module or of a helper module of tests/, or a fixture, at any depth. Not
# seen: a process the product starts (an MCP server a config names, the contention benchmark's spinners): those
# tests carry the mark by hand.
STARTS_PYTHON = {"run_cli", "mcp_serve_params", "stdio_client"}
SPAWNS = {"run", "Popen", "call", "check_call", "check_output", "create_subprocess_exec"}


def _called(node: ast.Call) -> str | None:
    f = node.func
    return f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None


def spawns_python(call: ast.Call) -> bool:
    """Whether ``call`` starts a Python process by itself (see STARTS_PYTHON)."""
    if _called(call) in STARTS_PYTHON:
        return True
    f = call.func
    if not (isinstance(f, ast.Attribute) and f.attr in SPAWNS and isinstance(f.value, ast.Name)
            and f.value.id in ("subprocess", "asyncio")):
        return False
    if any(isinstance(n, ast.Attribute) and n.attr == "executable" and isinstance(n.value, ast.Name)
           and n.value.id == "sys" for n in ast.walk(call)):
        return True
    argv = call.args[0].elts if call.args and isinstance(call.args[0], ast.List) else []
    words = [w.value if isinstance(w, ast.Constant) else None for w in argv[:2]]
    return bool(words) and words[0] in ("bash", "sh") and words[1:] != ["-n"]


def _functions(path: Path) -> dict[str, ast.FunctionDef | ast.AsyncFunctionDef]:
    return {n.name: n for n in ast.parse(path.read_text(encoding="utf-8"), str(path)).body
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}


def _is_fixture(fn) -> bool:
    return any("fixture" in ast.unparse(d) for d in fn.decorator_list)


def python_starters(functions: dict) -> set[str]:
    """The names of ``functions`` that start a Python process: by a call of spawns_python, a call (by its name) of
    one of them, or, for a test or a fixture, a parameter naming a fixture that does."""
    found: set[str] = set()
    grew = True
    while grew:
        grew = False
        for name, fn in functions.items():
            if name in found:
                continue
            calls = [c for c in ast.walk(fn) if isinstance(c, ast.Call)]
            if (any(spawns_python(c) or (isinstance(c.func, ast.Name) and c.func.id in found) for c in calls)
                    or ((name.startswith("test_") or _is_fixture(fn))
                        and any(a.arg in found and _is_fixture(functions[a.arg]) for a in fn.args.args))):
                found.add(name)
                grew = True
    return found


def unmarked_python_starters(test_files: list[Path], helper_files: list[Path]) -> list[str]:
    """``file::test`` for every test of ``test_files`` that starts a Python process (its own functions and those
    of ``helper_files`` followed) without the slow mark on it or on its module (``pytestmark``)."""
    shared = {name: fn for f in helper_files for name, fn in _functions(f).items()}
    found = []
    for f in test_files:
        tree = ast.parse(f.read_text(encoding="utf-8"), str(f))
        module_slow = any(isinstance(n, ast.Assign) and any(getattr(t, "id", None) == "pytestmark" for t in n.targets)
                          and "mark.slow" in ast.unparse(n.value) for n in tree.body)
        own = _functions(f)
        for name in sorted(python_starters({**shared, **own}) & {n for n in own if n.startswith("test_")}):
            if not module_slow and not any(ast.unparse(d) == "pytest.mark.slow" for d in own[name].decorator_list):
                found.append(f"{f.name}::{name}")
    return found


def test_a_test_that_starts_python_is_marked_slow(tmp_path):
    sample = tmp_path / "test_sample.py"
    sample.write_text(
        "import subprocess, sys\nimport pytest\nfrom helpers import run_cli\n\n"
        "def spawn():\n    return subprocess.run([sys.executable, '-c', 'pass'])\n\n"
        "@pytest.fixture\ndef server():\n    yield spawn()\n\n"
        "def test_direct():\n    run_cli(['--help'])\n\n"
        "def test_through_a_helper():\n    spawn()\n\n"
        "def test_through_a_fixture(server):\n    pass\n\n"
        "def test_through_a_shell():\n    subprocess.run(['bash', 'scripts/x.sh'])\n\n"
        "@pytest.mark.slow\ndef test_marked():\n    spawn()\n\n"
        "def test_syntax_check():\n    subprocess.run(['bash', '-n', 'scripts/x.sh'])\n\n"
        "def test_in_process(tmp_path):\n    pass\n")
    assert unmarked_python_starters([sample], []) == [
        f"test_sample.py::{n}" for n in ("test_direct", "test_through_a_fixture", "test_through_a_helper",
                                         "test_through_a_shell")]
    helpers = sorted(p for p in TESTS.glob("*.py") if not p.name.startswith("test_"))
    assert unmarked_python_starters(sorted(TESTS.glob("test_*.py")), helpers) == []


def test_every_stage_has_the_signature_of_a_stage_function():
    """Every stage's run_stage is ``(cfg: PipelineConfig, force: bool = False, **options: Any) -> StageResult``,
    as the Protocol StageFunction says."""
    import importlib
    import inspect
    from typing import Any

    from toolformer.config.schema import STAGES, PipelineConfig
    from toolformer.stages import StageFunction, StageResult

    p = inspect.Parameter
    expected = inspect.Signature([p("cfg", p.POSITIONAL_OR_KEYWORD, annotation=PipelineConfig),
                                  p("force", p.POSITIONAL_OR_KEYWORD, default=False, annotation=bool),
                                  p("options", p.VAR_KEYWORD, annotation=Any)], return_annotation=StageResult)
    protocol = inspect.signature(StageFunction.__call__, eval_str=True)
    assert list(protocol.parameters)[0] == "self"
    assert protocol.replace(parameters=list(protocol.parameters.values())[1:]) == expected
    for name in STAGES:
        run_stage = importlib.import_module(f"toolformer.stages.{name}").run_stage
        assert inspect.signature(run_stage, eval_str=True) == expected, name


def test_a_stage_refuses_an_option_it_does_not_take(tmp_path):
    """An option a stage does not take is a TypeError naming it and the ones it takes, before the stage reads
    or writes anything."""
    from toolformer.config.schema import STAGES, PipelineConfig
    from toolformer.stages import run_stage

    cfg = PipelineConfig(run_dir=str(tmp_path / "run"))
    for name in STAGES:
        takes = "tool, kept, min_margin, max_margin" if name == "inspect" else "none"
        with pytest.raises(TypeError, match=rf"^stage {name}: unknown option\(s\) 'bogus' \(it takes {takes}\)$"):
            run_stage(name, cfg, bogus=1)
    with pytest.raises(TypeError, match=r"unknown option\(s\) 'kept_only', 'tol' \(it takes tool, kept,"):
        run_stage("inspect", cfg, tol="QA", kept_only=True, kept="yes")
    assert not (tmp_path / "run").exists()


PRODUCT = ("config", "rundir", "tools", "lm", "api", "corpus", "tasks", "inspect", "stages", "pipeline")


@pytest.mark.parametrize("world", ["smallworld", "published"])
def test_the_product_never_imports_a_world(world):
    """The pipeline's packages work without the worlds (toolformer.smallworld: the demo, its world, its base
    model and its lab; toolformer.published: the published-data world), by any import at any depth."""
    graph = import_graph(PACKAGE)
    product = [name for name in graph if name.count(".") and name.split(".")[1] in PRODUCT]
    offences = [f"{name} imports {dep}" for name in product for dep in graph[name]
                if dep.startswith(f"toolformer.{world}")]
    assert not offences, offences
    assert any(dep.startswith(f"toolformer.{world}") for dep in graph["toolformer.cli.jobs"])  # the check can see one


def test_the_product_config_has_no_small_world_section_and_the_world_defaults_are_the_shipped_world():
    """PipelineConfig: at most 110 settings, none of the small world's; the small world's defaults are what the
    demo runs (configs/demo.yaml, at most 40 lines, sets none of them) and data/world-base was trained with."""
    import dataclasses
    import typing

    from toolformer.config.schema import PipelineConfig
    from toolformer.smallworld.config import SECTIONS, load_smallworld

    def leaves(cls) -> int:
        hints = typing.get_type_hints(cls)
        return sum(leaves(hints[f.name]) if dataclasses.is_dataclass(hints[f.name]) else 1
                   for f in dataclasses.fields(cls))

    assert leaves(PipelineConfig) <= 110
    assert not {f.name for f in dataclasses.fields(PipelineConfig)} & set(SECTIONS)
    demo = ROOT / "configs" / "demo.yaml"
    assert len(demo.read_text().splitlines()) <= 40
    sw = load_smallworld(demo)
    for name, cls in SECTIONS.items():
        assert getattr(sw, name) == cls(), name
    shipped = load_smallworld(ROOT / "data" / "world-base" / "pipeline_config.yaml")
    assert shipped.world == sw.world
    assert dataclasses.replace(shipped.pretrain, shipped=sw.pretrain.shipped) == sw.pretrain


def test_the_worlds_share_through_worlds_and_never_import_each_other():
    """A third world adds only what is its own: what the small world and the published world both use lives in
    toolformer.worlds, and neither imports the other by any import at any depth."""
    graph = import_graph(PACKAGE)
    offences = [f"{name} imports {dep}" for name in graph for dep in graph[name]
                for me, other in (("smallworld", "published"), ("published", "smallworld"))
                if name.startswith(f"toolformer.{me}") and dep.startswith(f"toolformer.{other}")]
    product = [name for name in graph if name.count(".") and name.split(".")[1] in PRODUCT]
    offences += [f"{name} imports {dep}" for name in product for dep in graph[name]
                 if dep.startswith("toolformer.worlds")]
    assert not offences, offences
    assert not [f for f in (PACKAGE / "published").rglob("*.py") if "smallworld" in f.read_text(encoding="utf-8")]
    assert any(dep.startswith("toolformer.worlds") for dep in graph["toolformer.published.demo"])
