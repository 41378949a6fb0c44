"""toolformer: teach a causal language model to use tools by itself.

The subpackages, in layers: each imports only its own layer and those listed
before it (CONTRIBUTING.md, "Layout"). ``config`` (the settings and their
loading); ``rundir`` (run folders and their files); ``tools`` (the tools, and
the call format in ``tools.calls``); ``lm`` (models, the filter's loss math in
``lm.losses``, sampling, decoding, training); ``api`` (the tuned model,
below); ``corpus`` and ``tasks`` (the corpus and the stages' records;
evaluation files and metrics); ``inspect`` (looking into a run); ``stages``
and ``pipeline`` (the stages and running them); ``smallworld`` (a generated
world and its base model); ``bench``, ``preflight`` and ``integrations``
(benchmarks, the check before a run, lm-evaluation-harness and MCP); ``cli``
(the command line).

``toolformer.ToolformerModel`` (:mod:`toolformer.api`) loads
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
