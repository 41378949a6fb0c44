"""The published-data world: the whole method on real text (GSM8K, ASDiv, MAWPS, LAMA T-REx) on a CPU.

A second world (beside the generated small one; what worlds share is :mod:`toolformer.worlds`), built from
published files instead of generated ones: :mod:`.sources` checks (and fetches) the files, :mod:`.world` splits
them without leaks and writes the world's texts, tools' data and evaluation sets, :mod:`.contamination` searches
every evaluation prompt in every training text, :mod:`.pretrain` trains the base model on real text only,
:mod:`.gold` scores kept calls against the calls people placed, and :mod:`.demo` runs the product's stages on it
(``toolformer demo --config configs/published.yaml``). The product never imports this package
(tests/test_layout.py)."""
