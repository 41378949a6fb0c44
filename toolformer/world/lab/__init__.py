"""The small world's laboratory: probes and sweeps behind the findings in docs/lab-notes.md, each a
``python -m toolformer.world.lab.<name>`` command (call_errors, chain_probe, gold_by_tau, math_errors,
merge_sweep, novel_phrasings). Not part of the pipeline: nothing outside the small world imports them."""
