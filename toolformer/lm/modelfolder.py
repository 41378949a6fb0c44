"""A tuned model folder's own description: ``toolformer.json`` beside the weights.

``toolformer finetune`` and :meth:`toolformer.api.ToolformerModel.save_pretrained`
write it, so that the folder says how it is meant to be used:

- ``calls``: the call style (``style``, ``separator``) and its markers
  (``start``, ``end``, ``arrow``, ``arrow_alternatives``, ``special_tokens``);
- ``tools``: ``enabled`` (the tools it was tuned with), ``settings`` (the other
  fields of the tools config; data paths only for enabled tools) and ``data``:
  for each data key of an enabled tool (``knowledge`` of QA, ``collection`` of
  WikiSearch, ``mt_model`` of MT) the tool, whether the data was ``copied``
  into the folder, its ``source``, its size in ``bytes`` and (a file) its
  ``sha256``;
- ``decoding``: the rule at inference (``top_k_trigger``, ``max_calls``,
  ``max_new_tokens``; greedy);
- ``document``: what precedes (``start``) and follows (``end``) every document, as tokens and ids
  (:func:`toolformer.lm.modeling.document_spec`): BOS, else EOS, before; EOS after unless it starts documents;
- ``format`` (:data:`FORMAT`), ``toolformer_version`` and ``base_model``.

Data of at most ``finetune.tool_data_max_mb`` (50 MB) is copied into
``FOLDER/tools/`` (a file with its BM25 index ``NAME.bm25`` when one was
built, a model folder whole) and recorded relative to the folder, so the
folder can be moved; larger data is recorded by absolute path. Reading a
folder (:func:`folder_settings`) turns the record into config sections with
absolute paths; a config file and ``key=value`` overrides go over them
(``base`` of :func:`toolformer.config.load.load_config`).
:func:`check_tool_data` fails on an enabled tool whose data is missing,
naming the file; :func:`tool_setup` says which tools and data are used.
"""

from __future__ import annotations

import copy
import hashlib
import json
import sys
from dataclasses import asdict, fields
from pathlib import Path

from toolformer.lm.folderfiles import check_own_files, read_folder_json
from toolformer.lm.foldertrust import OUTSIDE, TRUST_FLAG, FolderTrust, escape, shown, tool_data
from toolformer.rundir.inputs import MODEL_RECORD
from toolformer.tools.datafiles import copy_data, pin, pinned, remove_data

SPEC_FILE = MODEL_RECORD  # the run folder checks look for it too (toolformer/rundir/inputs.py)
FORMAT = 1
DATA_DIR = "tools"
DECODING = ("top_k_trigger", "max_calls", "max_new_tokens", "constrained")
MB = 1_000_000


def _stderr(message: str) -> None:
    print(message, file=sys.stderr)


def data_keys(enabled) -> list[tuple[str, str, str]]:
    """(tool, key of the tools config, kind) of the data each of the tools ``enabled`` reads."""
    from toolformer.rundir.inputs import TOOL_DATA

    return [(tool, *TOOL_DATA[tool]) for tool in enabled if tool in TOOL_DATA]


def _parts(src: Path) -> list[Path]:
    """A tool's data on disk: a file and its BM25 index (when one was built), or a folder."""
    index = src.with_name(src.name + ".bm25")
    return [src, index] if src.is_file() and index.is_dir() else [src]


def _size(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def _sha256(path: Path) -> str | None:
    if not path.is_file():
        return None
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _record_data(tools_cfg, out: Path, max_bytes: int, warn) -> tuple[dict, dict]:
    """Copy (up to ``max_bytes``) or reference the data of every enabled tool:
    (data key -> recorded path, data key -> record)."""
    paths: dict[str, str] = {}
    records: dict[str, dict] = {}
    kept: set[str] = set()
    for tool, key, _kind in data_keys(tools_cfg.enabled):
        value = getattr(tools_cfg, key)
        if not value:
            paths[key] = ""
            records[key] = {"tool": tool, "copied": False, "source": "", "bytes": None, "sha256": None}
            continue
        src = Path(value).expanduser().resolve()
        if pinned(value) and str(src) != value:  # loaded from a folder, since swapped for a link
            raise ValueError(f"tools.{key}: {value} now leads to {src}, not the file {pinned(value)} named when it "
                             "was loaded")
        if not src.exists():
            warn(f"tools.{key}: {src}, the data of tool {tool}, does not exist; recorded by its path: the folder "
                 "cannot be used with this tool until it does")
            paths[key] = str(src)
            records[key] = {"tool": tool, "copied": False, "source": str(src), "bytes": None, "sha256": None}
            continue
        parts = _parts(src)
        record = {"tool": tool, "copied": max_bytes > 0 and sum(_size(p) for p in parts) <= max_bytes,
                  "source": str(src), "bytes": _size(src), "sha256": _sha256(src)}
        paths[key] = str(src)
        if record["copied"]:
            name = key + src.suffix if src.is_file() else key
            for part in parts:  # NAME, then NAME.bm25
                target = out / DATA_DIR / (name + part.name[len(src.name):])
                kept.add(target.name)
                if part.resolve() != target.resolve():
                    target.parent.mkdir(parents=True, exist_ok=True)
                    copy_data(part, target)
            paths[key] = f"{DATA_DIR}/{name}"
        records[key] = record
    data_dir = out / DATA_DIR
    if data_dir.is_dir():  # copies of data no longer recorded
        for old in data_dir.iterdir():
            if old.name not in kept:
                remove_data(old)
    return paths, records


def write_spec(cfg, out: str | Path, max_mb: float, base_model: str = "", warn=_stderr, tokenizer=None,
               training: dict | None = None) -> dict:
    """Write ``OUT/toolformer.json`` for a model tuned with ``cfg`` (a PipelineConfig):
    its call style, tools (data copied up to ``max_mb`` MB each), the decoding
    rule of ``cfg.evaluate``, the document's start and end tokens of ``tokenizer``, and ``training`` (how it was
    tuned: the method, full or LoRA). Returns the record."""
    from toolformer.lm.modeling import document_spec
    from toolformer.rundir.files import atomic_write_text
    from toolformer.rundir.inputs import TOOL_DATA
    from toolformer.tools.calls import get_style
    from toolformer.version import __version__

    out = Path(out)
    style = get_style(cfg.calls.style)
    paths, records = _record_data(cfg.tools, out, int(max_mb * MB), warn)
    data_fields = {key for key, _kind in TOOL_DATA.values()}
    settings = {k: v for k, v in asdict(cfg.tools).items() if k != "enabled" and k not in data_fields}
    spec = {
        "format": FORMAT,
        "toolformer_version": __version__,
        "base_model": base_model,
        "calls": {"style": style.name, "separator": cfg.calls.separator, "start": style.start, "end": style.end,
                  "arrow": style.arrow, "arrow_alternatives": list(style.arrow_alternatives),
                  "special_tokens": style.special_tokens},
        "tools": {"enabled": list(cfg.tools.enabled), "settings": {**settings, **paths}, "data": records},
        "decoding": {**{k: getattr(cfg.evaluate, k) for k in DECODING}, "sampling": "greedy"},
    }
    if tokenizer is not None:
        spec["document"] = document_spec(tokenizer)
    if training is not None:
        spec["training"] = training
    atomic_write_text(out / SPEC_FILE, json.dumps(spec, indent=2, ensure_ascii=False) + "\n")
    return spec


def spec_summary(spec: dict) -> str:
    """The tools a record names and where their data is, in one line."""
    t = spec["tools"]
    data = [f"{rec['tool']} data {t['settings'].get(key) or '(none)'} "
            f"({'copied' if rec.get('copied') else 'by absolute path'})" for key, rec in t.get("data", {}).items()]
    return "; ".join([f"tools {', '.join(t['enabled']) or 'none'}", *data, f"call style {spec['calls']['style']}"])


def read_spec(folder: str | Path) -> dict | None:
    """The record of ``FOLDER/toolformer.json``; None when the folder has none. The folder's own files are
    checked first: one that is a symlink leading out of it is an error naming it (:mod:`toolformer.lm.folderfiles`)."""
    check_own_files(folder)
    path = Path(folder) / SPEC_FILE
    if not path.is_file():
        return None
    spec = read_folder_json(path)  # the folder's own file, not a link out of it; deep JSON is an error
    if not isinstance(spec, dict) or not isinstance(spec.get("format"), int):
        raise ValueError(f"{path}: no `format` number: not a toolformer model description")
    if spec["format"] > FORMAT:
        raise ValueError(f"{path}: format {spec['format']} is newer than this toolformer reads ({FORMAT}); "
                         "upgrade toolformer")
    for key in ("calls", "tools", "decoding"):
        if not isinstance(spec.get(key), dict):
            raise ValueError(f"{path}: `{key}` is missing or not an object")
    return spec


def screen(spec: dict, folder: str | Path, trust: bool = False) -> tuple[dict, FolderTrust]:
    """(config sections of a folder's record, what it asks for beyond its own files): ``calls``, ``tools``
    (data paths made absolute: relative ones lie inside the folder) and the decoding fields of ``evaluate``.
    Untrusted, the folder's MCP servers and ``allow_side_effects`` are left out (see
    :mod:`toolformer.lm.foldertrust`). Checked here, so that an error names the file."""
    from toolformer.config.load import from_dict
    from toolformer.config.schema import CallsConfig
    from toolformer.config.tools import ToolsConfig
    from toolformer.tools.calls import get_style

    folder = Path(folder)
    where = str(folder / SPEC_FILE)
    settings = spec["tools"].get("settings", {})
    if not isinstance(settings, dict):
        raise ValueError(f"{where}: tools.settings: expected an object")
    tools = {"enabled": spec["tools"].get("enabled", []), **settings}
    trust_info = FolderTrust(where, trust)
    for key, kind in tool_data().values():
        value = tools.get(key)
        if not value or not isinstance(value, str):
            continue
        try:
            why = escape(folder, value)
        except ValueError as e:
            raise ValueError(f"{where}: tools.{key}: {e}") from None
        named = Path(value).expanduser()
        named = named if named.is_absolute() else folder / named  # relative to the folder, never to the cwd
        tools[key] = str(named.resolve())
        if why:
            trust_info.outside[key] = (str(named), why)
            if not trust:  # marked until FolderTrust.enforce: refused if still the folder's when its tool is used
                tools[key] = OUTSIDE + str(named)
        elif kind == "file":
            pin(tools[key], where)  # the tool reads the file checked here, and no other
    recorded = from_dict(ToolsConfig, tools, where, "tools.")  # the record as written is checked, trusted or not
    trust_info.servers, trust_info.side_effects = recorded.mcp_servers, recorded.allow_side_effects
    if not trust:
        tools.pop("mcp_servers", None)
        tools.pop("allow_side_effects", None)
    calls = {k: spec["calls"][k] for k in ("style", "separator") if k in spec["calls"]}
    decoding = {k: spec["decoding"][k] for k in DECODING if k in spec["decoding"]}
    style = get_style(from_dict(CallsConfig, calls, where, "calls.").style)
    recorded = tuple(spec["calls"].get(k, getattr(style, k)) for k in ("start", "end", "arrow"))
    if recorded != (style.start, style.end, style.arrow):
        raise ValueError(f"{where}: calls: markers {recorded} are not those of the style {style.name!r} in this "
                         f"version ({style.start!r}, {style.end!r}, {style.arrow!r})")
    return {"calls": calls, "tools": tools, "evaluate": decoding}, trust_info


def folder_settings(spec: dict, folder: str | Path, trust: bool = False) -> dict:
    """The config sections of a folder's record (:func:`screen`)."""
    return screen(spec, folder, trust)[0]


def with_folder_tools(cfg, folder: str | Path, trust: bool = False):
    """(``cfg`` with the tools and the call style a model folder records, its
    record, what the folder asks for beyond its files); ``cfg`` itself, None
    and None for a folder without ``toolformer.json``. Refusals are for
    :meth:`FolderTrust.enforce` once the enabled tools are known."""
    from toolformer.config.load import from_dict, merge
    from toolformer.config.schema import CallsConfig
    from toolformer.config.tools import ToolsConfig

    spec = read_spec(folder)
    if spec is None:
        return cfg, None, None
    base, trust_info = screen(spec, folder, trust)
    out = copy.deepcopy(cfg)
    where = str(Path(folder) / SPEC_FILE)
    own = {key: getattr(cfg.tools, key) for key in trust_info.outside}
    out.tools = from_dict(ToolsConfig, merge(asdict(cfg.tools), base["tools"]), where, "tools.")
    out.calls = from_dict(CallsConfig, merge(asdict(cfg.calls), base["calls"]), where, "calls.")
    for key, value in own.items():  # a path outside the folder that the user's own config names is theirs
        target = str(Path(trust_info.outside[key][0]).resolve())
        if value and str(Path(value).expanduser().resolve()) == target:
            setattr(out.tools, key, target)
            del trust_info.outside[key]
    return out, spec, trust_info


def _names(recorded, path: str) -> bool:
    """The folder's record ``recorded`` (as :func:`screen` gives it, maybe marked outside) names ``path``."""
    value = str(recorded).removeprefix(OUTSIDE)
    return bool(value) and (value == path or str(Path(value).resolve()) == path)


def check_tool_data(tools_cfg, folder: str | Path, spec: dict | None) -> list[str]:
    """Every enabled tool's data exists, else a FileNotFoundError naming the
    file, the tool and where its path came from. Returns notes on data
    recorded by path whose size changed since the folder was written."""
    recorded = folder_settings(spec, folder)["tools"] if spec else {}
    notes = []
    for tool, key, _kind in data_keys(tools_cfg.enabled):
        path = getattr(tools_cfg, key)
        if not path:
            continue
        ours = spec is not None and _names(recorded.get(key, ""), path)
        where = f"recorded in {Path(folder) / SPEC_FILE}" if ours else "set by the config, --set or the defaults"
        try:
            found = Path(path).expanduser().exists()
        except OSError as e:  # a name too long to look up
            raise ValueError(f"tools.{key}: {shown(path)} ({where}): {e.strerror}") from None
        if not found:
            raise FileNotFoundError(f"{path}: the data of tool {tool} (tools.{key}, {where}) does not exist")
        rec = spec["tools"].get("data", {}).get(key, {}) if ours and spec is not None else {}
        if rec.get("bytes") is not None and not rec.get("copied") and _size(Path(path)) != rec["bytes"]:
            notes.append(f"tools.{key}: {path} has changed since the model folder was written "
                         f"({rec['bytes']:,} bytes then, {_size(Path(path)):,} now)")
    return notes


def tool_setup(cfg, folder: str | Path, spec: dict | None, disabled: bool = False,
               trust: FolderTrust | None = None) -> dict:
    """Which tools, data, call style and decoding a model folder is used with,
    the keys set otherwise than its record, and what of its record was refused
    (``trust``): for the output of ``generate``, ``chat`` and ``evaluate``."""
    from toolformer.config.tools import ToolsConfig

    trusted = trust is not None and trust.trusted
    recorded = folder_settings(spec, folder, trusted) if spec else {"tools": {}, "calls": {}}
    data = {}
    for tool, key, _kind in data_keys(cfg.tools.enabled):
        path = getattr(cfg.tools, key)
        rec = spec["tools"].get("data", {}).get(key, {}) if spec else {}
        if spec and path and _names(recorded["tools"].get(key, ""), path):
            named, why = trust.outside.get(key, (path, "")) if trust else (path, "")
            origin = (f"recorded by the model folder as {named}, {why}" if named != path  # a link followed, trusted
                      else "copied into the model folder" if rec.get("copied") else "recorded by the model folder")
        else:
            origin = "default" if path == getattr(ToolsConfig(), key) else "set by the config"
        data[tool] = {"key": f"tools.{key}", "path": str(Path(path).resolve()) if path else "", "origin": origin}
    overridden = [f"{section}.{k}" for section, sub in (("tools", cfg.tools), ("calls", cfg.calls))
                  for k, v in recorded[section].items() if k in {f.name for f in fields(sub)}
                  and getattr(sub, k) != (v.removeprefix(OUTSIDE) if isinstance(v, str) else v)
                  and not (trust and k in trust.outside)]
    return {"model": str(folder), "description": str(Path(folder) / SPEC_FILE) if spec else None,
            "enabled": [] if disabled else list(cfg.tools.enabled), "disabled": disabled, "call_style": cfg.calls.style,
            "data": {} if disabled else data, "overridden": overridden,
            "trusted": trusted, "refused": trust.refused() if trust else []}


def setup_line(setup: dict) -> str:
    """:func:`tool_setup` in one line."""
    if setup["disabled"]:
        return f"model {setup['model']}: tools disabled (no call is made); call style {setup['call_style']}"
    source = setup["description"] or f"defaults and config: {setup['model']} has no {SPEC_FILE}"
    line = (f"model {setup['model']}: tools {', '.join(setup['enabled']) or 'none'} from {source}"
            + (f" (overridden: {', '.join(setup['overridden'])})" if setup["overridden"] else ""))
    for tool, d in setup["data"].items():
        line += f"; {tool} data {d['path'] or '(none)'} ({d['origin']})"
    if setup.get("refused"):
        line += f"; refused from the folder: {', '.join(setup['refused'])} (pass {TRUST_FLAG} to use them)"
    elif setup.get("trusted"):
        line += f"; folder trusted ({TRUST_FLAG})"
    return line + f"; call style {setup['call_style']}"


def missing_note(folder: str | Path, cfg) -> str:
    """What a folder without ``toolformer.json`` is used with, and how to record it."""
    data = ", ".join(f"tools.{key}={getattr(cfg.tools, key) or '(none)'}" for _, key, _ in data_keys(cfg.tools.enabled))
    return (f"{folder} has no {SPEC_FILE} (written before toolformer recorded a tuned model's tools, or not by "
            f"`toolformer finetune`): using tools {', '.join(cfg.tools.enabled) or 'none'}"
            + (f" with {data}" if data else "") + f" and call style {cfg.calls.style} from the defaults, --config "
            f"and --set; `toolformer finetune` (or ToolformerModel.save_pretrained) writes a folder that records them")


def card_front_matter(base_model: str, dataset: str = "") -> str:
    """The model card's YAML header, the hub's model card metadata: ``library_name``, ``tags``, ``base_model``
    when the base model is a hub id (a local path names nothing a reader can find), ``datasets`` when ``dataset``
    is a hub data set."""
    import yaml

    from toolformer.rundir.inputs import is_hub_id

    meta: dict = {"library_name": "transformers", "tags": ["toolformer", "tool-use", "text-generation"]}
    if is_hub_id(base_model):
        meta["base_model"] = base_model
    if is_hub_id(dataset):
        meta["datasets"] = [dataset]
    return f"---\n{yaml.safe_dump(meta, sort_keys=False, allow_unicode=True)}---\n\n"


def card_section(spec: dict) -> str:
    """The model card's account of ``toolformer.json``."""
    c, t, d = spec["calls"], spec["tools"], spec["decoding"]
    lines = ["## Tools", "",
             f"`{SPEC_FILE}` beside the weights records how this model calls tools; `toolformer generate`, "
             "`toolformer chat`, `toolformer evaluate` and `ToolformerModel.from_pretrained` use it unless a config "
             "or an option says otherwise.", "",
             f"- call style `{c['style']}`: a call is `{c['start']}Tool(input) {c['arrow']} result{c['end']}`"
             + (" (added tokens)" if c.get("special_tokens") else ""),
             f"- tools: {', '.join(f'`{n}`' for n in t['enabled']) or 'none'}"]
    for key, rec in t.get("data", {}).items():
        path = t["settings"].get(key, "")
        if not path:
            lines.append(f"- `{rec['tool']}` data (`tools.{key}`): not set")
            continue
        size = "" if rec.get("bytes") is None else f", {rec['bytes']:,} bytes"
        sha = f", sha256 `{rec['sha256'][:16]}…`" if rec.get("sha256") else ""
        how = "copied into this folder" if rec.get("copied") else "referenced by absolute path (too large to copy)"
        lines.append(f"- `{rec['tool']}` data (`tools.{key}`): `{path}`, {how}, from `{rec['source']}`{size}{sha}")
    lines.append(f"- decoding: greedy; a call starts when the call-start token is among the top {d['top_k_trigger']} "
                 f"tokens; at most {d['max_calls']} call(s) per prompt; {d['max_new_tokens']} new tokens")
    return "\n".join(lines) + "\n"
