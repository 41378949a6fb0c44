"""Stops are prompt and clean: SIGINT or SIGTERM stops a stage at a shard boundary (or finetune at a
checkpoint) with one line saying what was kept, even inside a huge document, a huge shard or a hanging tool call,
and the same command resumes from there (toolformer.rundir.stops); so does a Ctrl-C while the command starts,
or one a library turned into another error."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest
from helpers import read_jsonl, run_cli, shard_lines, write_jsonl
from runs import FINETUNE, quick_overrides, rules_args, small_docs, stop_when, sums, words, write_plain_sums

from toolformer.corpus.windows import pieces
from toolformer.rundir import stops


def test_a_signal_drops_the_work_in_progress_at_once_but_not_a_write():
    """In a deferred unit a signal waits for its end, except in its abandonable part: there it stops at once."""
    def kill_and_spin(seconds: float = 5.0) -> float:
        t0 = time.monotonic()
        os.kill(os.getpid(), signal.SIGTERM)
        while time.monotonic() - t0 < seconds:
            pass
        return time.monotonic() - t0

    before = signal.getsignal(signal.SIGTERM)
    t0 = time.monotonic()
    with stops.handled(), pytest.raises(stops.Stopped) as stopped, stops.deferred(), stops.abandonable():
        kill_and_spin()
    assert stopped.value.signum == signal.SIGTERM and time.monotonic() - t0 < 2
    with stops.handled(), pytest.raises(stops.Stopped), stops.deferred():
        assert kill_and_spin(0.3) >= 0.3  # a write: not interrupted, the stop comes at its end
    with stops.handled(), pytest.raises(stops.Stopped), stops.deferred():
        assert kill_and_spin(0.1) >= 0.1
        with stops.abandonable():
            pytest.fail("a stop already asked for ends the unit before more work starts")
    with stops.handled(), pytest.raises(stops.Stopped), stops.deferred(), stops.abandonable():
        with stops.deferred():  # a write inside the work: finished, then the stop
            assert kill_and_spin(0.3) >= 0.3
        pytest.fail("the stop comes when the write ends")
    assert signal.getsignal(signal.SIGTERM) is before


def test_sigterm_during_a_hanging_tool_call_stops_execute_at_once(tiny_model_dir, tmp_path, monkeypatch, capsys):
    from toolformer.cli.app import main
    from toolformer.config.load import load_config
    from toolformer.config.schema import PipelineConfig
    from toolformer.rundir.folder import StageFolder, write_documents
    from toolformer.stages import stage_hash
    from toolformer.tools import REGISTRY, Tool

    class Hang(Tool):
        name = "Hang"

        def run(self, tool_input, date=None):
            time.sleep(600)

    monkeypatch.setitem(REGISTRY, "Hang", Hang)
    run_dir = tmp_path / "run"
    settings = [f"run_dir={run_dir}", f"model.path={tiny_model_dir}", "tools.enabled=[Hang, Calculator]",
                "tools.timeout_s=300", "tools.concurrency=2"]
    sample = StageFolder(run_dir, "sample")
    sample.begin("x")
    write_documents(run_dir, [{"doc_id": "a", "text": "x y z", "date": None}])
    call = {"doc_id": "a", "position": 0, "char_start": 0, "p_i": None, "source": "rules"}
    sample.write_shard(0, [{**call, "tool": "Calculator", "input": "1 + 2"}])
    sample.write_shard(1, [{**call, "tool": "Hang", "input": str(i)} for i in range(8)])  # 4 rounds of 300 s
    sample.finish(stage_hash(load_config(PipelineConfig, None, settings), "sample"), 0, {})

    signalled: list[float] = []

    def signal_once_working() -> None:
        while not (run_dir / "execute" / "shard-00000.jsonl").exists():
            time.sleep(0.02)
        time.sleep(0.5)  # two calls of shard 1 hang now, six wait
        signalled.append(time.monotonic())
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=signal_once_working, daemon=True).start()
    assert main(["execute", *settings]) == 143
    assert time.monotonic() - signalled[0] < 5
    err = capsys.readouterr().err
    assert "stopped by SIGTERM; kept 1 shard(s) of execute" in err
    assert [p.name for p in sorted((run_dir / "execute").glob("shard-*"))] == ["shard-00000.jsonl"]
    assert read_jsonl(run_dir / "execute" / "shard-00000.jsonl")[0]["result"] == "3"

    class Answers(Hang):
        def run(self, tool_input, date=None):
            return f"answer {tool_input}"

    monkeypatch.setitem(REGISTRY, "Hang", Answers)
    assert main(["execute", *settings]) == 0
    assert "resuming after 1 complete shard(s)" in capsys.readouterr().out
    records = read_jsonl(run_dir / "execute" / "shard-00001.jsonl")
    assert [r["result"] for r in records] == [f"answer {i}" for i in range(8)]


@pytest.mark.slow
def test_sigterm_stops_sample_inside_a_huge_document_and_a_rerun_resumes(tiny_model_dir, tmp_path):
    """The document's first piece is sums: the sampler scores and samples at each of its 120-odd windows
    (seconds); SIGTERM 1 s into it. A stop at the end of the piece's shard would keep 2 shards."""
    huge = sums(100_000) + " " + words(900_000)
    corpus = tmp_path / "c.jsonl"
    write_jsonl(corpus, [*small_docs(2), {"id": "huge", "text": huge}])
    run_dir = tmp_path / "run"
    args = ["sample", *rules_args(run_dir, tiny_model_dir, corpus, "sample.method={Calculator: sampler}")]
    stopped, seconds = stop_when(run_dir / "sample" / "shard-00000.jsonl", args, tmp_path / "logs")
    assert stopped.returncode == 143 and "Traceback" not in stopped.stderr, stopped.stderr[-2000:]
    assert seconds < 5
    assert "stopped by SIGTERM; kept 1 shard(s) of sample" in stopped.stderr.strip().splitlines()[-1]
    assert [p.name for p in (run_dir / "sample").glob("shard-*")] == ["shard-00000.jsonl"]
    kept = (run_dir / "sample" / "shard-00000.jsonl").read_bytes()
    again = run_cli(args)
    assert again.returncode == 0, again.stderr[-2000:]
    assert "resuming after 1 complete shard(s)" in again.stdout
    assert (run_dir / "sample" / "shard-00000.jsonl").read_bytes() == kept
    docs = read_jsonl(run_dir / "sample" / "documents.jsonl")
    assert "".join(d["text"] for d in docs if d["doc_id"].startswith("huge#")) == huge
    n_pieces = len(list(pieces({"doc_id": "huge", "text": huge, "date": None}, 100_000)))
    assert n_pieces >= 10 and len(list((run_dir / "sample").glob("shard-*.jsonl"))) == n_pieces + 1


@pytest.mark.slow
def test_sigterm_stops_execute_with_rules_inside_a_huge_shard_and_a_rerun_resumes(tiny_model_dir, tmp_path):
    """About 25,000 distinct Calculator calls in the huge document's shard (about 10 s); SIGTERM 1 s into it."""
    corpus = tmp_path / "c.jsonl"
    write_jsonl(corpus, [*small_docs(4), {"id": "huge", "text": sums(40_000)}])
    run_dir = tmp_path / "run"
    done = run_cli(["sample", *rules_args(run_dir, tiny_model_dir, corpus)])
    assert done.returncode == 0, done.stderr[-2000:]
    candidates = sum(1 for p in (run_dir / "sample").glob("shard-*.jsonl") for _ in read_jsonl(p))
    args = ["execute", *rules_args(run_dir, tiny_model_dir, corpus)]
    stopped, seconds = stop_when(run_dir / "execute" / "shard-00001.jsonl", args, tmp_path / "logs")
    assert stopped.returncode == 143 and "Traceback" not in stopped.stderr, stopped.stderr[-2000:]
    assert seconds < 5
    assert "stopped by SIGTERM; kept 2 shard(s) of execute" in stopped.stderr
    assert sorted(p.name for p in (run_dir / "execute").glob("shard-*")) == ["shard-00000.jsonl",
                                                                              "shard-00001.jsonl"]
    assert all(r["result"] for p in (run_dir / "execute").glob("shard-*") for r in read_jsonl(p))
    again = run_cli(args)
    assert again.returncode == 0, again.stderr[-2000:]
    assert "resuming after 2 complete shard(s)" in again.stdout
    assert f"{candidates:,} of {candidates:,} calls returned a result" in again.stdout


@pytest.mark.slow
def test_sigint_stops_at_a_shard_boundary_and_resumes(tiny_model_dir, tmp_path, quick_run):
    run_dir = tmp_path / "run"
    args = ["run", "--config", "configs/tiny.yaml", *quick_overrides(tiny_model_dir, run_dir),
            "stages=[sample, execute, filter]"]
    stopped = run_cli(args, {"TOOLFORMER_FAULT": "sample:2:SIGINT"})
    assert stopped.returncode == 130, stopped.stderr[-2000:]
    last = stopped.stderr.strip().splitlines()[-1]
    assert last.startswith("toolformer: stopped by SIGINT; kept 2 shard(s) of sample in ")
    assert "rerun the same command" in last
    assert "Traceback" not in stopped.stderr
    assert len(list((run_dir / "sample").glob("shard-*.jsonl"))) == 2
    again = run_cli(args)
    assert again.returncode == 0, again.stderr[-2000:]
    assert "resuming after 2 complete shard(s)" in again.stdout
    for stage in ("sample", "execute", "filter"):
        assert shard_lines(run_dir, stage) == shard_lines(quick_run, stage), stage


@pytest.mark.slow
def test_sigterm_stops_finetune_at_a_checkpoint(tiny_model_dir, tmp_path):
    run_dir = tmp_path / "run"
    write_plain_sums(run_dir)
    args = ["finetune", f"run_dir={run_dir}", f"model.path={tiny_model_dir}", *FINETUNE]
    stopped = run_cli(args, {"TOOLFORMER_FAULT": "finetune:1:SIGTERM"})
    assert stopped.returncode == 143, stopped.stderr[-2000:]
    last = stopped.stderr.strip().splitlines()[-1]
    assert "stopped by SIGTERM; kept the checkpoint of step 2 in" in last and "Traceback" not in stopped.stderr
    again = run_cli(args)
    assert again.returncode == 0, again.stderr[-2000:]
    assert "resuming from" in again.stdout + again.stderr and "(step 2)" in again.stdout + again.stderr


def test_an_error_after_a_stop_is_reported_as_the_stop():
    """A library that catches the Stopped a signal raised (or an import it cut off half way) fails with some other
    error: the command reports the stop, not that error."""
    def swallowing_library() -> None:
        try:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(2)
        except Exception:  # noqa: BLE001 - what some libraries do around an optional import
            pass
        raise ModuleNotFoundError("Could not import module 'GPT2LMHeadModel'")

    with stops.handled(), pytest.raises(stops.Stopped) as stopped, stops.blamed():
        swallowing_library()
    assert stopped.value.signum == signal.SIGINT and isinstance(stopped.value.__cause__, ModuleNotFoundError)
    with stops.handled(), pytest.raises(ModuleNotFoundError), stops.blamed():  # no signal: the error is its own
        raise ModuleNotFoundError("x")
    with stops.handled(), pytest.raises(ValueError), stops.blamed():  # a stop the command dealt with (chat)
        with pytest.raises(stops.Stopped):
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(2)
        stops.forget()
        raise ValueError("its own error")


def test_ctrl_c_before_the_stop_handler_is_one_line(monkeypatch, capsys):
    from toolformer.cli import app

    def interrupted():
        raise KeyboardInterrupt

    monkeypatch.setattr(app, "build_parser", interrupted)  # Ctrl-C while the command line is read
    assert app.main(["tools", "list"]) == 130
    assert capsys.readouterr().err == ("toolformer: stopped by SIGINT; kept every file written so far (each is "
                                       "written whole or not at all)\n")


@pytest.mark.slow  # starts a Python process
def test_ctrl_c_while_the_modules_load_is_one_line():
    """SIGINT in the first moments of a command arrives while Python imports its modules: one line, exit 130."""
    import subprocess
    import sys

    from helpers import ROOT

    code = ("import sys\n"
            "class Interrupt:\n"
            "    def find_spec(self, name, path=None, target=None):\n"
            "        if name == 'toolformer.cli.common':\n"
            "            raise KeyboardInterrupt\n"
            "sys.meta_path.insert(0, Interrupt())\n"
            "from toolformer.cli.app import main\n"
            "sys.exit(main(['tools', 'list']))\n")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert res.returncode == 130
    assert res.stderr == "toolformer: stopped by SIGINT while starting; nothing was written\n"


@pytest.mark.slow  # starts a Python process
def test_a_stop_while_tool_calls_start_leaves_no_thread_to_print_a_traceback():
    """A handler that raises (SIGTERM's Stopped) at any moment of ``Sandbox.run_many``, 300 times: no tool thread
    dies noisily (once a stop landed inside ``Thread.start()`` and the started thread died with a KeyError)."""
    import subprocess
    import sys

    from helpers import ROOT

    code = ("import random, signal, sys, time\n"
            "from toolformer.tools.calculator import Calculator\n"
            "from toolformer.tools.sandbox import Sandbox\n"
            "class Stop(Exception): pass\n"
            "def handler(signum, frame): raise Stop\n"
            "signal.signal(signal.SIGALRM, handler)\n"
            "sandbox = Sandbox({'Calculator': Calculator()}, timeout_s=5.0, concurrency=4, cache=False)\n"
            "rng, stops = random.Random(0), 0\n"
            "for r in range(300):\n"
            "    calls = [('Calculator', f'{r} + {i} * (3 - {i % 7}) / 7', None) for i in range(400)]\n"
            "    signal.setitimer(signal.ITIMER_REAL, rng.uniform(0.0005, 0.01))\n"
            "    try:\n"
            "        sandbox.run_many(calls)\n"
            "        signal.setitimer(signal.ITIMER_REAL, 0)\n"
            "    except Stop:\n"
            "        stops += 1\n"
            "time.sleep(0.2)\n"
            "print(stops)\n")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert res.returncode == 0 and int(res.stdout) > 200, res.stderr[-2000:]  # the stops did land
    # A tool thread that died: "Exception ignored in thread started by ..." (its KeyError, or a CallAbandoned raised
    # outside its try). Not asserted: Python's own hazard of a handler raising inside a weakref callback of the main
    # thread ("Exception ignored in: <function WeakSet...>"), which drops that one stop.
    assert "in thread started by" not in res.stderr and "KeyError" not in res.stderr, res.stderr[-2000:]
    assert "CallAbandoned" not in res.stderr, res.stderr[-2000:]
