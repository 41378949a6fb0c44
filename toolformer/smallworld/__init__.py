"""The small world: a generated fictional world and a base model pre-trained on it.

``generate_world(cfg)`` writes the knowledge store, the search collection, the
pre-training, annotation and held-out corpora and the evaluation sets;
``pretrain_base_model(cfg)`` trains a tokenizer and a tiny causal LM on
them, on CPU. See docs/design.md, "The small world".
"""

from toolformer.smallworld.generator import generate_world, world_paths

__all__ = ["generate_world", "pretrain_base_model", "world_paths"]


def pretrain_base_model(cfg, force: bool = False):
    """Tokenizer and base model of the small world (see :mod:`toolformer.smallworld.pretrain`); imported on use,
    so generating the world needs no torch."""
    from toolformer.smallworld.pretrain import pretrain_base_model as run

    return run(cfg, force=force)
