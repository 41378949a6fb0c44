"""Configuration: the typed schema (:mod:`toolformer.config.schema`, one
dataclass per stage; the evaluation's and inspection's sections in
:mod:`toolformer.config.evaluation`, the tools' in :mod:`toolformer.config.tools`, the
small world's in :mod:`toolformer.smallworld.config`) and its loading from YAML with
``key=value`` overrides (:mod:`toolformer.config.load`, bounded YAML parsing in
:mod:`toolformer.config.safeyaml`); file bytes decoded as UTF-8 with an error saying where they are
not (:mod:`toolformer.config.text`)."""
