from pathlib import Path

import pytest
from helpers import run_cli

from toolformer.config.load import ConfigError, load_config
from toolformer.config.schema import PipelineConfig


def _write(tmp_path, text):
    p = tmp_path / "c.yaml"
    p.write_text(text)
    return p


def test_unknown_key_names_key_and_file(tmp_path):
    p = _write(tmp_path, "filter:\n  tau_filtr: 0.5\n")
    with pytest.raises(ConfigError, match=r"c\.yaml.*filter\.tau_filtr: unknown key"):
        load_config(PipelineConfig, p)


def test_wrong_type_names_key(tmp_path):
    p = _write(tmp_path, "sample:\n  top_k: many\n")
    with pytest.raises(ConfigError, match=r"sample\.top_k: expected an integer"):
        load_config(PipelineConfig, p)
    with pytest.raises(ConfigError, match=r"stages: unknown stage 'sampel'"):
        load_config(PipelineConfig, _write(tmp_path, "stages: [sampel]\n"))


def test_overrides_typed_and_nested(tmp_path):
    p = _write(tmp_path, "run_dir: runs/x\n")
    cfg = load_config(PipelineConfig, p, ["filter.tau_filter=0.25", "sample.per_tool.Calculator.top_k=3",
                                           "tools.enabled=[Calculator]", "model.path=2023"])
    assert cfg.filter.tau_filter == 0.25 and cfg.sample.per_tool["Calculator"].top_k == 3
    assert cfg.tools.enabled == ["Calculator"] and cfg.model.path == "2023"
    assert load_config(PipelineConfig, p, ["finetune.learning_rate=3e-3"]).finetune.learning_rate == 0.003
    assert load_config(PipelineConfig, p, ["model.path=1e5"]).model.path == "1e5"  # strings stay strings
    with pytest.raises(ConfigError, match="filter.tau_filter: expected a number"):
        load_config(PipelineConfig, p, ["filter.tau_filter=nan"])  # only exponent notation becomes a number
    with pytest.raises(ConfigError, match="filter.tau_filter: expected a number"):
        load_config(PipelineConfig, p, ["filter.tau_filter=high"])
    with pytest.raises(ConfigError, match="expected key=value"):
        load_config(PipelineConfig, p, ["filter.tau_filter"])


def test_every_field_documented():
    """Every leaf config field, in every module of the config package, is followed by a one-line docstring."""
    import ast
    import inspect

    from toolformer.config import evaluation, finetune, schema, tools
    from toolformer.smallworld import config as world
    from toolformer.worlds import config as worlds

    classes = [n for m in (schema, evaluation, finetune, tools, world, worlds)
               for n in ast.parse(inspect.getsource(m)).body
               if isinstance(n, ast.ClassDef)]
    sections = {n.name for n in classes}
    assert {"PipelineConfig", "ToolsConfig", "WorldConfig", "PretrainConfig"} <= sections
    checked = 0
    for cls in classes:
        body = cls.body
        for i, node in enumerate(body):
            if not isinstance(node, ast.AnnAssign) or ast.unparse(node.annotation) in sections \
                    or ast.unparse(node.annotation).startswith("ClassVar"):  # not a field
                continue
            nxt = body[i + 1] if i + 1 < len(body) else None
            ok = isinstance(nxt, ast.Expr) and isinstance(nxt.value, ast.Constant) and isinstance(nxt.value.value, str)
            assert ok, f"{cls.name}.{ast.unparse(node.target)} has no docstring"
            checked += 1
    assert checked > 40


def test_shipped_configs_load_and_say_how_to_run(repo_root: Path):
    files = sorted((repo_root / "configs").glob("*.yaml"))
    assert files
    for f in files:
        head = f.read_text().splitlines()[:6]
        assert head[0].startswith("#"), f"{f.name} must open with a comment"
        assert any("toolformer " in h or "python " in h or "bash " in h for h in head if h.startswith("#")), f.name
        if f.name.startswith(("tiny", "demo", "default", "paper")):
            load_config(PipelineConfig, f)


@pytest.mark.slow
@pytest.mark.parametrize("override, message", [
    ("filter.tau_filtre=1", "filter.tau_filtre: unknown key"),
    ("sample.top_k=lots", "sample.top_k: expected an integer"),
    ("model.path=/no/such/model", "model folder /no/such/model does not exist"),
])
def test_bad_config_clear_message(override, message, tiny_model_dir):
    res = run_cli(["sample", "--config", "configs/tiny.yaml", f"model.path={tiny_model_dir}", "run_dir=/tmp/tf-bad",
                override])
    assert res.returncode == 2 and message in res.stderr, res.stderr[-2000:]
