"""The small world's laboratory: probes and sweeps behind the findings in docs/lab-notes.md, each a
``python -m toolformer.smallworld.lab.<name>`` command (call_errors, chain_probe, gold_by_tau, math_errors,
novel_phrasings). Not part of the pipeline: nothing outside the small world imports them."""
