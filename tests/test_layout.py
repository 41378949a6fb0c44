"""The package's layers (CONTRIBUTING.md, "Layout"): a module imports only
its own layer and the layers above it; nothing imports the command line."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent / "toolformer"
LAYERS = [("config",), ("run",), ("tools",), ("lm",), ("api",), ("records", "corpus", "tasks"), ("inspect",),
          ("stages",), ("world",), ("pipeline",), ("demo",), ("bench", "gpucheck", "mcpserve", "interact"), ("cli",)]
RANK = {name: i for i, names in enumerate(LAYERS) for name in names}
# The config checks names against the registries of call styles and evaluation formats, on use.
ALLOWED = {("config", "tools"), ("config", "tasks")}
IMPORT = re.compile(r"^\s*(?:from|import) toolformer\.([a-z_]+)", re.M)


def test_every_module_imports_only_layers_above_it():
    offences = []
    for f in sorted(ROOT.rglob("*.py")):
        me = f.relative_to(ROOT).with_suffix("").parts[0]
        if me == "__init__":
            continue
        assert me in RANK, f"{f}: not in any layer of tests/test_layout.py and CONTRIBUTING.md"
        for other in IMPORT.findall(f.read_text(encoding="utf-8")):
            if other != me and RANK[other] > RANK[me] and (me, other) not in ALLOWED:
                offences.append(f"{f.relative_to(ROOT.parent)} imports toolformer.{other}")
    assert not offences, offences
