"""The package's version: ``toolformer.__version__``, recorded in a tuned model folder's ``toolformer.json`` and
given by ``toolformer mcp-serve``. A module of its own, so that they read it without importing the package's
``__init__`` (whose lazy ``ToolformerModel`` imports them: an import circle)."""

__version__ = "0.2.0"
