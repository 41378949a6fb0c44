"""The language-model layer: loading (:mod:`.modeling`), tokenizers, the
filter's weighted losses (:mod:`.losses`) and their batched computation
(:mod:`.scoring`), the paper's call sampler (:mod:`.sampler`), decoding with
tool calls (:mod:`.generate`), token positions in text (:mod:`.textpos`) and
the causal-LM trainer (:mod:`.training`)."""
