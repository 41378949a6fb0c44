"""toolformer: teach a causal language model to use tools by itself.

Pure parts (call format, loss math, tools) live in ``calls``, ``losses`` and
``tools``; stages that read and write run folders in ``stages``; the command
line in ``cli``. ``toolformer.ToolformerModel`` (:mod:`toolformer.api`) loads
a tuned model folder ready to call its tools; it is imported on first use, so
that ``import toolformer`` does not import torch.
"""

from toolformer.version import __version__

__all__ = ["ToolformerModel", "__version__"]


def __getattr__(name: str):
    if name == "ToolformerModel":
        from toolformer.api import ToolformerModel

        return ToolformerModel
    raise AttributeError(f"module 'toolformer' has no attribute {name!r}")
