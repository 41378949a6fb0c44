"""Loading typed configuration from YAML with ``key=value`` overrides.

Configs are plain dataclasses (see :mod:`toolformer.config.schema`). This module turns
nested dicts into them, checking every key and type, and reports errors with
the file and the dotted key, e.g. ``configs/tiny.yaml: filter.tau_filtr:
unknown key``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
import types
import typing
from pathlib import Path
from typing import Any, Union

import yaml


class ConfigError(ValueError):
    """A config file or override is invalid; the message names file and key."""


def _type_name(tp: Any) -> str:
    return getattr(tp, "__name__", None) or str(tp).replace("typing.", "")


def _coerce(value: Any, tp: Any, key: str, where: str) -> Any:
    """Check ``value`` against type ``tp`` and convert it (dataclasses from dicts)."""
    origin = typing.get_origin(tp)
    if origin in (Union, types.UnionType):
        return _coerce_union(value, tp, key, where)
    if tp is Any:
        return value
    if dataclasses.is_dataclass(tp):
        if isinstance(value, tp):
            return value
        if not isinstance(value, dict):
            raise ConfigError(f"{where}: {key}: expected a mapping for {tp.__name__}, got {value!r}")
        return from_dict(tp, value, where, prefix=key + ".")
    if origin is list:
        (item,) = typing.get_args(tp) or (Any,)
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{where}: {key}: expected a list, got {value!r}")
        return [_coerce(v, item, f"{key}[{i}]", where) for i, v in enumerate(value)]
    if origin is dict:
        kt, vt = typing.get_args(tp) or (str, Any)
        if not isinstance(value, dict):
            raise ConfigError(f"{where}: {key}: expected a mapping, got {value!r}")
        return {_coerce(k, kt, key, where): _coerce(v, vt, f"{key}.{k}", where) for k, v in value.items()}
    if tp in _SCALARS:
        return _SCALARS[tp](value, key, where)
    raise ConfigError(f"{where}: {key}: unsupported field type {_type_name(tp)}")


def _coerce_union(value: Any, tp: Any, key: str, where: str) -> Any:
    """The first member of ``tp`` (``X | None``, say) that accepts ``value``."""
    args = typing.get_args(tp)
    if value is None and type(None) in args:
        return None
    for arg in args:
        if arg is type(None):
            continue
        try:
            return _coerce(value, arg, key, where)
        except ConfigError:
            pass
    raise ConfigError(f"{where}: {key}: expected {_type_name(tp)}, got {value!r}")


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _coerce_bool(value: Any, key: str, where: str) -> bool:
    if isinstance(value, bool):
        return value
    raise ConfigError(f"{where}: {key}: expected true or false, got {value!r}")


def _coerce_int(value: Any, key: str, where: str) -> int:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    raise ConfigError(f"{where}: {key}: expected an integer, got {value!r}")


def _coerce_float(value: Any, key: str, where: str) -> float:
    if _is_number(value):
        return float(value)
    raise ConfigError(f"{where}: {key}: expected a number, got {value!r}")


def _coerce_str(value: Any, key: str, where: str) -> str:
    if isinstance(value, str):
        return value
    if _is_number(value):
        return str(value)  # `path: 2023` in YAML is still a path
    raise ConfigError(f"{where}: {key}: expected a string, got {value!r}")


_SCALARS = {bool: _coerce_bool, int: _coerce_int, float: _coerce_float, str: _coerce_str}


def from_dict(cls: type, data: dict, where: str = "<config>", prefix: str = "") -> Any:
    """Build dataclass ``cls`` from ``data``; unknown keys and wrong types raise
    :class:`ConfigError` naming ``where`` and the dotted key."""
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    for k in data:
        if k not in names:
            raise ConfigError(f"{where}: {prefix}{k}: unknown key (known: {', '.join(sorted(names))})")
    kwargs = {k: _coerce(v, hints[k], prefix + k, where) for k, v in data.items()}
    obj = cls(**kwargs)
    check = getattr(obj, "validate", None)
    if check is not None:
        try:
            check()
        except ValueError as e:
            raise ConfigError(f"{where}: {prefix.rstrip('.') or cls.__name__}: {e}") from None
    return obj


def to_dict(obj: Any) -> Any:
    return dataclasses.asdict(obj)


_EXPONENT = re.compile(r"[-+]?\d+(\.\d*)?[eE][-+]?\d+")


def _parse_scalar(text: str) -> Any:
    """Override values are YAML scalars: ``0.5``, ``true``, ``[a, b]``, ``null``."""
    try:
        value = yaml.safe_load(text) if text != "" else ""
    except yaml.YAMLError:
        return text
    if isinstance(value, str) and _EXPONENT.fullmatch(value):
        return float(value)  # YAML 1.1 reads `3e-3` (no dot) as a string
    return value


def apply_overrides(data: dict, overrides: list[str], cls: type) -> dict:
    """Apply ``a.b.c=value`` strings to nested ``data`` (a copy is returned)."""
    data = json.loads(json.dumps(data))
    for ov in overrides:
        if "=" not in ov:
            raise ConfigError(f"override {ov!r}: expected key=value")
        key, _, raw = ov.partition("=")
        parts = key.strip().split(".")
        node = data
        for p in parts[:-1]:
            node = node.setdefault(p, {})
            if not isinstance(node, dict):
                raise ConfigError(f"override {ov!r}: {p} is not a section")
        value = _parse_scalar(raw)
        # A string field given `007` or `2023` stays the literal text.
        literal = _field_is_str(cls, parts) and not isinstance(value, (list, dict)) and value is not None
        node[parts[-1]] = raw if literal else value
    return data


def _field_is_str(cls: type, parts: list[str]) -> bool:
    tp: Any = cls
    for p in parts:
        if not dataclasses.is_dataclass(tp):
            return False
        hints = typing.get_type_hints(tp)
        if p not in hints:
            return False
        tp = hints[p]
    return tp is str


def merge(base: dict, top: dict) -> dict:
    """``top`` over ``base``, section by section (a list or a scalar in ``top`` replaces the one in ``base``)."""
    out = dict(base)
    for k, v in top.items():
        out[k] = merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def load_config(cls: type, path: str | Path | None, overrides: list[str] | None = None,
                base: dict | None = None) -> Any:
    """Read YAML ``path`` (or start from defaults), apply overrides, validate.

    ``base`` holds values under the file's (a model folder's recorded tools,
    say): defaults < ``base`` < the file < the overrides."""
    data: dict = {}
    where = "<defaults>"
    if path is not None:
        path = Path(path)
        where = str(path)
        if not path.exists():
            raise ConfigError(f"{path}: config file not found")
        try:
            loaded = yaml.safe_load(path.read_text(encoding="utf-8"))
        except yaml.YAMLError as e:
            raise ConfigError(f"{path}: invalid YAML: {e}") from None
        if loaded is None:
            loaded = {}
        if not isinstance(loaded, dict):
            raise ConfigError(f"{path}: top level must be a mapping")
        data = loaded
    if base:
        data = merge(base, data)
    if overrides:
        data = apply_overrides(data, overrides, cls)
        where = f"{where} (with overrides)"
    return from_dict(cls, data, where)


def config_hash(obj: Any) -> str:
    """A short stable hash of a (sub)config, used to decide if a stage is stale."""
    blob = json.dumps(to_dict(obj) if dataclasses.is_dataclass(obj) else obj, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def without_added(section: dict, added: dict[str, Any]) -> dict:
    """``section`` without the fields added after results existed that still hold the value giving the old
    behaviour (``added``: field -> that value): hashed without them, an upgrade leaves old results valid."""
    return {k: v for k, v in section.items() if not (k in added and v == added[k])}


def dump_yaml(obj: Any) -> str:
    return yaml.safe_dump(to_dict(obj), sort_keys=False, allow_unicode=True)
