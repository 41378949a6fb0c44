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


def run_cli(argv: list[str]) -> int:
    """``toolformer lm-eval ARGS``: lm-eval's command line (``lm-eval ARGS``) with the model registered."""
    with stops_reach_lm_eval():
        register()
        from lm_eval.__main__ import cli_evaluate

        saved = sys.argv
        sys.argv = ["lm-eval", *argv]
        try:
            cli_evaluate()
        finally:
            sys.argv = saved
    return 0


def __getattr__(name: str) -> Any:
    if name == "ToolformerLM":
        return register()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
