"""lm-evaluation-harness integration: a tuned model folder as an lm-eval model, calling its tools.

    toolformer lm-eval run --model toolformer --model_args pretrained=runs/demo/model \\
        --tasks math_unseen --include_path data/lmeval --batch_size 64

lm-eval 0.4.13 finds models only in its own registry (no entry-point plugins), so ``toolformer lm-eval``
registers the model as ``toolformer`` and hands every other argument to lm-eval's own command line
unchanged. From Python, pass an instance: ``lm_eval.simple_evaluate(model=ToolformerLM(pretrained=DIR),
...)``, or call :func:`register` first and name it ``"toolformer"``. lm-eval is an optional extra
(``pip install 'toolformer[lmeval]'``); the rest of the package never imports it. The model is
:class:`toolformer.integrations.lmeval_model.ToolformerLM`; task files of local evaluation sets are written by
``toolformer tasks lmeval`` (:mod:`toolformer.integrations.lmeval_tasks`).
"""

from __future__ import annotations

import importlib
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from toolformer.rundir import stops

MODEL_NAME = "toolformer"
INSTALL = "pip install 'toolformer[lmeval]'"


class LmEvalMissing(ImportError, ValueError):
    """lm-eval is not installed: an ImportError to Python code, a usage error (exit 2) to the command line."""


def require_lm_eval() -> None:
    """Import lm-eval, or fail saying how to install it."""
    try:
        importlib.import_module("lm_eval")
    except ImportError as e:
        raise LmEvalMissing(f"the lm-evaluation-harness integration needs lm-eval ({e}): {INSTALL}") from None


def register() -> type:
    """Register :class:`~toolformer.integrations.lmeval_model.ToolformerLM` with lm-eval as ``toolformer``; return
    it."""
    require_lm_eval()
    importlib.import_module("lm_eval.models")  # lm-eval's own models first: it adds them only to an empty registry
    from lm_eval.api.registry import model_registry

    from toolformer.integrations.lmeval_model import ToolformerLM

    if MODEL_NAME not in model_registry:
        model_registry.register(MODEL_NAME, target=ToolformerLM)
    return ToolformerLM


class _Signalled(BaseException):
    """SIGINT or SIGTERM while lm-eval runs. A BaseException, so that lm-eval's own ``except Exception`` blocks
    (while it indexes its tasks, for one) cannot swallow the stop as they would :class:`~toolformer.rundir.stops.
    Stopped`."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


def _signalled(signum: int, frame) -> None:
    raise _Signalled(signum)


@contextmanager
def stops_reach_lm_eval() -> Iterator[None]:
    """For the block, SIGINT and SIGTERM raise :class:`_Signalled` through lm-eval's code, and leave it as
    :class:`~toolformer.rundir.stops.Stopped` (the command line's one line, exit 130 or 143)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {s: signal.signal(s, _signalled) for s in stops.SIGNALS}
    try:
        yield
    except _Signalled as e:
        raise stops.Stopped(e.signum) from None
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def _option(argv: list[str], name: str) -> str | None:
    for k, arg in enumerate(argv):
        if arg == name and k + 1 < len(argv):
            return argv[k + 1]
        if arg.startswith(name + "="):
            return arg.split("=", 1)[1]
    return None


def own_tasks_only(argv: list[str]) -> bool:
    """Whether every task ``--tasks`` names is defined by a YAML file under ``--include_path`` (``task: NAME``): then
    lm-eval need not index its own thousands of task files first (most of its start-up on a CPU)."""
    import re

    tasks, include = _option(argv, "--tasks"), _option(argv, "--include_path")
    if not tasks or not include or not Path(include).is_dir():
        return False
    defined = set()
    for f in Path(include).rglob("*.yaml"):
        try:
            defined.update(re.findall(r"^task:\s*(\S+)\s*$", f.read_text(errors="replace"), re.MULTILINE))
        except OSError:
            continue
    return {t.strip() for t in tasks.split(",") if t.strip()} <= defined


@contextmanager
def without_default_tasks(skip: bool):
    """lm-eval's TaskManager without its built-in tasks while inside, when ``skip``."""
    if not skip:
        yield
        return
    import lm_eval.tasks as lm_tasks

    original = lm_tasks.TaskManager

    class OwnTasks(original):  # type: ignore[misc,valid-type]
        def __init__(self, *args, **kwargs):
            kwargs.setdefault("include_defaults", False)
            super().__init__(*args, **kwargs)

    lm_tasks.TaskManager = OwnTasks
    try:
        yield
    finally:
        lm_tasks.TaskManager = original


def run_cli(argv: list[str]) -> int:
    """``toolformer lm-eval ARGS``: lm-eval's command line (``lm-eval ARGS``) with the model registered; tasks
    that all come from ``--include_path`` are found without indexing lm-eval's own."""
    with stops_reach_lm_eval():
        register()
        from lm_eval.__main__ import cli_evaluate

        saved = sys.argv
        sys.argv = ["lm-eval", *argv]
        try:
            with without_default_tasks(own_tasks_only(argv)):
                cli_evaluate()
        finally:
            sys.argv = saved
    return 0


def __getattr__(name: str) -> Any:
    if name == "ToolformerLM":
        return register()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
