"""Loading typed configuration from YAML with ``key=value`` overrides.

Configs are plain dataclasses (see :mod:`toolformer.config.schema`). This module turns
nested dicts into them, checking every key and type, and reports errors with
where the value came from (a file, an override, a model folder's record) and
the dotted key, e.g. ``configs/tiny.yaml: filter.tau_filtr: unknown key``. A
number must be finite; the sections' ``validate`` methods check the ranges
(with :func:`at_least`, :func:`above` and :func:`between`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import re
import types
import typing
from importlib import resources
from pathlib import Path
from typing import Any, Union

import yaml

from toolformer.config.safeyaml import MAX_BYTES, YamlRefused, parse_yaml
from toolformer.config.text import decode_utf8


class ConfigError(ValueError):
    """A config file or override is invalid; the message names file and key."""


class Sources:
    """Where each key of a config came from: a file, an override, a model folder's record. A key no layer set
    (a default) is ``default``'s."""

    def __init__(self, default: str = "<defaults>"):
        self.default = default
        self.of: dict[str, str] = {}  # dotted key of a value -> its source
        self.sections: set[str] = set()  # dotted keys with values recorded under them

    def add(self, data: dict, source: str, prefix: str = "") -> None:
        """Record ``data`` laid over the keys recorded so far as :func:`merge` lays it: a section merges into
        the one below, any other value replaces what was there."""
        for k, v in data.items():
            key = f"{prefix}{k}"
            if isinstance(v, dict) and v:
                self.of.pop(key, None)
                self.sections.add(key)
                self.add(v, source, key + ".")
            else:
                self.replace(key, v, source)

    def replace(self, key: str, value: Any, source: str) -> None:
        """Record ``key`` set to ``value`` as a whole (an override), what was under it gone."""
        if key in self.sections:
            under = (key + ".", key + "[")
            self.of = {k: s for k, s in self.of.items() if not k.startswith(under)}
            self.sections = {k for k in self.sections if k != key and not k.startswith(under)}
        if isinstance(value, dict) and value:
            self.add({key: value}, source)
        else:
            self.of[key] = source

    def __call__(self, key: str) -> str:
        """The source of dotted ``key`` (``evaluate.tasks[0].kind``): its own or that of the value it is in."""
        while key:
            if key in self.of:
                return self.of[key]
            key = key[: max(key.rfind("."), key.rfind("["), 0)]
        return self.default

    def within(self, section: str) -> str:
        """The sources of the keys set in ``section`` (a dotted key; "" = the whole config), comma-separated."""
        found = [s for k, s in self.of.items() if not section or k == section or k.startswith((section + ".",
                                                                                               section + "["))]
        return ", ".join(dict.fromkeys(found)) if found else self(section)


def _at(where: str | Sources, key: str) -> str:
    """Where the value of ``key`` came from."""
    return where(key) if isinstance(where, Sources) else where


def _type_name(tp: Any) -> str:
    return getattr(tp, "__name__", None) or str(tp).replace("typing.", "")


def _coerce(value: Any, tp: Any, key: str, where: str | Sources) -> Any:
    """Check ``value`` against type ``tp`` and convert it (dataclasses from dicts)."""
    origin = typing.get_origin(tp)
    if origin in (Union, types.UnionType):
        return _coerce_union(value, tp, key, where)
    if tp is Any:
        return value
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        if isinstance(value, tp):
            return value
        if not isinstance(value, dict):
            raise ConfigError(f"{_at(where, key)}: {key}: expected a mapping for {tp.__name__}, got {value!r}")
        return from_dict(tp, value, where, prefix=key + ".")
    if origin is list:
        (item,) = typing.get_args(tp) or (Any,)
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{_at(where, key)}: {key}: expected a list, got {value!r}")
        return [_coerce(v, item, f"{key}[{i}]", where) for i, v in enumerate(value)]
    if origin is dict:
        kt, vt = typing.get_args(tp) or (str, Any)
        if not isinstance(value, dict):
            raise ConfigError(f"{_at(where, key)}: {key}: expected a mapping, got {value!r}")
        return {_coerce(k, kt, key, where): _coerce(v, vt, f"{key}.{k}", where) for k, v in value.items()}
    if tp in _SCALARS:
        return _SCALARS[tp](value, key, where)
    raise ConfigError(f"{_at(where, key)}: {key}: unsupported field type {_type_name(tp)}")


def _coerce_union(value: Any, tp: Any, key: str, where: str | Sources) -> Any:
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
    raise ConfigError(f"{_at(where, key)}: {key}: expected {_type_name(tp)}, got {value!r}")


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _coerce_bool(value: Any, key: str, where: str | Sources) -> bool:
    if isinstance(value, bool):
        return value
    raise ConfigError(f"{_at(where, key)}: {key}: expected true or false, got {value!r}")


def _coerce_int(value: Any, key: str, where: str | Sources) -> int:
    if isinstance(value, int) and not isinstance(value, bool):
        if not -(2**63) <= value < 2**63:
            raise ConfigError(f"{_at(where, key)}: {key}: {value} is out of range (a 64-bit integer)")
        return value
    raise ConfigError(f"{_at(where, key)}: {key}: expected an integer, got {value!r}")


def _coerce_float(value: Any, key: str, where: str | Sources) -> float:
    if _is_number(value):
        try:
            return float(value)
        except OverflowError:
            raise ConfigError(f"{_at(where, key)}: {key}: must be a finite number, got {value}") from None
    raise ConfigError(f"{_at(where, key)}: {key}: expected a number, got {value!r}")


def _check_finite(value: Any, key: str, where: str | Sources) -> None:
    """Refuse NaN and infinity in ``value`` (a number, or a list or mapping of them): no setting means them, and
    JSON has no way to write them."""
    if isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(f"{_at(where, key)}: {key}: must be a finite number, got {value}")
    if isinstance(value, list):
        for i, v in enumerate(value):
            _check_finite(v, f"{key}[{i}]", where)
    elif isinstance(value, dict):
        for k, v in value.items():
            _check_finite(v, f"{key}.{k}", where)


def _coerce_str(value: Any, key: str, where: str | Sources) -> str:
    if isinstance(value, str):
        return value
    if _is_number(value):
        return str(value)  # `path: 2023` in YAML is still a path
    raise ConfigError(f"{_at(where, key)}: {key}: expected a string, got {value!r}")


_SCALARS = {bool: _coerce_bool, int: _coerce_int, float: _coerce_float, str: _coerce_str}


# The field a section's validate() names first in its message (`top_k: must be ...`, `tasks[0]...`).
_NAMED = re.compile(r"(\w+)[:.\[]")


def from_dict(cls: type, data: dict, where: str | Sources = "<config>", prefix: str = "") -> Any:
    """Build dataclass ``cls`` from ``data``; unknown keys, wrong types, NaN or infinity
    (unless the field's metadata says ``nonfinite: True``) and what ``cls.validate``
    refuses raise :class:`ConfigError` naming where the value came from (``where``:
    a file name, or the :class:`Sources` of every key) and the dotted key."""
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    for k in data:
        if k not in fields:
            source = where.within(prefix + k) if isinstance(where, Sources) else where  # a section: its keys'
            retired = getattr(cls, "retired", {}).get(k)
            if retired:
                raise ConfigError(f"{source}: {prefix}{k}: {retired}")
            known = ", ".join(sorted(fields))
            raise ConfigError(f"{source}: {prefix}{k}: unknown key (known: {known})")
    kwargs = {}
    for k, v in data.items():
        kwargs[k] = _coerce(v, hints[k], prefix + k, where)
        if not fields[k].metadata.get("nonfinite"):
            _check_finite(kwargs[k], prefix + k, where)
    obj = cls(**kwargs)
    check = getattr(obj, "validate", None)
    if check is not None:
        try:
            check()
        except ValueError as e:
            named = _NAMED.match(str(e))
            key = prefix + named.group(1) if named and named.group(1) in fields else prefix.rstrip(".")
            source = where.within(key) if isinstance(where, Sources) else where
            raise ConfigError(f"{source}: {prefix.rstrip('.') or cls.__name__}: {e}") from None
    return obj


def at_least(obj: Any, low: int | float, *names: str) -> None:
    """Fields ``names`` of ``obj`` are ``low`` or more (None: unset, passes), else a ValueError naming the first
    that is not."""
    for name in names:
        value = getattr(obj, name)
        if value is not None and value < low:
            raise ValueError(f"{name}: must be {'0 or more' if low == 0 else f'at least {low}'}, got {value}")


def above(obj: Any, low: int | float, *names: str) -> None:
    """Fields ``names`` of ``obj`` are more than ``low`` (None passes), else a ValueError naming the first."""
    for name in names:
        value = getattr(obj, name)
        if value is not None and not value > low:
            raise ValueError(f"{name}: must be more than {low}, got {value}")


def between(obj: Any, low: int | float, high: int | float, *names: str) -> None:
    """Fields ``names`` of ``obj`` are in [``low``, ``high``] (None passes), else a ValueError naming the first."""
    for name in names:
        value = getattr(obj, name)
        if value is not None and not low <= value <= high:
            raise ValueError(f"{name}: {value} is not between {low} and {high}")


def to_dict(obj: Any) -> Any:
    return dataclasses.asdict(obj)


_EXPONENT = re.compile(r"[-+]?\d+(\.\d*)?[eE][-+]?\d+")


def _parse_scalar(text: str) -> Any:
    """Override values are YAML scalars: ``0.5``, ``true``, ``[a, b]``, ``null``."""
    try:
        value = parse_yaml(text) if text != "" else ""
    except yaml.YAMLError:
        return text
    if isinstance(value, str) and _EXPONENT.fullmatch(value):
        return float(value)  # YAML 1.1 reads `3e-3` (no dot) as a string
    return value


def _copy(data: Any) -> Any:
    """A copy of nested mappings and lists sharing nothing with ``data`` (a value YAML aliases twice is copied
    twice, so an override changes it in one place)."""
    if isinstance(data, dict):
        return {k: _copy(v) for k, v in data.items()}
    if isinstance(data, (list, tuple)):
        return [_copy(v) for v in data]
    return data


def apply_overrides(data: dict, overrides: list[str], cls: type, sources: Sources | None = None) -> dict:
    """Apply ``a.b.c=value`` strings to nested ``data`` (a copy is returned); ``sources`` records each as the
    key's source (``override `a.b.c=value```)."""
    data = _copy(data)
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
        if sources is not None:
            sources.replace(".".join(parts), node[parts[-1]], f"override `{ov}`")
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


def read_yaml_config(path: str | Path) -> dict:
    """The mapping in YAML file ``path`` ({} for an empty file); a ConfigError naming the file when it is missing,
    a folder, unreadable, larger than MAX_BYTES, not UTF-8, not YAML, too large with its aliases expanded, or not
    a mapping."""
    path = Path(path)
    if not path.exists():
        raise ConfigError(f"{path}: config file not found")
    if path.is_dir():
        raise ConfigError(f"{path}: is a folder, not a config file")
    try:
        with path.open("rb") as f:  # not read_bytes: `--config /dev/zero` would never end
            raw = f.read(MAX_BYTES + 1)
    except OSError as e:
        raise ConfigError(f"{path}: cannot read the config file: {e.strerror or e}") from None
    if len(raw) > MAX_BYTES:
        raise ConfigError(f"{path}: refused: larger than {MAX_BYTES:,} bytes")
    text = decode_utf8(raw, path, "{where}: not UTF-8 text (byte {offset}): {reason}", error=ConfigError)
    try:
        loaded = parse_yaml(text)
    except YamlRefused as e:
        raise ConfigError(f"{path}: refused: {e}") from None
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: invalid YAML: {e}") from None
    if loaded is None:
        return {}
    if not isinstance(loaded, dict):
        raise ConfigError(f"{path}: top level must be a mapping")
    return loaded


def load_config(cls: type, path: str | Path | None, overrides: list[str] | None = None,
                base: dict | None = None, base_source: str = "<defaults>") -> Any:
    """Read YAML ``path`` (or start from defaults), apply overrides, validate.

    ``base`` holds values under the file's (a model folder's recorded tools,
    say): defaults < ``base`` < the file < the overrides. An error names the
    key and where its value came from: the file, the override, or
    ``base_source`` (the file ``base`` was read from)."""
    sources = Sources()
    data: dict = read_yaml_config(path) if path is not None else {}
    if base:
        sources.add(base, base_source)
    sources.add(data, str(path))
    if base:
        data = merge(base, data)
    if overrides:
        data = apply_overrides(data, overrides, cls, sources)
    return from_dict(cls, data, sources)


def config_hash(obj: Any) -> str:
    """A short stable hash of a (sub)config, used to decide if a stage is stale."""
    blob = json.dumps(to_dict(obj) if dataclasses.is_dataclass(obj) else obj, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def dump_yaml(obj: Any) -> str:
    return yaml.safe_dump(to_dict(obj), sort_keys=False, allow_unicode=True)


def share_path(*parts: str) -> Path:
    """A file packaged in toolformer/share/ (pyproject.toml's package data: the packaged configs and sample data),
    or the folder itself without ``parts``."""
    place = resources.files("toolformer").joinpath("share")
    for part in parts:
        place = place.joinpath(part)
    return Path(str(place))
