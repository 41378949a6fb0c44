"""What the stages read and write: the corpus reader (:mod:`~toolformer.corpus.reader`), documents cut into
pieces, windows and shard groups (:mod:`~toolformer.corpus.windows`) and the stages' record types
(:mod:`~toolformer.corpus.records`; ``python -m toolformer.corpus.records`` prints them)."""
