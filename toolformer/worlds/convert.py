"""A GGUF file turned into a plain model folder: ``model.safetensors`` (float32), ``config.json``,
``generation_config.json``, the tokenizer's files (its chat template where the file has one), the licence's text and
``import.json``, the record (source, sha256, licence, dtype, parameters, architecture, vocabulary, versions, the
check, the command).

transformers dequantises the GGUF's tensors to float32 on loading (``from_pretrained(folder, gguf_file=NAME)``), but
refuses to save a model it loaded so; a model built from the loaded config (its quantisation setting removed) takes
its state dict and saves as any other. Before the folder is kept, it is loaded back and its logits on a fixed text
compared with the GGUF-loaded model's: max |Δ| ≤ :data:`LOGIT_TOLERANCE`. Everything is written into a temporary
folder beside ``out`` and renamed to ``out`` at the end; a refusal, a failure or a stop removes it."""

from __future__ import annotations

import json
import os
import shutil
import time
from collections import Counter
from pathlib import Path

from toolformer.rundir.files import atomic_write_text, read_json
from toolformer.worlds.weights import WeightsError

RECORD = "import.json"
FORMAT = 1
LOGIT_TOLERANCE = 1e-4
"""Max |Δ logit| between the GGUF-loaded model and the written folder (the same float32 weights: the difference is
the kernels' rounding)."""
CHECK_TEXT = "The quick brown fox jumps over the lazy dog. 12 + 30 = 42."
NOT_CAUSAL = ("general", "tokenizer", "t5", "t5encoder", "umt5")  # keys of transformers' table that are no causal LM
GGUF_MAGIC = b"GGUF"


def supported_architectures() -> list[str]:
    """The GGUF architectures transformers' loader reads into a causal LM."""
    from transformers.modeling_gguf_pytorch_utils import GGUF_SUPPORTED_ARCHITECTURES

    return sorted(set(GGUF_SUPPORTED_ARCHITECTURES) - set(NOT_CAUSAL))


def inspect_gguf(path: Path) -> dict:
    """The GGUF's architecture, name, licence, quantisation (llama.cpp's file type, else the tensor type holding
    most bytes), bytes per tensor type and size; a WeightsError naming the file when it is not a whole GGUF (cut
    short, another format) or its architecture is unsupported."""
    try:
        from gguf import GGUFReader
    except ImportError:
        raise WeightsError("reading a GGUF file needs the gguf package: pip install 'toolformer[weights]'") from None
    if not path.is_file():
        raise WeightsError(f"{path}: no such file")
    with open(path, "rb") as f:
        if f.read(4) != GGUF_MAGIC:
            raise WeightsError(f"{path}: not a GGUF file (it does not start with GGUF)")
    size = path.stat().st_size
    try:
        reader = GGUFReader(str(path))
        end = max((int(t.data_offset) + int(t.n_bytes) for t in reader.tensors), default=0)
        fields = {k: reader.fields[k].contents() for k in ("general.architecture", "general.name", "general.license",
                                                           "general.file_type") if k in reader.fields}
        kinds: Counter[str] = Counter()
        for t in reader.tensors:
            kinds[t.tensor_type.name] += int(t.n_bytes)
    except Exception as e:  # the reader's errors on a cut file: ValueError, IndexError (an array shorter than stated)
        raise WeightsError(f"{path}: not a whole GGUF file (cut short or damaged: {type(e).__name__}: {e})") from None
    if end > size or not kinds:
        raise WeightsError(f"{path}: not a whole GGUF file (its tensors need {end} bytes, the file has {size})")
    arch = str(fields.get("general.architecture", ""))
    if arch not in supported_architectures():
        raise WeightsError(f"{path}: architecture {arch!r} is not supported (a causal LM transformers reads from "
                           f"GGUF: {', '.join(supported_architectures())})")
    quantisation = _file_type(fields.get("general.file_type")) or kinds.most_common(1)[0][0]
    return {"architecture": arch, "name": fields.get("general.name"), "license": fields.get("general.license"),
            "quantisation": quantisation, "tensor_bytes": dict(kinds.most_common()), "tensors": len(reader.tensors),
            "bytes": size}


def _file_type(code) -> str | None:
    """llama.cpp's name of a GGUF's ``general.file_type`` (15: ``Q4_K_M``), or None where it has none."""
    from gguf import LlamaFileType

    try:
        return LlamaFileType(int(code)).name.removeprefix("MOSTLY_")
    except (TypeError, ValueError):
        return None


FORMAT = 2
"""The record's format: 2 since a pin's document token became the tokenizer's BOS and EOS."""


def finished(out: Path) -> dict | None:
    """The record of a finished import in ``out``, or None where there is none."""
    record = out / RECORD
    if not record.is_file():
        return None
    return read_json(record, f"remove {out} and import again")


def check_out(out: Path, sha256: str, force: bool) -> bool:
    """True when ``out`` already holds this GGUF's import (nothing to do); raises when ``out`` holds anything else,
    except an earlier import with ``force`` (replaced at the end)."""
    if not out.exists() or (out.is_dir() and not any(out.iterdir())):
        return False
    record = finished(out) if out.is_dir() else None
    if record is None:
        raise WeightsError(f"--out {out} exists and holds no imported model; writing the model would overwrite its "
                           "files: choose a new or empty folder")
    if record.get("format") != FORMAT:
        return False  # an import by an earlier toolformer (format 1: the release's BOS/EOS kept): written again
    if record.get("gguf", {}).get("sha256") == sha256 and not force:
        return True
    if not force:
        raise WeightsError(f"--out {out} holds the import of another GGUF (sha256 "
                           f"{str(record.get('gguf', {}).get('sha256'))[:12]}…); pass --force to replace it")
    return False


def convert(gguf_path: Path, out: Path, record: dict, force: bool = False) -> dict:
    """Write the model folder of ``gguf_path`` at ``out`` (see the module's docstring); ``record`` holds what the
    caller knows (source, licence, the GGUF's sha256 and the licence file to copy, ``licence_path``)."""
    licence_path = record.pop("licence_path", None)
    document = record.pop("document_token", "")
    staging = out.parent / f".{out.name}.tmp-{os.getpid()}"
    out.parent.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(staging, ignore_errors=True)
    started = time.monotonic()
    try:
        staging.mkdir()
        record.update(_write_model(gguf_path, staging, document))
        if licence_path is not None:
            shutil.copyfile(licence_path, staging / Path(licence_path).name)
            record["licence"]["file"] = Path(licence_path).name
        record["seconds"] = round(time.monotonic() - started, 1)
        atomic_write_text(staging / RECORD, json.dumps(record, indent=1, ensure_ascii=False) + "\n")
        _replace(staging, out)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return record


def _replace(staging: Path, out: Path) -> None:
    """``staging`` renamed to ``out``; an earlier import there (``--force``) moved aside first, removed after."""
    old = out.parent / f".{out.name}.old-{os.getpid()}"
    if out.exists() and any(out.iterdir()):
        os.replace(out, old)
    try:
        os.replace(staging, out)
    except BaseException:
        if old.exists() and not out.exists():
            os.replace(old, out)
        raise
    shutil.rmtree(old, ignore_errors=True)


def _write_model(gguf_path: Path, folder: Path, document: str = "") -> dict:
    """The model and tokenizer of ``gguf_path`` saved in ``folder``, checked by loading them back; what the record
    says of them. ``document``: the token made the tokenizer's BOS and EOS (:func:`_document_tokens`)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging

    logging.disable_progress_bar()  # the command prints one line; a stderr of bars would bury a refusal's
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # a file given here is read as it is; nothing is looked up
    try:
        tokenizer = AutoTokenizer.from_pretrained(gguf_path.parent, gguf_file=gguf_path.name)
        loaded = AutoModelForCausalLM.from_pretrained(gguf_path.parent, gguf_file=gguf_path.name, dtype=torch.float32)
    except (ValueError, KeyError, NotImplementedError) as e:
        raise WeightsError(f"{gguf_path}: transformers cannot read it as a causal LM ({e})") from None
    release = {"release_bos": tokenizer.bos_token, "release_eos": tokenizer.eos_token}
    _document_tokens(tokenizer, document, gguf_path)
    ids = torch.tensor([tokenizer(CHECK_TEXT).input_ids[:32]])  # (1, T)
    with torch.no_grad():
        want = loaded(ids).logits  # (1, T, V)
    model = _plain_copy(loaded)
    del loaded
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    back = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    with torch.no_grad():
        diff = float((back(ids).logits - want).abs().max())
    if not diff <= LOGIT_TOLERANCE:
        raise RuntimeError(f"{gguf_path}: the written folder's logits differ from the GGUF's by {diff:.3g} "
                           f"(tolerance {LOGIT_TOLERANCE}); nothing was kept")
    described = _describe(model, tokenizer, int(ids.shape[1]), diff)
    if document:
        described["tokenizer"].update(release)
    return described


def _document_tokens(tokenizer, document: str, gguf_path: Path) -> None:
    """Make ``document`` (one token of the vocabulary) the tokenizer's BOS and EOS: the token that separated
    documents in the family's pre-training, where the release names chat markers instead (an instruct model's
    ``<|im_start|>``, ``<|im_end|>``). The pipeline puts BOS before every document and stops generation at EOS
    (toolformer.lm.modeling); the chat template names its markers itself and is kept as it is."""
    if not document:
        return
    ids = tokenizer.convert_tokens_to_ids([document])
    if not ids or ids[0] is None or ids[0] == tokenizer.unk_token_id and document != tokenizer.unk_token:
        raise WeightsError(f"{gguf_path}: its vocabulary has no token {document!r} to separate documents")
    tokenizer.bos_token = document
    tokenizer.eos_token = document


def _describe(model, tokenizer, tokens: int, diff: float) -> dict:
    """What the record says of the written model, its tokenizer, the check and the versions that wrote them."""
    import gguf
    import torch
    import transformers

    cfg = model.config
    adds_bos = tokenizer("a").input_ids[:1] == [tokenizer.bos_token_id]
    return {
        "model": {"architecture": cfg.model_type, "class": type(model).__name__, "dtype": "float32",
                  "parameters": sum(p.numel() for p in model.parameters()), "vocab_size": cfg.vocab_size,
                  "layers": cfg.num_hidden_layers, "hidden": cfg.hidden_size},
        "tokenizer": {"size": len(tokenizer), "bos": tokenizer.bos_token, "eos": tokenizer.eos_token,
                      "pad": tokenizer.pad_token, "adds_bos": bool(adds_bos),
                      "chat_template": bool(tokenizer.chat_template)},
        "check": {"text": CHECK_TEXT, "tokens": tokens, "max_abs_logit_diff": diff},
        "versions": {"transformers": transformers.__version__, "torch": torch.__version__,
                     "gguf": getattr(gguf, "__version__", None) or _version("gguf")},
    }


def _plain_copy(loaded):
    """A model built from ``loaded``'s config, without its quantisation setting, holding its (dequantised) weights:
    one that ``save_pretrained`` writes."""
    import copy

    import torch
    from transformers import AutoModelForCausalLM

    config = copy.deepcopy(loaded.config)
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.load_state_dict(loaded.state_dict(), strict=True)
    model.generation_config = loaded.generation_config
    return model.eval()


def _version(package: str) -> str | None:
    from importlib import metadata

    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None
