"""YAML read safely and within bounds: plain data only (:class:`yaml.SafeLoader`), a document refused past
:data:`MAX_NODES` values with its aliases expanded ("billion laughs"), nested too deeply, containing
itself, or giving one key twice in a mapping (YAML would keep the last silently); :mod:`toolformer.config.load`
reads config files and overrides with it."""

from __future__ import annotations

from typing import Any

import yaml

# YAML aliases (`&a` ... `*a`) let a few lines stand for billions of values once expanded ("billion laughs"): a
# document is refused past this many nodes (mappings, lists, keys and values), aliases counted as expanded.
MAX_NODES = 100_000
# A config file is read up to this many bytes (a pipe or a device as --config included); a longer one is refused.
MAX_BYTES = 16_000_000


class YamlRefused(yaml.YAMLError):
    """A YAML document too large with its aliases expanded, nested too deeply, containing itself, or with a
    mapping that gives one key twice."""


class _BoundedLoader(yaml.SafeLoader):
    """:class:`yaml.SafeLoader` that checks each composed document with :func:`_check_nodes` before building it."""

    def compose_document(self):
        node = super().compose_document()
        _check_nodes(node)
        return node


def _children(node: yaml.Node) -> list:
    if isinstance(node, yaml.SequenceNode):
        return node.value
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    return []


def _check_nodes(root: yaml.Node, limit: int = MAX_NODES) -> None:
    """Refuse (YamlRefused) a document of more than ``limit`` nodes with every alias expanded, or one that contains
    itself; counted on the composed graph, each node once, so a bomb costs no more than its text."""
    size: dict[int, int] = {}  # id(node) -> nodes under it, expanded (at most limit + 1)
    open_ = set()  # nodes whose children are being counted: meeting one again is a cycle
    stack = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        if children_done:
            open_.discard(id(node))
            size[id(node)] = min(limit + 1, 1 + sum(size[id(c)] for c in _children(node)))
            if size[id(node)] > limit:
                raise YamlRefused(f"more than {limit:,} values with its aliases expanded")
        elif id(node) in open_:
            raise YamlRefused(f"an alias refers to a value that contains it, line {node.start_mark.line + 1}")
        elif id(node) not in size:
            _check_keys(node)
            open_.add(id(node))
            stack.append((node, True))
            stack.extend((c, False) for c in _children(node))


def _check_keys(node: yaml.Node) -> None:
    """Refuse (YamlRefused) a mapping that gives one key twice: the loader would keep the last value silently,
    so an edit lower in a file could undo one above it unseen. ``<<`` merge keys are left to YAML."""
    if not isinstance(node, yaml.MappingNode):
        return
    seen: dict[tuple[str, str], int] = {}
    for key, _ in node.value:
        if not isinstance(key, yaml.ScalarNode) or key.tag == "tag:yaml.org,2002:merge":
            continue
        line = key.start_mark.line + 1
        if (key.tag, key.value) in seen:
            raise YamlRefused(f"key {key.value!r} given twice in one mapping (lines {seen[key.tag, key.value]} "
                              f"and {line}); keep the one meant")
        seen[key.tag, key.value] = line


def parse_yaml(text: str) -> Any:
    """The one YAML document in ``text``, safely: plain data only, at most MAX_NODES nodes with aliases expanded.
    Raises yaml.YAMLError (YamlRefused for a document too large or nested too deeply)."""
    loader = _BoundedLoader(text)
    try:
        return loader.get_single_data()
    except RecursionError:
        raise YamlRefused("nested too deeply") from None
    finally:
        loader.dispose()
