"""What every world shares: a world is a package (:mod:`toolformer.smallworld`, :mod:`toolformer.published`) that
writes its texts, tools' data and evaluation sets, gets a base model and runs the method on them end to end. This
package holds the machinery they have in common, so that a world adds only what is its own:

- :mod:`.config`: a world's config file (the pipeline's keys plus the world's sections), read and written back;
- :mod:`.files`: the sha256 of a file;
- :mod:`.demo`: a demo's run folder, its stage timings, the control model and the results table;
- :mod:`.weights`, :mod:`.convert`, :mod:`.importing`: pretrained weights (the registry's pinned packages that ship a
  GGUF file, or a GGUF given by path) checked and turned into a model folder (``toolformer weights``).
"""
