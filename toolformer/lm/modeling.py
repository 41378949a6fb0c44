"""Loading causal LMs and tokenizers; the tiny model built in code for tests."""

from __future__ import annotations

import dataclasses
import inspect
from pathlib import Path

import torch

from toolformer.tools.calls import CallStyle, add_call_tokens, init_call_rows

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def resolve_device(name: str = "auto") -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def resolve_dtype(name: str, device: torch.device) -> torch.dtype:
    """``auto`` is float32 on CPU and bfloat16 on GPU (the paper fine-tunes in bf16)."""
    if name == "auto":
        return torch.bfloat16 if device.type == "cuda" else torch.float32
    return DTYPES[name]


def set_threads(threads: int = 0, share: int = 0) -> int:
    """torch's CPU threads: ``threads`` when set, else one per usable core (split among the ``share`` processes
    of a launch on this machine) that follows the load (:mod:`toolformer.lm.threads`)."""
    from toolformer.lm.threads import set_threads as _set

    return _set(threads, share)


def _check_local(path: str, what: str) -> None:
    """A local-looking path that does not exist is an error naming ``what``; a
    hub id must answer within seconds (see :mod:`toolformer.rundir.inputs`)."""
    from toolformer.rundir.inputs import check_hub, looks_local

    if Path(path).expanduser().exists():
        return
    if looks_local(path):
        raise FileNotFoundError(f"{what} folder {path} does not exist")
    check_hub(what, path, "model")


def load_tokenizer(path: str, style: CallStyle | None = None):
    from transformers import AutoTokenizer

    if not path:
        raise ValueError("model.path: no model configured")
    _check_local(path, "tokenizer")
    tok = AutoTokenizer.from_pretrained(path)
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    if style is not None and style.special_tokens:
        add_call_tokens(tok, None, style)
    if style is not None:
        check_markers(tok, style, path)
    return tok


def check_markers(tokenizer, style: CallStyle, where: str = "") -> None:
    """Every call marker must survive encode → decode; a tokenizer that maps
    one to an unknown token cannot learn or score calls."""
    for marker in (style.start, style.end, style.arrow):
        ids = tokenizer(marker, add_special_tokens=False)["input_ids"]
        back = tokenizer.decode(ids).strip()
        if not ids or back != marker or (tokenizer.unk_token_id is not None and tokenizer.unk_token_id in ids):
            raise ValueError(f"tokenizer {where}: cannot represent the call marker {marker!r} of style "
                             f"{style.name!r} (decodes as {back!r}); use calls.style=special to add marker tokens")


LOGIT_BYTES = 1 << 30
"""Float32 logits one forward may hold where all its positions' logits are made (perplexity, position scoring): a
262,144-row output layer (Gemma) takes 1,024 tokens."""


def logit_token_budget(model, tokens: int, max_bytes: int = 0) -> int:
    """``tokens``, or fewer where one forward's float32 logits over them would pass ``max_bytes`` (0:
    :data:`LOGIT_BYTES`); at least 1."""
    max_bytes = max_bytes or LOGIT_BYTES
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    vocab = head.weight.shape[0] if head is not None else getattr(getattr(model, "config", None), "vocab_size", 0)
    if not vocab:  # a model that does not say its vocabulary (a scripted one): the budget as given
        return max(1, tokens)
    return max(1, min(tokens, max_bytes // (4 * vocab)))


_TAKES_KEEP: dict[type, bool] = {}  # model class -> whether its forward takes logits_to_keep


def last_logits(model, keep: int) -> dict:
    """The forward keywords that make only the last ``keep`` positions' logits (0: all), where the model's forward
    takes ``logits_to_keep`` (transformers' causal LMs); else none, and the caller slices."""
    kind = type(model)
    if kind not in _TAKES_KEEP:
        forward = getattr(kind, "forward", None)
        _TAKES_KEEP[kind] = forward is not None and "logits_to_keep" in inspect.signature(forward).parameters
    return {"logits_to_keep": keep} if keep > 0 and _TAKES_KEEP[kind] else {}


def fit_rows(model, tokenizer) -> None:
    """Rows for the call tokens that ``tokenizer`` added (none: nothing to do)."""
    if tokenizer is not None:
        init_call_rows(model, tokenizer)  # call tokens were added: their rows, the same way whatever the padding
        if len(tokenizer) > model.get_input_embeddings().weight.shape[0]:
            model.resize_token_embeddings(len(tokenizer))


def load_model(path: str, device: torch.device, dtype: torch.dtype, tokenizer=None):
    """Any ``AutoModelForCausalLM`` from a folder or hub id, in eval mode."""
    from transformers import AutoModelForCausalLM

    if not path:
        raise ValueError("model.path: no model configured")
    _check_local(path, "model")
    model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype)
    fit_rows(model, tokenizer)
    if device.type == "cpu":
        from toolformer.lm.threads import follow_load

        follow_load(model)
    # The ignore: transformers wraps `to` (@wraps of Module.to), which mypy reads as an unbound function.
    return model.to(device).eval()  # type: ignore[arg-type]


def load(model_cfg, calls_cfg=None):
    """Model and tokenizer from a ModelConfig (+ CallsConfig for the markers)."""
    from toolformer.rundir.parallel import ranks
    from toolformer.tools.calls import get_style

    device = resolve_device(ranks().device(model_cfg.device))  # under a launch, each process its own GPU
    dtype = resolve_dtype(model_cfg.dtype, device)
    style = get_style(calls_cfg.style) if calls_cfg is not None else None
    if not model_cfg.path:
        raise ValueError("model.path: no model configured")
    _check_local(model_cfg.path, "model")
    tok = load_tokenizer(model_cfg.tokenizer or model_cfg.path, style)
    model = load_model(model_cfg.path, device, dtype, tok)
    return model, tok


def with_weights(model_cfg, path: str):
    """``model_cfg`` with the weights of ``path`` (empty: unchanged) and the tokenizer kept: a stage run with
    another model (sample.model, filter.model) counts positions in the same tokens as the rest of the run."""
    if not path:
        return model_cfg
    return dataclasses.replace(model_cfg, path=path, tokenizer=model_cfg.tokenizer or model_cfg.path)


def model_window(model, model_cfg=None) -> int:
    if model_cfg is not None and model_cfg.max_length:
        return model_cfg.max_length
    c = model.config
    for name in ("max_position_embeddings", "n_positions", "n_ctx"):
        v = getattr(c, name, None)
        if isinstance(v, int) and v > 0:
            return v
    return 2048


def document_start(tokenizer) -> list[int]:
    """The tokens put before every document wherever the model reads one: the sampler's rows, the filter's
    L_i(z), the packed training rows, generation and evaluation (docs/design.md). [BOS] when the tokenizer has
    one, else [EOS], the token that separates documents in the model's pre-training (Qwen, GPT-4-style
    tokenizers); [] only for a tokenizer with neither. So x_0 is predicted from the logits at that token, never
    from a padding slot or the end of the row."""
    for token_id in (tokenizer.bos_token_id, tokenizer.eos_token_id):
        if token_id is not None:
            return [token_id]
    return []


def document_end(tokenizer) -> list[int]:
    """The tokens after every document in training rows: [EOS], so the tuned model learns to stop; [] when EOS
    is also what starts a document (a tokenizer without BOS, or whose BOS is its EOS, as the small world's):
    the next document's start then ends the previous one, one token between documents, as before."""
    eos = tokenizer.eos_token_id
    return [eos] if eos is not None and [eos] != document_start(tokenizer) else []


def document_spec(tokenizer) -> dict:
    """What :func:`document_start` and :func:`document_end` chose, as tokens and ids (``toolformer.json``)."""
    start, end = document_start(tokenizer), document_end(tokenizer)
    return {"start": tokenizer.convert_ids_to_tokens(start), "start_ids": start,
            "end": tokenizer.convert_ids_to_tokens(end), "end_ids": end}


def tiny_tokenizer_texts(data_dir: str | Path = "data") -> list[str]:
    """Texts the tiny tokenizer is trained on: the tools' prompts and the
    corpus and collections in ``data_dir`` (the repository's ``data/``; the
    default ``data`` where the current folder has none: the package's copy of
    those files, toolformer/share/data, so an installed package writes the same
    tiny model from any folder)."""
    from toolformer.config.load import share_path
    from toolformer.tools import REGISTRY

    root = Path(data_dir)
    if root == Path("data") and not (root / "corpus.jsonl").is_file():
        root = share_path("data")
    if not (root / "corpus.jsonl").is_file():
        raise FileNotFoundError(f"{root}: no corpus.jsonl to train the tiny tokenizer on; run from the repository "
                                f"root or pass the folder of the repository's data/ (tiny-model --data DIR)")
    texts = [t.prompt for t in REGISTRY.values()]
    for name in ("corpus.jsonl", "collection.jsonl", "knowledge.jsonl"):
        p = root / name
        if p.exists():
            texts.extend(p.read_text(encoding="utf-8").split("\n"))  # JSON Lines end at a newline only
    texts.append("0 1 2 3 4 5 6 7 8 9 + - * / = ( ) [ ] → -> ")
    return texts


def write_tiny_model(out: str | Path, seed: int = 0, hidden: int = 32, layers: int = 2, heads: int = 2,
                     positions: int = 1024, vocab_size: int = 600, data_dir: str | Path = "data") -> Path:
    """A randomly initialised GPT-2-shaped causal LM and a BPE tokenizer, both
    built in code (nothing downloaded), saved with ``save_pretrained``."""
    from transformers import GPT2Config, GPT2LMHeadModel

    from toolformer.lm.tokenizer import train_tokenizer

    out = Path(out)
    tok = train_tokenizer(tiny_tokenizer_texts(data_dir), vocab_size=vocab_size)
    torch.manual_seed(seed)
    config = GPT2Config(
        vocab_size=len(tok), n_positions=positions, n_embd=hidden, n_layer=layers, n_head=heads,
        bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
    )
    model = GPT2LMHeadModel(config)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return out


def cache_kwarg(model) -> str:
    """Name of the key/value-cache argument: ``cache`` in recent transformers 5
    releases, ``past_key_values`` before."""
    import inspect

    params = inspect.signature(model.forward).parameters
    return "cache" if "cache" in params else "past_key_values"


def output_cache(out):
    cache = getattr(out, "cache", None)
    return cache if cache is not None else out.past_key_values
