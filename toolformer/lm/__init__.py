"""The language-model layer: loading (:mod:`.modeling`), tokenizers, the
filter's weighted losses (:mod:`.losses`) and their batched computation
(:mod:`.scoring`), the paper's call sampler (:mod:`.sampler`), decoding with
tool calls (:mod:`.generate`), token positions in text (:mod:`.textpos`),
the causal-LM trainer (:mod:`.training`) and a tuned model folder's record of
its tools, ``toolformer.json`` (:mod:`.modelfolder`)."""
