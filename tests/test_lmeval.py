"""The lm-evaluation-harness model ``toolformer`` (toolformer/integrations/): its arguments, generation with tools,
log-likelihoods with tools disabled, ``toolformer lm-eval`` and the package without lm-eval."""

from __future__ import annotations

import ast
import json
import math
import sys

import pytest
import torch
from helpers import ROOT

from toolformer.cli.app import main

pytest.importorskip("lm_eval")

from lm_eval.api.instance import Instance  # noqa: E402

from toolformer.api import ToolformerModel  # noqa: E402
from toolformer.integrations.lmeval_model import ToolformerLM, cut_at_stop  # noqa: E402
from toolformer.tools.calls import get_style  # noqa: E402

FIX = ROOT / "tests" / "fixtures" / "eval"
TEXT = "The bridge over the Vessa opened in 1968. Aldermoor has 4,210 people."


@pytest.fixture(autouse=True)
def lm_eval_logs_to_this_tests_stderr():
    """lm-eval's log handler keeps the stderr of the test that first set it up, which pytest has closed since
    (its next line would be a "Logging error" traceback): dropped, so lm-eval sets up one on this test's."""
    import logging

    import lm_eval.utils

    logger = logging.getLogger("lm_eval")
    for handler in list(logger.handlers):
        logger.removeHandler(handler)
    lm_eval.utils._LOGGING_CONFIGURED = False
    yield


@pytest.fixture(scope="module")
def lm(tiny_model_dir) -> ToolformerLM:
    return ToolformerLM(pretrained=tiny_model_dir, tools="off", device="cpu", batch_size=4)


def request(kind: str, args: tuple, doc: dict | None = None, task: str = "t", idx: int = 0) -> Instance:
    return Instance(request_type=kind, doc=doc or {}, arguments=args, idx=idx, metadata=(task, idx, 1))


def test_model_args_take_the_folder_rule_and_name_bad_values(tiny_model_dir):
    lm = ToolformerLM.create_from_arg_string(
        f"pretrained={tiny_model_dir},tools=off,top_k=3,max_calls=2,constrained=true,batch_size=5,max_gen_toks=7",
        {"batch_size": 1, "max_batch_size": None, "device": "cpu"})
    assert (lm.top_k, lm.max_calls, lm.constrained, lm.batch_size, lm.max_gen_toks) == (3, 2, True, 5, 7)
    assert not lm.tools_on and lm.tf.tools == [] and lm.get_model_info()["toolformer"]["tools"] == []
    default = ToolformerLM.create_from_arg_obj({"pretrained": tiny_model_dir, "tools": False}, {"batch_size": 2})
    ev = default.tf.config.evaluate
    assert (default.top_k, default.max_calls, default.max_gen_toks) == (ev.top_k_trigger, ev.max_calls,
                                                                        ev.max_new_tokens)
    assert default.batch_size == 2
    for args, named in [({"bogus": 1}, "bogus"), ({"top_k": "ten"}, "top_k"), ({"tools": "maybe"}, "tools"),
                        ({"batch_size": 0}, "batch_size")]:
        with pytest.raises(ValueError, match=named):
            ToolformerLM(pretrained=tiny_model_dir, **{"tools": "off", **args})
    with pytest.raises(ValueError, match="pretrained"):
        ToolformerLM(pretrained="")
    if not torch.cuda.is_available():  # lm-eval's CLI always passes --device (cuda:0 by default)
        with pytest.warns(UserWarning, match="CUDA is not available"):
            lm = ToolformerLM.create_from_arg_obj({"pretrained": tiny_model_dir, "tools": "off"}, {"device": "cuda:0"})
        assert lm.device.type == "cpu"


def test_loglikelihood_is_the_perplexity_with_tools_disabled(lm):
    """A text within the window: its rolling log-likelihood is the evaluate stage's perplexity "with tools
    disabled" (call-start tokens taken out, the rest renormalised) and the log-likelihood after no context."""
    from toolformer.stages.evaluate import perplexity

    n = len(lm.tokenizer.encode(TEXT, add_special_tokens=False))
    _, counted, ppl_without = perplexity(lm.model, lm.tokenizer, [TEXT], lm.window, without=lm.start_ids)
    assert counted == n and lm.start_ids
    [rolling] = lm.loglikelihood_rolling([request("loglikelihood_rolling", (TEXT,))], disable_tqdm=True)
    assert rolling == pytest.approx(-n * math.log(ppl_without), rel=1e-4)
    [(whole, _)] = lm.loglikelihood([request("loglikelihood", ("", TEXT))], disable_tqdm=True)
    assert whole == pytest.approx(rolling, rel=1e-5)


def test_loglikelihood_batches_as_one_and_follows_the_chain_rule(lm):
    """Requests of different lengths scored together (padded) equal each scored alone; log p(b c | a) =
    log p(b | a) + log p(c | a b); the most likely next token is greedy."""
    pairs = [("The bridge", " over the Vessa"), ("The bridge", " over the"), ("The bridge over the", " Vessa"),
             ("Aldermoor has", " 4,210 people.")]
    together = lm.loglikelihood([request("loglikelihood", p) for p in pairs], disable_tqdm=True)
    alone = [lm.loglikelihood([request("loglikelihood", p)], disable_tqdm=True)[0] for p in pairs]
    assert [x[0] for x in together] == pytest.approx([x[0] for x in alone], abs=1e-4)
    assert together[0][0] == pytest.approx(together[1][0] + together[2][0], abs=1e-4)
    ids = lm.tokenizer.encode("Aldermoor has", add_special_tokens=False)
    logits = lm.model(input_ids=torch.tensor([lm._prefix() + ids])).logits[0, -1]  # (V,)
    logits[lm.start_ids] = float("-inf")
    best = int(logits.argmax())
    assert lm.score_pairs([(lm._prefix() + ids, [best])])[0][1] is True
    assert lm.score_pairs([(lm._prefix() + ids, [int(logits.argmin())])])[0][1] is False


def test_stop_sequences_cut_outside_calls_only():
    style = get_style("plain")
    text = "[Calculator(1.5 * 2) → 3.0] 3 apples. Then\n\nmore"
    assert cut_at_stop(text, ["."], style) == "[Calculator(1.5 * 2) → 3.0] 3 apples"  # not at 1.5 or 3.0
    assert cut_at_stop(text, ["\n\n", "Then"], style) == "[Calculator(1.5 * 2) → 3.0] 3 apples. "
    assert cut_at_stop(text, [], style) == text and cut_at_stop(text, [""], style) == text


def test_generate_until_decodes_each_task_in_batches_with_its_settings(tiny_model_dir):
    """The toolformer model's decoding: per task and generation arguments, shortest prompts first in batches of
    batch_size, each document's date given, the task's max_gen_toks and stops honoured, calls kept."""
    tf = ToolformerModel.from_pretrained(tiny_model_dir, device="cpu", tools=["Calculator", "Calendar"],
                                         warn=lambda m: None)
    lm = ToolformerLM(pretrained=tf, batch_size=2, top_k=10_000, constrained="on")  # calls at once, well formed
    seen = []
    real = tf.generate

    def spy(prompts, **kw):
        seen.append((list(prompts), kw))
        return real(prompts, **kw)

    tf.generate = spy
    kw = {"until": ["."], "max_gen_toks": 24, "do_sample": False}
    prompts = ["What is 4 * 5? The answer is", "Today is", "Ok", "What day is it today?"]
    reqs = [request("generate_until", (p, dict(kw)), {"date": f"2020-01-0{i + 1}"}, task="a" if i < 3 else "b", idx=i)
            for i, p in enumerate(prompts)]
    out = lm.generate_until(reqs, disable_tqdm=True)
    assert [s[0] for s in seen] == [["Ok", "Today is"], ["What is 4 * 5? The answer is"], ["What day is it today?"]]
    assert seen[0][1]["dates"] == ["2020-01-03", "2020-01-02"]
    assert all(s[1]["max_new_tokens"] == 24 and s[1]["top_k_trigger"] == 10_000 and s[1]["constrained"] for s in seen)
    alone = real(prompts, max_new_tokens=24, top_k_trigger=10_000, constrained=True, batch_size=4,
                 dates=[f"2020-01-0{i + 1}" for i in range(4)])
    assert out == [cut_at_stop(g.text, ["."], tf.style) for g in alone]
    for i in range(3):  # each document's date reached the Calendar tool, and the output keeps the call
        assert "Calendar()" in out[i] and f"January {i + 1}, 2020" in out[i]


def test_toolformer_lm_eval_runs_lm_evals_cli_with_the_model(tiny_model_dir, tmp_path, capsys, monkeypatch):
    """``toolformer lm-eval`` hands its arguments to lm-eval's own command line with the model registered: on a
    task written from a published-layout file; a bad model argument is a usage error naming it. (lm-eval's own
    task index, seconds to build, is left out: only --include_path is read.)"""
    import lm_eval.tasks

    class LocalTasks(lm_eval.tasks.TaskManager):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **{**kwargs, "include_defaults": False})

    monkeypatch.setattr(lm_eval.tasks, "TaskManager", LocalTasks)
    assert main(["tasks", "lmeval", str(FIX / "SVAMP.json"), "--name", "svamp_t", "--out", str(tmp_path / "tasks"),
                 "--max-new-tokens", "4"]) == 0
    common = ["--model", "toolformer", "--tasks", "svamp_t", "--include_path", str(tmp_path / "tasks"),
              "--limit", "2", "--device", "cpu"]
    assert main(["lm-eval", "run", *common, "--model_args", f"pretrained={tiny_model_dir},tools=off",
                 "--output_path", str(tmp_path / "out")]) == 0
    [results] = list((tmp_path / "out").rglob("results_*.json"))
    data = json.loads(results.read_text())
    assert data["results"]["svamp_t"]["acc,none"] in (0.0, 0.5, 1.0)
    assert data["config"]["toolformer"]["tools"] == [] and data["config"]["model"] == "toolformer"
    assert main(["lm-eval", *common, "--model_args", f"pretrained={tiny_model_dir},bogus=1"]) == 2  # no `run`
    assert "bogus" in capsys.readouterr().err


def test_chat_template_refused_and_stops_during_task_indexing(tiny_model_dir, tmp_path, capsys, monkeypatch):
    """``--apply_chat_template`` is refused in one line (exit 2): the model continues plain text. SIGTERM while
    lm-eval indexes its tasks, inside an ``except Exception`` of lm-eval's (as it reads task files), still stops
    the command with the one line and 143. The model takes its threads as the evaluate stage does."""
    import os
    import signal

    import lm_eval.tasks

    import toolformer.integrations.lmeval_model as model_module

    stop = {"now": False}

    class LocalTasks(lm_eval.tasks.TaskManager):
        def __init__(self, *args, **kwargs):
            try:
                if stop["now"]:
                    os.kill(os.getpid(), signal.SIGTERM)
            except Exception:  # what lm-eval does with a task file it cannot read
                pass
            super().__init__(*args, **{**kwargs, "include_defaults": False})

    threads: list[int] = []
    monkeypatch.setattr(lm_eval.tasks, "TaskManager", LocalTasks)
    monkeypatch.setattr(model_module, "set_threads", threads.append)
    assert main(["tasks", "lmeval", str(FIX / "SVAMP.json"), "--name", "svamp_c", "--out", str(tmp_path / "tasks"),
                 "--max-new-tokens", "4"]) == 0
    common = ["run", "--model", "toolformer", "--tasks", "svamp_c", "--include_path", str(tmp_path / "tasks"),
              "--limit", "1", "--device", "cpu", "--model_args", f"pretrained={tiny_model_dir},tools=off"]
    capsys.readouterr()
    assert main(["lm-eval", *common, "--apply_chat_template"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and [line for line in err.splitlines() if line.startswith("toolformer:")] == [
        f"toolformer: error: {model_module.NO_CHAT}"]
    assert threads == [0]  # model.threads: 0, the cores following the load
    stop["now"], before = True, signal.getsignal(signal.SIGTERM)
    assert main(["lm-eval", *common]) == 143
    assert capsys.readouterr().err.strip().splitlines()[-1].startswith("toolformer: stopped by SIGTERM; kept ")
    assert signal.getsignal(signal.SIGTERM) == before  # the handlers are given back


def test_without_lm_eval_the_package_works_and_says_what_to_install(monkeypatch, capsys):
    """lm-eval is imported only by toolformer/integrations/lmeval_model.py (at its top) and inside functions of
    toolformer/integrations/lmeval.py; without it the command and the import say how to install it."""
    for f in (ROOT / "toolformer").rglob("*.py"):
        tree = ast.parse(f.read_text(encoding="utf-8"))
        top = [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
        names = [a.name for n in top if isinstance(n, ast.Import) for a in n.names]
        names += [n.module or "" for n in top if isinstance(n, ast.ImportFrom)]
        if f != ROOT / "toolformer" / "integrations" / "lmeval_model.py":
            assert not any(m.split(".")[0] == "lm_eval" for m in names), f
    monkeypatch.setitem(sys.modules, "lm_eval", None)
    assert main(["lm-eval", "run", "--model", "toolformer"]) == 2
    assert "pip install 'toolformer[lmeval]'" in capsys.readouterr().err
    import toolformer.integrations.lmeval as pkg

    with pytest.raises(ImportError, match=r"toolformer\[lmeval\]"):
        pkg.register()


def test_bench_lmeval_names_a_missing_model_folder(tmp_path, capsys):
    """``toolformer bench --lmeval`` (lm-eval against evaluate on the same items) refuses a model folder that is not
    there in one line; it is run by hand, its ratio is no test."""
    assert main(["bench", "--lmeval", "--config", str(ROOT / "configs" / "tiny.yaml"), "--model",
                 str(tmp_path / "none"), "--items", "2"]) == 2
    assert capsys.readouterr().err.strip() == f"toolformer: error: --model {tmp_path / 'none'}: no such model folder " \
                                              "(run the pipeline first, or name one)"


def test_tasks_that_all_come_from_include_path_skip_lm_evals_own_index(tmp_path):
    """lm-eval indexes its thousands of built-in task files before it runs anything; when every task asked for
    is defined under --include_path that is skipped (and kept when one is not)."""
    from toolformer.integrations.lmeval import own_tasks_only, without_default_tasks

    (tmp_path / "svamp.yaml").write_text("task: svamp\ndataset_path: json\n")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "qa.yaml").write_text("task: qa\n")
    assert own_tasks_only(["--tasks", "svamp,qa", "--include_path", str(tmp_path)])
    assert own_tasks_only(["--tasks=svamp", f"--include_path={tmp_path}"])
    assert not own_tasks_only(["--tasks", "svamp,gsm8k", "--include_path", str(tmp_path)])
    assert not own_tasks_only(["--tasks", "svamp"])
    import lm_eval.tasks as lm_tasks

    original = lm_tasks.TaskManager
    with without_default_tasks(True):
        manager = lm_tasks.TaskManager(include_path=str(tmp_path))
        assert manager is not None and lm_tasks.TaskManager is not original
    assert lm_tasks.TaskManager is original
