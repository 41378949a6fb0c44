"""The Python API, in the style of transformers: a tuned model folder, ready to call its tools.

    from toolformer import ToolformerModel

    tf = ToolformerModel.from_pretrained("runs/demo/model", device="cpu")
    g = tf.generate("Question: How long is the Ketey? Answer:")
    print(g.text, g.calls, g.text_without_calls)
    tf.save_pretrained("runs/my-model")

:meth:`ToolformerModel.from_pretrained` reads the folder's ``toolformer.json``
(:mod:`toolformer.lm.modelfolder`): its tools and their data, its call style
and its decoding rule. Settings go over it in this order: the defaults, the
folder's record, a config (a YAML file or a ``PipelineConfig``), ``key=value``
overrides, then the ``tools`` option. A folder without ``toolformer.json`` is
used with the defaults (and any config), with a warning that names them. An
enabled tool whose data is missing fails here, naming the file.

A model folder is data, not authority: its MCP servers, side effects and data
outside it are used only with ``trust_folder_tools=True`` (see
:mod:`toolformer.lm.foldertrust`).
:meth:`ToolformerModel.generate` decodes with the paper's rule
(:func:`toolformer.lm.generate.generate_with_tools`) and returns
:class:`~toolformer.lm.generate.Generation` objects (``text``, ``calls``,
``text_without_calls``).
"""

from __future__ import annotations

import warnings
from dataclasses import asdict
from pathlib import Path

from toolformer.config.load import load_config, merge
from toolformer.config.schema import PipelineConfig
from toolformer.lm.foldertrust import FolderTrust, shown
from toolformer.lm.generate import Generation, generate_with_tools, load_model_folder
from toolformer.lm.modelfolder import (
    DECODING,
    SPEC_FILE,
    card_front_matter,
    card_section,
    check_tool_data,
    missing_note,
    read_spec,
    screen,
    tool_setup,
    write_spec,
)
from toolformer.lm.modeling import model_window
from toolformer.rundir.files import atomic_write_text
from toolformer.tools.calls import get_style

__all__ = ["ToolformerModel", "resolve", "resolve_config"]


def resolve_config(path: str | Path, config=None, overrides=(), tools: list[str] | None = None,
                   trust_folder_tools: bool = False):
    """(config, record) of model folder ``path``: the defaults, then the
    folder's ``toolformer.json`` (None when it has none), then ``config`` (a
    YAML path or a ``PipelineConfig``), ``overrides`` (``key=value``) and
    ``tools`` (the tools to enable). The folder's MCP servers, side effects and
    data outside it are used only with ``trust_folder_tools`` (see
    :mod:`toolformer.lm.foldertrust`)."""
    cfg, spec, _trust = resolve(path, config, overrides, tools, trust_folder_tools)
    return cfg, spec


def resolve(path: str | Path, config=None, overrides=(), tools: list[str] | None = None,
            trust_folder_tools: bool = False) -> tuple[PipelineConfig, dict | None, FolderTrust | None]:
    """:func:`resolve_config` and what the folder asks for beyond its files (None without ``toolformer.json``)."""
    from toolformer.tools import known_tools

    folder = Path(path)
    try:
        found = folder.is_dir()
    except OSError as e:  # a name too long to look up
        raise ValueError(f"model folder {shown(str(folder))}: {e.strerror}") from None
    if not found:
        raise FileNotFoundError(f"{folder}: model folder not found")
    spec = read_spec(folder)
    base, trust = screen(spec, folder, trust_folder_tools) if spec else ({}, None)
    source = str(folder / SPEC_FILE) if spec else "<defaults>"
    if isinstance(config, PipelineConfig):
        base, config = merge(base, asdict(config)), None
        source = f"{source} or the PipelineConfig given"
    cfg = load_config(PipelineConfig, config, list(overrides), base=base, base_source=source)
    if tools is not None:
        known = known_tools(cfg.tools)
        unknown = [t for t in tools if t not in known]
        if unknown:
            raise ValueError(f"tools: unknown tool(s) {', '.join(unknown)}; known: {', '.join(known)}")
        cfg.tools.enabled = list(tools)
    if trust is not None:
        trust.enforce(cfg.tools)
    return cfg, spec, trust


class ToolformerModel:
    """A causal LM, its tokenizer and the tools it calls, from one model folder."""

    def __init__(self, model, tokenizer, config: PipelineConfig, folder: str | Path, spec: dict | None = None,
                 trust: FolderTrust | None = None):
        self.trust = trust
        """What the folder asks for beyond its files, and whether it was trusted."""
        self.model = model
        self.tokenizer = tokenizer
        self.config = config
        self.folder = str(folder)
        self.spec = spec
        self.style = get_style(config.calls.style)
        self._sandbox = None

    @classmethod
    def from_pretrained(cls, path: str | Path, *, device: str | None = None, dtype=None, config=None,
                        overrides=(), tools: list[str] | None = None, warn=None,
                        trust_folder_tools: bool = False) -> ToolformerModel:
        """Load a model folder with the tools it records (see the module doc).

        ``device``: auto, cpu, cuda or cuda:N; ``dtype``: auto, float32,
        bfloat16, float16 or a ``torch.dtype`` (None: the config's ``model``
        section, auto by default); ``config``: a YAML path or a
        ``PipelineConfig`` over the folder's record; ``overrides``:
        ``key=value`` strings over that (``tools.knowledge=FILE``); ``tools``:
        the tools to enable (``[]``: none, calls disabled); ``warn(message)``
        receives what the caller should know (default: ``warnings.warn``);
        ``trust_folder_tools``: trust the folder's record with its MCP servers,
        side effects and data outside it (see :mod:`toolformer.lm.foldertrust`).
        """
        warn = warn or (lambda m: warnings.warn(m, stacklevel=3))
        cfg, spec, trust = resolve(path, config, overrides, tools, trust_folder_tools)
        if trust is not None and trust.note():
            warn(trust.note())
        if device is not None:
            cfg.model.device = str(device)
        if dtype is not None:
            cfg.model.dtype = str(dtype).removeprefix("torch.")
        cfg.model.validate()
        if spec is None:
            warn(missing_note(path, cfg))
        for note in check_tool_data(cfg.tools, path, spec):
            warn(note)
        model, tokenizer = load_model_folder(cfg, str(path))
        return cls(model, tokenizer, cfg, path, spec, trust)

    @property
    def tools(self) -> list[str]:
        """The enabled tools."""
        return list(self.config.tools.enabled)

    @property
    def sandbox(self):
        """The sandbox that runs the enabled tools' calls (built on first use)."""
        if self._sandbox is None:
            from toolformer.tools.sandbox import build_sandbox

            self._sandbox = build_sandbox(self.config)
        return self._sandbox

    def close(self) -> None:
        """Release the tools (stop the MCP servers of MCP tools); a later call builds them again."""
        if self._sandbox is not None:
            self._sandbox.close()
            self._sandbox = None

    def __enter__(self) -> ToolformerModel:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def setup(self, disabled: bool = False) -> dict:
        """Which tools, data, call style and decoding are used, and where each came from."""
        return {**tool_setup(self.config, self.folder, self.spec, disabled or not self.tools, self.trust),
                "decoding": {k: getattr(self.config.evaluate, k) for k in DECODING}}

    def generate(self, prompts: str | list[str], *, max_new_tokens: int | None = None,
                 top_k_trigger: int | None = None, max_calls: int | None = None, disabled: bool = False,
                 do_sample: bool = False, temperature: float = 1.0, dates: list[str | None] | None = None,
                 batch_size: int = 16, on_call=None, constrained: bool | None = None) -> Generation | list[Generation]:
        """Continue a prompt (one :class:`Generation`) or a list (a list),
        calling tools the paper's way; options left None take the folder's
        decoding rule. ``dates``: each prompt's date (Calendar); ``on_call(index,
        call, text_before)`` sees each call as it is made; ``constrained``:
        well-formed calls only (:mod:`toolformer.lm.constrain`)."""
        single = isinstance(prompts, str)
        ev = self.config.evaluate
        disabled = disabled or not self.tools
        sandbox = None if disabled else self.sandbox
        gens = generate_with_tools(
            self.model, self.tokenizer, [prompts] if isinstance(prompts, str) else list(prompts), sandbox, self.style,
            max_new_tokens=ev.max_new_tokens if max_new_tokens is None else max_new_tokens,
            top_k_trigger=ev.top_k_trigger if top_k_trigger is None else top_k_trigger,
            max_calls=ev.max_calls if max_calls is None else max_calls, disabled=disabled, do_sample=do_sample,
            temperature=temperature, dates=dates, tools=set(sandbox.tools) if sandbox else None,
            batch_size=batch_size, window=model_window(self.model, self.config.model), on_call=on_call,
            constrained=ev.constrained if constrained is None else constrained,
            max_input_chars=self.config.tools.max_input_chars)
        return gens[0] if single else gens

    def save_pretrained(self, path: str | Path, max_data_mb: float | None = None) -> Path:
        """Write the weights, the tokenizer, ``toolformer.json`` (tool data up
        to ``max_data_mb``, default ``finetune.tool_data_max_mb``, copied) and
        a model card into a new folder ``path``."""
        out = Path(path)
        if out.resolve() == Path(self.folder).resolve():
            raise ValueError(f"save_pretrained: {out} is the folder this model was loaded from; save to another")
        out.mkdir(parents=True, exist_ok=True)
        self.model.save_pretrained(out)
        self.tokenizer.save_pretrained(out)
        limit = self.config.finetune.tool_data_max_mb if max_data_mb is None else max_data_mb
        base = (self.spec or {}).get("base_model") or self.folder
        spec = write_spec(self.config, out, limit, base_model=base, tokenizer=self.tokenizer)
        atomic_write_text(out / "README.md", f"{card_front_matter(base)}# Toolformer model\n\nSaved by "
                                             f"`ToolformerModel.save_pretrained` from `{self.folder}` (base model "
                                             f"`{base}`).\n\n" + card_section(spec))
        return out

    def __repr__(self) -> str:
        source = f"{self.folder}/{SPEC_FILE}" if self.spec else "defaults"
        return f"ToolformerModel({self.folder!r}, tools={self.tools}, style={self.style.name!r}, from {source})"
