"""Faults: killed stages, hostile tool inputs, bad data, determinism, side effects."""

import json
import sys
import time
from pathlib import Path

import pytest
from helpers import read_jsonl, run_cli, shard_lines, write_jsonl
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from toolformer.config.load import load_config
from toolformer.config.schema import PipelineConfig
from toolformer.pipeline import run_pipeline
from toolformer.tools import REGISTRY, Tool, ToolError, calculate

ROOT = Path(__file__).resolve().parent.parent


def _overrides(model_dir, run_dir):
    return [f"run_dir={run_dir}", f"model.path={model_dir}", f"corpus.path={ROOT / 'data' / 'corpus.jsonl'}",
            f"tools.collection={ROOT / 'data' / 'collection.jsonl'}",
            f"tools.knowledge={ROOT / 'data' / 'knowledge.jsonl'}", "shard_size=4", "filter.tau_filter=0.0",
            "stages=[sample, execute, filter]"]


@pytest.fixture(scope="module")
def reference_run(tiny_model_dir, tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("ref") / "run"
    cfg = load_config(PipelineConfig, ROOT / "configs" / "tiny.yaml", _overrides(tiny_model_dir, run_dir))
    run_pipeline(cfg)
    return run_dir


@pytest.mark.slow
@pytest.mark.parametrize("stage", ["sample", "execute", "filter"])
def test_sigkill_then_rerun_equals_uninterrupted(stage, reference_run, tiny_model_dir, tmp_path):
    run_dir = tmp_path / "run"
    args = ["run", "--config", "configs/tiny.yaml", *_overrides(tiny_model_dir, run_dir)]
    killed = run_cli(args, {"TOOLFORMER_FAULT": f"{stage}:2"})
    assert killed.returncode == -9, killed.stderr[-2000:]  # SIGKILL after 2 shards of the stage
    assert not (run_dir / stage / "manifest.json").exists()
    assert len(list((run_dir / stage).glob("shard-*.jsonl"))) == 2
    again = run_cli(args)
    assert again.returncode == 0, again.stderr[-2000:]
    assert "resuming after 2 complete shard(s)" in again.stdout
    for s in ("sample", "execute", "filter"):
        got, want = shard_lines(run_dir, s), shard_lines(reference_run, s)
        assert got == want, s  # same records, same order: none lost, none duplicated
        assert len(set(got)) == len(got) or s == "sample"


@pytest.mark.slow
def test_same_seed_gives_byte_identical_records(reference_run, tiny_model_dir, tmp_path):
    cfg = load_config(PipelineConfig, ROOT / "configs" / "tiny.yaml", _overrides(tiny_model_dir, tmp_path / "again"))
    run_pipeline(cfg)
    for s in ("sample", "execute", "filter"):
        a = b"".join(p.read_bytes() for p in sorted((reference_run / s).glob("shard-*.jsonl")))
        b = b"".join(p.read_bytes() for p in sorted((tmp_path / "again" / s).glob("shard-*.jsonl")))
        assert a == b and a
    m = json.loads((tmp_path / "again" / "sample" / "manifest.json").read_text())
    assert m["seed"] == 0 and m["versions"]["torch"] and m["versions"]["transformers"]


# -- hostile inputs -------------------------------------------------------------------

_FORBIDDEN_EVENTS = {"exec", "os.system", "subprocess.Popen", "os.exec", "os.posix_spawn", "open", "socket.connect"}
_WATCH = {"on": False, "seen": []}


def _audit(event, args):
    if _WATCH["on"] and (event in _FORBIDDEN_EVENTS or event.startswith("os.")):
        _WATCH["seen"].append(event)


sys.addaudithook(_audit)

_code_like = st.sampled_from([
    "__import__('os').system('id')", "open('/etc/passwd').read()", "(lambda: 1)()", "().__class__.__bases__",
    "2 ** 99999", "9" * 5000, "(" * 500 + "1" + ")" * 500, "1" + "+1" * 3000, "exec('1')", "x.y", "[1, 2]",
    "{'a': 1}", "1 if 1 else 2", "1 < 2", "~1", "1 << 64", "1 @ 2", "a[0]", "f'{1}'", "b'1'", "1j", "…",
    "١٢٣ + ٤", "１２ + ３", "1e308 * 1e308", "0x1F", "1_000", "--1", "1 / (2 - 2)", "4,2 + 1", "\x00", "1;2",
])
_arith = st.recursive(
    st.one_of(st.integers(-10**6, 10**6).map(str), st.decimals(-10**4, 10**4, places=3, allow_nan=False).map(str)),
    lambda e: st.tuples(e, st.sampled_from(["+", "-", "*", "/", " x ", " × ", " ÷ "]), e).map(
        lambda t: f"({t[0]}{t[1]}{t[2]})"), max_leaves=8)
_hostile = st.one_of(_code_like, _arith, st.text(max_size=300),
                     st.tuples(_arith, _code_like).map(lambda t: t[0] + t[1]))


@pytest.mark.slow
@settings(max_examples=10_000, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
@given(expr=_hostile)
def test_calculator_never_raises_never_runs_code(expr):
    _WATCH["on"] = True
    try:
        out = calculate(expr)
    except ToolError:
        out = None
    finally:
        _WATCH["on"] = False
    # No wall-clock bound here: under CI load it fails on inputs that are fast. The work is bounded
    # by the input and node limits (refusals below), and a hanging tool is the sandbox's job
    # (test_hostile_tools_contained_while_the_execute_stage_finishes).
    assert not _WATCH["seen"], _WATCH["seen"]
    if out is not None:
        float(out)  # a result is always a plain number
        assert len(out) < 25


def test_hostile_tools_contained_while_the_execute_stage_finishes(tiny_model_dir, tmp_path, monkeypatch, capsys):
    class Hang(Tool):
        name = "Hang"

        def run(self, tool_input, date=None):
            time.sleep(3600)

    class Crash(Tool):
        name = "Crash"

        def run(self, tool_input, date=None):
            raise MemoryError("pretend")

    class Megabytes(Tool):
        name = "Megabytes"

        def run(self, tool_input, date=None):
            return "y" * 3_000_000

    for t in (Hang, Crash, Megabytes):
        monkeypatch.setitem(REGISTRY, t.name, t)
    run_dir = tmp_path / "run"
    (run_dir / "sample").mkdir(parents=True)
    docs = [{"doc_id": "a", "text": "x y z", "date": None}]
    write_jsonl(run_dir / "sample" / "documents.jsonl", docs)
    recs = [{"doc_id": "a", "tool": t, "input": str(i), "position": 0, "char_start": 0, "p_i": None, "source": "rules"}
            for i, t in enumerate(["Hang", "Crash", "Megabytes", "Calculator"])]
    write_jsonl(run_dir / "sample" / "shard-00000.jsonl", recs)
    cfg = load_config(PipelineConfig, None, [f"run_dir={run_dir}", f"model.path={tiny_model_dir}",
                                             "tools.enabled=[Hang, Crash, Megabytes, Calculator]",
                                             "tools.timeout_s=0.5", "tools.max_result_chars=100"])
    from toolformer.rundir.folder import StageFolder
    from toolformer.stages import execute, stage_hash

    StageFolder(run_dir, "sample").finish(stage_hash(cfg, "sample"), 0, {})
    t0 = time.perf_counter()
    execute.run_stage(cfg)
    assert time.perf_counter() - t0 < 30
    out = {json.loads(line)["tool"]: json.loads(line) for line in shard_lines(run_dir, "execute")}
    assert out["Hang"]["error"]["code"] == "timeout"
    assert out["Crash"]["error"]["code"] == "exception" and "MemoryError" in out["Crash"]["error"]["message"]
    assert len(out["Megabytes"]["result"]) == 101
    assert out["Calculator"]["result"] == "3"
    assert "execute: 2 of 4 calls returned a result" in capsys.readouterr().out


def test_tool_with_side_effects_refused_unless_allowed(tiny_model_dir, tmp_path, monkeypatch):
    class Mailer(Tool):
        name = "Mailer"
        read_only = False

        def run(self, tool_input, date=None):
            return "sent"

    monkeypatch.setitem(REGISTRY, "Mailer", Mailer)
    from toolformer.stages.sample import check_tools

    cfg = load_config(PipelineConfig, None, ["tools.enabled=[Calculator, Mailer]"])
    with pytest.raises(ValueError, match="Mailer is not read-only.*tools.allow_side_effects=true"):
        check_tools(cfg)
    cfg.tools.allow_side_effects = True
    assert check_tools(cfg) == ["Calculator", "Mailer"]


# -- bad data and bad config -------------------------------------------------------------

@pytest.mark.slow
def test_bad_corpus_records_counted_and_written_to_rejected(tiny_model_dir, tmp_path):
    corpus = tmp_path / "bad.jsonl"
    long_text = " ".join(f"The mill sold {i} sacks and {i + 1} more, {2 * i + 1} in all." for i in range(150))
    corpus.write_bytes(b"\n".join([
        json.dumps({"id": "ok1", "text": "Sold 340 and 275, 615 in all.", "date": "2020-01-01"}).encode(),
        b"", b"{broken", b"\xff\xfe not utf8", json.dumps({"id": "nt"}).encode(),
        json.dumps({"id": "long", "text": long_text}).encode(),
        json.dumps({"id": "ok1", "text": "duplicate id"}).encode(),
    ]) + b"\n")
    run_dir = tmp_path / "run"
    res = run_cli(["sample", "--config", "configs/tiny.yaml", f"run_dir={run_dir}", f"model.path={tiny_model_dir}",
                f"corpus.path={corpus}", "model.max_length=256", "tools.enabled=[Calculator]",
                "sample.method={Calculator: rules}"])
    assert res.returncode == 0, res.stderr[-2000:]
    assert "4 records rejected" in res.stdout
    rejected = read_jsonl(run_dir / "sample" / "rejected.jsonl")
    lines = sorted(int(r["source"].rsplit(":", 1)[1]) for r in rejected)
    assert lines == [3, 4, 5, 7] and all(str(corpus) in r["source"] and r["reason"] for r in rejected)
    docs = read_jsonl(run_dir / "sample" / "documents.jsonl")
    windows = [d for d in docs if d["doc_id"].startswith("long#w")]
    assert len(windows) > 1 and "".join(d["text"] for d in windows) == long_text  # split, nothing lost


@pytest.mark.parametrize("override, message", [
    ("filter.tau_filtre=1", "filter.tau_filtre: unknown key"),
    ("sample.top_k=lots", "sample.top_k: expected an integer"),
    ("model.path=/no/such/model", "model folder /no/such/model does not exist"),
])
def test_bad_config_clear_message(override, message, tiny_model_dir):
    res = run_cli(["sample", "--config", "configs/tiny.yaml", f"model.path={tiny_model_dir}", "run_dir=/tmp/tf-bad",
                override])
    assert res.returncode == 2 and message in res.stderr, res.stderr[-2000:]


def test_tokenizer_lacking_markers_is_refused():
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    from toolformer.lm.modeling import check_markers
    from toolformer.tools.calls import STYLES

    backend = Tokenizer(models.WordLevel({"<unk>": 0, "plain": 1, "words": 2}, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    tok = PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="<unk>")
    with pytest.raises(ValueError, match="cannot represent the call marker '\\['.*calls.style=special"):
        check_markers(tok, STYLES["plain"], "t")
    from toolformer.tools.calls import add_call_tokens

    add_call_tokens(tok, None, STYLES["special"])
    check_markers(tok, STYLES["special"], "t")  # the special style adds its markers: accepted


@pytest.fixture(scope="module")
def reference_tuned(tiny_model_dir, tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("ref-ft") / "run"
    # One thread in both processes: the rerun's weights are compared bit for bit with these.
    ov = _overrides(tiny_model_dir, run_dir)[:-1] + ["stages=[sample, execute, filter, build, finetune]",
                                                     "model.threads=1"]
    cfg = load_config(PipelineConfig, ROOT / "configs" / "tiny.yaml", ov)
    run_pipeline(cfg)
    return run_dir, ov


@pytest.mark.slow
@pytest.mark.parametrize("stage", ["build", "finetune"])
def test_sigkill_build_and_finetune_then_rerun(stage, reference_tuned, tmp_path):
    import torch
    from safetensors.torch import load_file

    ref_dir, ov = reference_tuned
    run_dir = tmp_path / "run"
    ov = [o if not o.startswith("run_dir=") else f"run_dir={run_dir}" for o in ov]
    args = ["run", "--config", "configs/tiny.yaml", *ov]
    killed = run_cli(args, {"TOOLFORMER_FAULT": f"{stage}:1"})
    assert killed.returncode == -9, killed.stderr[-2000:]
    assert not (run_dir / stage / "manifest.json").exists()
    again = run_cli(args)
    assert again.returncode == 0, again.stderr[-2000:]
    assert (run_dir / "build" / "augmented.jsonl").read_bytes() == (ref_dir / "build" / "augmented.jsonl").read_bytes()
    state = json.loads((run_dir / "model" / "trainer_state.json").read_text())
    steps = [h["step"] for h in state["log_history"] if "loss" in h]
    assert steps == sorted(set(steps)) and steps[-1] == 6  # continued, no step twice
    if stage == "finetune":
        assert "resum" in again.stdout + again.stderr
    a, b = load_file(run_dir / "model" / "model.safetensors"), load_file(ref_dir / "model" / "model.safetensors")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
