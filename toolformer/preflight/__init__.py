"""``toolformer preflight``: before a GPU run, read-only, will the config keep calls? The verdict per tool and the
command (:mod:`~toolformer.preflight.check`), the tokenizer's view of the call markers
(:mod:`~toolformer.preflight.tokens`), the sampler's view and the filter probe (:mod:`~toolformer.preflight.sampler`),
the work and its timings (:mod:`~toolformer.preflight.work`) and the printed report
(:mod:`~toolformer.preflight.text`)."""
