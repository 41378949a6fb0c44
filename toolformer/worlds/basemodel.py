"""A world's base model: a small causal LM trained from scratch on the world's texts, with a tokenizer learnt on
them, and its record (``pretrain.json``: the key, steps, parameters and the sha256 of the weights, written last).

Shared by every world: the tokenizer's check (the call syntax and each digit one token), the model's shapes
(Llama or GPT-2), rows packed after BOS, the record read and checked before a model is used, a training begun in
place (the record removed first, so a folder without one is an unfinished training) and the shipped model used
when its record matches the config."""

from __future__ import annotations

import shutil
from pathlib import Path

from toolformer.rundir.files import IntegrityError, read_json
from toolformer.rundir.folder import check_format
from toolformer.worlds.config import PretrainConfig
from toolformer.worlds.files import sha256_file

MANIFEST = "pretrain.json"
CHECKED_FILES = ("config.json", "tokenizer.json")
"""Besides the weights, the files of a base model whose sha256 its record lists (``files``) and that are checked."""
WORLD_TOOLS = ("Calculator", "Calendar", "WikiSearch", "QA")  # the tools whose calls the world's texts contain
# Pieces that must be single tokens (docs/design.md): markers and tool names.
REQUIRED_TOKENS = ("[", " [", "]", "(", ")", " →", *WORLD_TOOLS)



def check_tokenizer(tokenizer, digits_apart: bool = False) -> None:
    """Every piece of :data:`REQUIRED_TOKENS` and every digit is one token, and a digit after a space is one
    more (``" "`` first with ``digits_apart``)."""
    from toolformer.lm.tokenizer import encode_piece

    spaced = [" "] if digits_apart else [f" {d}" for d in "123456789"]
    for piece in (*REQUIRED_TOKENS, *"0123456789", *spaced):
        ids = encode_piece(tokenizer, piece)  # as in a text, without a prefix space (pretrain.prefix_space)
        if len(ids) != 1:
            raise ValueError(f"tokenizer: {piece!r} is {len(ids)} tokens, not one; raise pretrain.vocab_size "
                             "or check that the world's texts contain it")


def build_model(tokenizer, pc):
    """A GPT-2-shaped (learned positions) or Llama-shaped (rotary positions) causal LM."""
    ids = dict(bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
               pad_token_id=tokenizer.pad_token_id)
    if pc.arch == "llama":
        from transformers import LlamaConfig, LlamaForCausalLM

        config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=pc.hidden, intermediate_size=pc.hidden * 8 // 3,
                             num_hidden_layers=pc.layers, num_attention_heads=pc.heads,
                             num_key_value_heads=pc.heads, max_position_embeddings=pc.positions,
                             tie_word_embeddings=True, **ids)
        return LlamaForCausalLM(config)
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(
        vocab_size=len(tokenizer), n_positions=pc.positions, n_embd=pc.hidden, n_layer=pc.layers, n_head=pc.heads,
        # No dropout: about one pass over fresh text, nothing to over-fit.
        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, **ids,
    )
    return GPT2LMHeadModel(config)


def start_model(pc):
    """The tokenizer and model of ``pc.init_from`` (the folder of a base model), checked against the config's
    shape before any text is packed."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    start = Path(pc.init_from)
    if not (start / "config.json").exists() or not (start / "tokenizer.json").exists():
        raise FileNotFoundError(f"pretrain.init_from: {start} holds no model and tokenizer (config.json, "
                                "tokenizer.json); give the folder of a base model")
    model = AutoModelForCausalLM.from_pretrained(start)
    for name, value in {"layers": model.config.num_hidden_layers, "hidden": model.config.hidden_size}.items():
        if value != getattr(pc, name):
            raise ValueError(f"pretrain.{name}: {getattr(pc, name)}, but the model of pretrain.init_from "
                             f"({pc.init_from}) has {value}")
    return AutoTokenizer.from_pretrained(start), model


def pack_with_bos(tokenizer, texts: list[str], seq_len: int, packing: str = "stream"):
    """Rows of ``seq_len`` tokens, each starting with BOS, every document
    preceded by BOS. ``stream``: the documents back to back, a row's first BOS
    added; ``whole``: no document that fits in a row is split across two."""
    import torch

    from toolformer.lm.rows import pack_sequences

    if packing == "whole":
        return pack_sequences(tokenizer, texts, seq_len, whole_documents=True)  # (N, T)
    rows = pack_sequences(tokenizer, texts, seq_len - 1)  # (N, T-1)
    bos = torch.full((rows.shape[0], 1), tokenizer.bos_token_id, dtype=rows.dtype)  # (N, 1)
    return torch.cat([bos, rows], dim=1)  # (N, T)


def read_record(path: Path, remedy: str) -> dict:
    """A base model's record (``pretrain.json``, which exists): a JSON object of this :data:`FORMAT`, else a
    ValueError (exit 2) naming the file and what to do (``remedy``)."""
    if not path.is_file():
        raise IntegrityError(f"{path}: not a file, so not a base model's record: {remedy}")
    record = read_json(path, remedy)
    check_format(record, path, remedy)
    return record


def check_weights(folder: Path, record: dict, record_path: Path, remedy: str) -> str:
    """The weights in ``folder`` (and its config and tokenizer, where the record lists them) are those its record
    lists, else a ValueError (exit 2) naming the file that differs; returns the weights' sha256."""
    files = record.get("files")
    listed: dict = files if isinstance(files, dict) else {}
    wanted = {"model.safetensors": record.get("model_sha256"),
              **{name: listed[name] for name in CHECKED_FILES if name in listed}}
    digests = {}
    for name, want in wanted.items():
        path = folder / name
        if not path.is_file():
            raise IntegrityError(f"{path}: missing, though {record_path} records a finished model: {remedy}")
        digests[name] = sha256_file(path)
        if digests[name] != want:
            raise IntegrityError(f"{path}: sha256 {digests[name][:12]}… is not the {str(want)[:12]}… recorded in "
                                 f"{record_path} (the file was replaced after training): {remedy}")
    return digests["model.safetensors"]


def begin_training(out: Path, force: bool) -> None:
    """Before a model is trained into ``out``: its record goes first (written last, it marks a finished model, and
    this one is about to be replaced in place). With ``force``, the checkpoints of the finished model go too (it
    trains again from step 0); an interrupted training's (no record) are kept and resumed from, forced or not
    (:func:`toolformer.lm.training.train_causal_lm` drops those of another key)."""
    record = out / MANIFEST
    if record.is_symlink() or (record.exists() and not record.is_file()):
        raise IntegrityError(f"{record}: not a file, so not a base model's record: remove it, then rerun")
    if record.exists():
        if force and (out / "checkpoints").exists():
            shutil.rmtree(out / "checkpoints")
        record.unlink()


def use_shipped(pc: PretrainConfig, key: str, out: Path) -> bool:
    """Copy the shipped base model (``pc.shipped``) into ``out`` when it was trained with this config (same key:
    its texts, settings and format; same steps), and its weights are the ones recorded."""
    src = Path(pc.shipped)
    record_path = src / MANIFEST
    if not pc.shipped or not record_path.exists():
        return False
    record = read_record(record_path, "restore the shipped base model (git checkout it), or set pretrain.shipped='' "
                         "to train here")
    if record.get("key") != key or record.get("steps") != pc.max_steps:
        print(f"pretrain: the shipped base model {src} was trained with another config "
              f"(key {str(record.get('key'))[:12]}, {record.get('steps')} steps; this config: {key[:12]}, "
              f"{pc.max_steps} steps): training instead")
        return False
    digest = check_weights(src, record, record_path, f"restore the file (git checkout {src}) or set "
                           "pretrain.shipped='' to train the base model")
    if out.resolve() != src.resolve():
        out.mkdir(parents=True, exist_ok=True)
        for f in sorted(src.iterdir(), key=lambda f: f.name == MANIFEST):  # the record last: it marks completion
            if f.is_file():
                shutil.copy2(f, out / f.name)
    print(f"pretrain: using the shipped base model {src} ({record['steps']:,} steps, {record['parameters']:,} "
          f"parameters, weights sha256 {digest[:12]}, trained in {record['wall_seconds']:.0f} s by "
          f"`{record['command']}`); --force or pretrain.shipped='' trains it here")
    return True
