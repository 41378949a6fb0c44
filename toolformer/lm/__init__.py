"""The language-model layer, one module each:

- :mod:`.modeling`: loading causal LMs and tokenizers (device, dtype, window); the tiny model built in code;
- :mod:`.tokenizer`: the small BPE tokenizer trained in code (tiny test model, small world);
- :mod:`.threads`: torch's CPU thread count, following the machine's load;
- :mod:`.textpos`: token positions in a text and which tokens are call markers;
- :mod:`.losses`: the filter's loss math (weights, the weighted sum of L_i, L⁻, the criterion);
- :mod:`.scoring`: the filter losses L_i(z) computed in batches;
- :mod:`.sampler`: the paper's call sampler (position scoring, then sampling calls);
- :mod:`.generate`: decoding with tool calls, the paper's inference loop;
- :mod:`.constrain`: constrained decoding, calls well formed by construction;
- :mod:`.inputpattern`: a tool's input grammar as an automaton, for constrained decoding;
- :mod:`.rows`: packed token rows and their losses (training, dev and held-out perplexity);
- :mod:`.trainargs`: the training loop's settings, schedule and precision;
- :mod:`.training`: the causal-LM training loop (fine-tuning, the small world's pre-training);
- :mod:`.checkpoints`: what training writes, resumable checkpoints and the saved model;
- :mod:`.modelfolder`: a tuned model folder's record of its tools, ``toolformer.json``;
- :mod:`.foldertrust`: what a model folder may ask for and what only the user can grant.
"""
