"""What the training loop (:mod:`toolformer.lm.training`) writes: resumable checkpoints in
``output_dir/checkpoints/step-NNNNNNN`` (complete once their ``state.json`` is written; one that fails is
deleted) and the model saved whole, through a temporary folder whose files are then renamed into
``output_dir``, so a full disk leaves no partial file (it raises ENOSPC naming the folder)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import torch

from toolformer.rundir.files import atomic_write_text, disk_full, disk_full_error

CHECKPOINTS = "checkpoints"
CHECKPOINT_STATE = "state.json"  # written last into a checkpoint: its presence means complete
RUN_KEY = "run_key.json"
MODEL_TMP = ".model-tmp"  # save_pretrained writes here; the files are then renamed into the output folder


def checkpoint_dirs(output_dir: Path) -> list[Path]:
    """Complete checkpoints, oldest first."""
    root = output_dir / CHECKPOINTS
    found = [p for p in root.glob("step-*") if (p / CHECKPOINT_STATE).exists()] if root.exists() else []
    return sorted(found, key=lambda p: int(p.name.split("-")[1]))


def save_whole(accelerator, model, tokenizer, output_dir: Path, dtype: torch.dtype = torch.float32) -> None:
    """``save_pretrained`` in ``dtype`` (and the tokenizer) into a temporary folder, then
    its files renamed into ``output_dir``: a failed save leaves no partial file."""
    from toolformer.lm import lora

    main = accelerator.is_main_process
    tmp = output_dir / MODEL_TMP
    plain = accelerator.unwrap_model(model)
    try:
        if lora.is_adapted(plain):  # the adapter into tmp/adapter; the model with the adapters merged
            plain = lora.save_merged(plain, tmp, main, tokenizer)
            state = plain.state_dict()
        else:
            state = accelerator.get_state_dict(model)  # whole on the main process, also under FSDP
        state = {k: v.to(dtype) if v.is_floating_point() else v for k, v in state.items()}
        plain.save_pretrained(tmp, is_main_process=main, save_function=accelerator.save, state_dict=state)
        if main:
            config = json.loads((tmp / "config.json").read_text(encoding="utf-8"))
            config["dtype"] = str(dtype).removeprefix("torch.")  # what the weights are (the module was float32)
            (tmp / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n", encoding="utf-8")
            if tokenizer is not None:
                tokenizer.save_pretrained(tmp)
            for f in sorted(tmp.iterdir()):
                if f.is_dir() and (output_dir / f.name).is_dir():
                    shutil.rmtree(output_dir / f.name)  # a folder (the adapter) is replaced whole
                os.replace(f, output_dir / f.name)
    except Exception as e:
        if disk_full(e, tmp):
            raise disk_full_error(output_dir) from e
        raise
    finally:
        if main:
            shutil.rmtree(tmp, ignore_errors=True)


def save_checkpoint(accelerator, path: Path, saved: dict) -> None:
    """``accelerate.save_state`` into ``path`` and ``saved`` (step, history)
    last; a checkpoint that fails half way is deleted."""
    try:
        accelerator.save_state(str(path))
        accelerator.wait_for_everyone()
        if accelerator.is_main_process:
            atomic_write_text(path / CHECKPOINT_STATE, json.dumps(saved) + "\n")
    except Exception as e:
        full = disk_full(e, path)  # before the partial checkpoint is deleted: that frees the space
        if accelerator.is_main_process:
            shutil.rmtree(path, ignore_errors=True)  # an incomplete checkpoint is never resumed
        if full:
            raise disk_full_error(path) from e
        raise


def prepare_checkpoints(root: Path, resume: bool, run_key: str | None) -> None:
    """Delete checkpoints that must not be resumed; record the run key."""
    key_file = root / RUN_KEY
    if root.exists():
        old = json.loads(key_file.read_text()).get("run_key") if key_file.exists() else None
        if not resume or (run_key is not None and old != run_key):
            why = "resume=False" if not resume else "they belong to another data set or configuration"
            print(f"train: deleting checkpoints in {root} ({why})")
            shutil.rmtree(root)
    root.mkdir(parents=True, exist_ok=True)
    for partial in root.glob("step-*"):
        if not (partial / CHECKPOINT_STATE).exists():
            shutil.rmtree(partial)  # interrupted while being written
    atomic_write_text(key_file, json.dumps({"run_key": run_key}) + "\n")
