"""The package's layers (CONTRIBUTING.md, "Layout"): a module imports only
its own layer and the layers above it; nothing imports the command line; no
module imports itself through others (an import circle)."""

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent / "toolformer"
LAYERS = [("version",), ("config",), ("rundir",), ("tools",), ("lm",), ("api",), ("corpus", "tasks"), ("inspect",),
          ("stages",), ("pipeline",), ("smallworld",), ("bench", "preflight", "integrations"), ("cli",)]
RANK = {name: i for i, names in enumerate(LAYERS) for name in names}
IMPORT = re.compile(r"^\s*(?:from|import) toolformer\.([a-z_]+)", re.M)


def test_every_module_imports_only_layers_above_it():
    offences = []
    for f in sorted(ROOT.rglob("*.py")):
        me = f.relative_to(ROOT).with_suffix("").parts[0]
        if me == "__init__":
            continue
        assert me in RANK, f"{f}: not in any layer of tests/test_layout.py and CONTRIBUTING.md"
        for other in IMPORT.findall(f.read_text(encoding="utf-8")):
            if other != me and RANK[other] > RANK[me]:
                offences.append(f"{f.relative_to(ROOT.parent)} imports toolformer.{other}")
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
    assert import_cycles(import_graph(ROOT)) == []


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
    """A longer function is split into helpers that say what each part computes."""
    assert long_functions(sorted(ROOT.rglob("*.py"))) == []


def test_no_module_longer_than_400_lines():
    """A longer module is split along a seam into a module of the same package (its names importable from
    where they were)."""
    assert long_files(sorted(ROOT.rglob("*.py"))) == []


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


def test_the_product_never_imports_the_small_world():
    """The pipeline's packages work without the small world (toolformer.smallworld: the demo, its world, its base
    model and its lab), by any import at any depth."""
    graph = import_graph(ROOT)
    product = [name for name in graph if name.count(".") and name.split(".")[1] in PRODUCT]
    offences = [f"{name} imports {dep}" for name in product for dep in graph[name]
                if dep.startswith("toolformer.smallworld")]
    assert not offences, offences
    assert any(dep.startswith("toolformer.smallworld") for dep in graph["toolformer.cli.jobs"])  # the check can see one


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
    demo = ROOT.parent / "configs" / "demo.yaml"
    assert len(demo.read_text().splitlines()) <= 40
    sw = load_smallworld(demo)
    for name, cls in SECTIONS.items():
        assert getattr(sw, name) == cls(), name
    shipped = load_smallworld(ROOT.parent / "data" / "world-base" / "pipeline_config.yaml")
    assert shipped.world == sw.world
    assert dataclasses.replace(shipped.pretrain, shipped=sw.pretrain.shipped) == sw.pretrain
