"""Looking into a run folder: what survived each stage and why
(:mod:`.view`), and the self-contained HTML report (:mod:`.report`)."""
