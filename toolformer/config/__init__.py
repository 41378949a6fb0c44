"""Configuration: the typed schema (:mod:`toolformer.config.schema`, one
dataclass per stage; the tools' section in :mod:`toolformer.config.tools`, the
small world's in :mod:`toolformer.config.world`) and its loading from YAML with
``key=value`` overrides (:mod:`toolformer.config.load`)."""
