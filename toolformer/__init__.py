"""toolformer: teach a causal language model to use tools by itself.

Pure parts (call format, loss math, tools) live in ``calls``, ``losses`` and
``tools``; stages that read and write run folders in ``stages``; the command
line in ``cli``.
"""

__version__ = "0.1.0"
