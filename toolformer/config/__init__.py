"""Configuration: the typed schema (:mod:`toolformer.config.schema`, one
dataclass per stage) and its loading from YAML with ``key=value`` overrides
(:mod:`toolformer.config.load`)."""
