"""Weight-space ensembles of a tuned model and the model it was tuned from.

``finetune.merge`` (alpha) makes the saved model ``base + alpha * (tuned - base)``:
alpha 1 is the tuned model as trained (the paper), alpha 0 the base model.
Interpolating the weights of a fine-tuned model with its start keeps more of
what the start did on inputs unlike the fine-tuning data (Wortsman et al.,
2022, "Robust fine-tuning of zero-shot models", WiSE-FT). On the small world
the tuned model learns when to call from the kept calls of the training
phrasings and, with it, their operations and word order; the base model's
copying into a call generalises to held-out phrasings better
(docs/lab-notes.md).

A merged model folder keeps the weights as trained in ``tuned/`` (config and
weight files) and records the merge in ``merge.json``: alpha, the base model,
and the sha256 of the tuned and the merged weight files. That record makes the
merge safe to rerun: weights in the folder that match the merged digest are a
merge already made (the tuned ones are read from ``tuned/``), any others are
freshly trained and become the new ``tuned/``. Alpha 1 puts the trained
weights back and removes both.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

import torch

from toolformer.config.schema import check_merge
from toolformer.run import stops
from toolformer.run.folder import atomic_write_text

TUNED_DIR = "tuned"
MERGE_FILE = "merge.json"
MERGE_TMP = ".merge-tmp"
WEIGHT_PATTERNS = ("*.safetensors", "*.safetensors.index.json", "pytorch_model*.bin", "pytorch_model*.bin.index.json")


def weight_files(folder: Path) -> list[Path]:
    """The weight files (and shard indexes) directly in ``folder``, sorted by name."""
    found = {p for pattern in WEIGHT_PATTERNS for p in folder.glob(pattern) if p.is_file()}
    return sorted(found, key=lambda p: p.name)


def weights_digest(folder: Path) -> str:
    """sha256 over the names and bytes of ``folder``'s weight files."""
    h = hashlib.sha256()
    files = weight_files(folder)
    if not files:
        raise FileNotFoundError(f"{folder}: no weight files (*.safetensors or pytorch_model*.bin)")
    for f in files:
        h.update(f.name.encode() + b"\0")
        with f.open("rb") as fh:
            for block in iter(lambda: fh.read(1 << 24), b""):
                h.update(block)
    return h.hexdigest()


@torch.no_grad()
def interpolate_(tuned, base, alpha: float) -> int:
    """``tuned``'s parameters become ``base + alpha * (tuned - base)`` in place; returns how many tensors.

    The two models must have the same parameter names and shapes (the base
    model is loaded with the tuned model's tokenizer, so call tokens added to
    the vocabulary are rows of both)."""
    base_params = dict(base.named_parameters())
    tuned_params = dict(tuned.named_parameters())
    missing = sorted(set(tuned_params) ^ set(base_params))
    if missing:
        raise ValueError(f"merge: the tuned and the base model have different parameters: {', '.join(missing[:5])}")
    for name, p in tuned_params.items():
        b = base_params[name]
        if b.shape != p.shape:
            raise ValueError(f"merge: parameter {name} has shape {tuple(p.shape)} in the tuned model and "
                             f"{tuple(b.shape)} in the base model")
        p.copy_(torch.lerp(b.to(torch.float32), p.to(torch.float32), alpha).to(p.dtype))
    return len(tuned_params)


def _replace_weights(src: Path, dest: Path) -> None:
    """Make ``dest``'s weight files those of ``src`` (moved), removing weight files ``src`` does not have."""
    new = weight_files(src)
    names = {f.name for f in new}
    with stops.deferred():
        for f in new:
            os.replace(f, dest / f.name)
        for old in weight_files(dest):
            if old.name not in names:
                old.unlink()


def _copy_tuned(folder: Path) -> None:
    """``folder/tuned``: the config and weight files of ``folder`` as they are (the trained model)."""
    tmp = folder / (TUNED_DIR + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    for f in [folder / "config.json", *weight_files(folder)]:
        shutil.copy2(f, tmp / f.name)
    with stops.deferred():
        shutil.rmtree(folder / TUNED_DIR, ignore_errors=True)
        os.replace(tmp, folder / TUNED_DIR)


def _restore_tuned(folder: Path) -> None:
    """The folder's weight files become those of ``folder/tuned`` again."""
    tmp = folder / MERGE_TMP
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    for f in weight_files(folder / TUNED_DIR):
        shutil.copy2(f, tmp / f.name)
    _replace_weights(tmp, folder)
    shutil.rmtree(tmp, ignore_errors=True)


def read_record(folder: Path) -> dict | None:
    path = folder / MERGE_FILE
    if not path.exists():
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}: not valid JSON ({e}); delete it and {TUNED_DIR}/ only if the folder's weights "
                         f"are the trained ones") from e


def _merge_digests(record: dict) -> set[str]:
    """The digests of every merge a record's tuned weights have been saved as."""
    return {d for d in [record.get("merged_sha256"), *record.get("earlier_merges_sha256", [])] if d}


def merge_folder(folder: str | Path, base_path: str, alpha: float, tokenizer=None,
                 dtype: torch.dtype = torch.float32) -> dict | None:
    """Make the model in ``folder`` ``base + alpha * (tuned - base)``; returns the record (None for alpha 1).

    ``base_path`` is the model the folder was tuned from (a folder or hub id);
    ``dtype`` the dtype the merged weights are saved in."""
    from toolformer.lm.modeling import load_model

    check_merge(alpha, "finetune.merge")
    folder = Path(folder)
    record = read_record(folder)
    current = weights_digest(folder)
    merged_before = record is not None and current in _merge_digests(record)
    if merged_before and not (folder / TUNED_DIR / "config.json").exists():
        raise FileNotFoundError(f"{folder / TUNED_DIR}: missing, but {folder / MERGE_FILE} says the folder's weights "
                                f"are a merge: the trained weights are lost; fine-tune again")
    if alpha == 1.0:
        if merged_before:
            _restore_tuned(folder)
        (folder / MERGE_FILE).unlink(missing_ok=True)
        shutil.rmtree(folder / TUNED_DIR, ignore_errors=True)
        return None
    if not merged_before:
        _copy_tuned(folder)  # freshly trained weights: they are the tuned model from now on
    tuned_digest = record["tuned_sha256"] if record is not None and merged_before else current
    if (record is not None and merged_before and current == record.get("merged_sha256")
            and record.get("alpha") == alpha and record.get("base") == base_path):
        return record  # this merge is what the folder holds
    tuned = load_model(str(folder / TUNED_DIR), torch.device("cpu"), torch.float32, tokenizer)
    base = load_model(base_path, torch.device("cpu"), torch.float32, tokenizer)
    n = interpolate_(tuned, base, alpha)
    del base
    tmp = folder / MERGE_TMP
    shutil.rmtree(tmp, ignore_errors=True)
    state = {k: v.to(dtype) if v.is_floating_point() else v for k, v in tuned.state_dict().items()}
    tuned.save_pretrained(tmp, state_dict=state)
    merged = weights_digest(tmp)
    earlier = sorted(_merge_digests(record) - {merged}) if record and record.get("tuned_sha256") == tuned_digest else []
    record = {"alpha": alpha, "base": base_path, "tensors": n, "tuned_sha256": tuned_digest,
              "merged_sha256": merged, "earlier_merges_sha256": earlier}
    # The record first, with the earlier merges of the same tuned weights: weights in the folder that match no
    # digest of it are taken for freshly trained ones, so a stop between the two writes loses nothing.
    atomic_write_text(folder / MERGE_FILE, json.dumps(record, indent=2) + "\n")
    _replace_weights(tmp, folder)
    shutil.rmtree(tmp, ignore_errors=True)
    return record
