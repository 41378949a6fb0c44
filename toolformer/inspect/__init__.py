"""Looking into a run folder: what survived each stage and why
(:mod:`.view`), the self-contained HTML report (:mod:`.report`) and the built
data set as chat conversations (:mod:`.export`)."""
