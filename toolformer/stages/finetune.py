"""Stage ``finetune``: the ordinary causal-LM objective on the augmented data set C*.

Reads ``RUN_DIR/build/dataset`` (or ``finetune.dataset``: any ``save_to_disk``
folder with a ``text`` column, e.g. the same documents without calls for a
control model), holds out ``finetune.dev_ratio`` of the documents for dev
perplexity, packs the rest into rows of ``finetune.max_length`` tokens and
trains with :func:`toolformer.lm.training.train_causal_lm` (the paper: batch 128,
lr 1e-5, 10 % linear warm-up, at most 2k steps, best model by dev perplexity).

Writes the model with ``save_pretrained`` (model and tokenizer, call tokens
included for the special-token style) into ``finetune.output_dir`` or
``RUN_DIR/model``, with ``toolformer.json`` (the call style, the tools with
their settings and data, the decoding rule: :mod:`toolformer.lm.modelfolder`;
tool data up to ``finetune.tool_data_max_mb`` copied into ``tools/``), a
model card ``README.md`` and ``trainer_state.json``;
resumable checkpoints in ``<model>/checkpoints``; the manifest in
``RUN_DIR/finetune`` last. Under ``accelerate launch --num_processes N`` each
process runs this function; only the main one writes the stage's files. An
output folder that is, or lies inside, ``model.path`` (or another folder the
fine-tune reads) is refused before anything is written.
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch

from toolformer.config.load import config_hash, dump_yaml
from toolformer.config.schema import PipelineConfig
from toolformer.lm.modelfolder import SPEC_FILE, card_front_matter, card_section, spec_summary, write_spec
from toolformer.lm.rows import pack_sequences
from toolformer.lm.trainargs import TrainArgs
from toolformer.lm.training import train_causal_lm
from toolformer.rundir.files import atomic_write_text
from toolformer.rundir.folder import StageFolder
from toolformer.rundir.guard import check_finetune_output
from toolformer.rundir.parallel import use_cpu
from toolformer.stages import StageResult, seed_everything, stage_hash, stage_options, start

# Fields that may change between runs without invalidating the checkpoints:
# raising max_steps continues training, the others only change bookkeeping.
RESUMABLE_CHANGES = ("max_steps", "eval_every", "save_every", "keep_checkpoints", "log_every", "output_dir",
                     "tool_data_max_mb")


def dataset_dir(cfg: PipelineConfig) -> Path:
    return Path(cfg.finetune.dataset) if cfg.finetune.dataset else Path(cfg.run_dir) / "build" / "dataset"


def model_dir(cfg: PipelineConfig) -> Path:
    return Path(cfg.finetune.output_dir) if cfg.finetune.output_dir else Path(cfg.run_dir) / "model"


def load_texts(path: Path) -> tuple[list[str], list[bool]]:
    """Texts and `augmented` flags (all false when the column is absent)."""
    from datasets import load_from_disk

    if not path.exists():
        raise FileNotFoundError(f"{path}: no data set; run the build stage first or set finetune.dataset")
    try:
        ds = load_from_disk(str(path))
    except IndexError:  # datasets cannot reload a data set saved with no rows
        raise ValueError(f"{path}: data set is empty (did the filter keep any call?)") from None
    if "text" not in ds.column_names:
        raise ValueError(f"{path}: data set has no 'text' column (columns: {', '.join(ds.column_names)})")
    if len(ds) == 0:
        raise ValueError(f"{path}: data set is empty (did the filter keep any call?)")
    texts = ds["text"]
    augmented = ds["augmented"] if "augmented" in ds.column_names else [False] * len(texts)
    return list(texts), list(augmented)


def texts_hash(texts: list[str]) -> str:
    h = hashlib.sha256()
    for t in texts:
        h.update(t.encode("utf-8"))
        h.update(b"\0")
    return h.hexdigest()[:16]


def split_dev(n: int, dev_ratio: float, seed: int) -> tuple[list[int], list[int]]:
    """Document indices (train, dev): ``dev_ratio`` of them, drawn with the seed;
    at least one when the ratio is positive and there are two documents or more."""
    n_dev = round(dev_ratio * n)
    if dev_ratio > 0 and n >= 2:
        n_dev = min(max(1, n_dev), n - 1)
    dev = set(random.Random(seed).sample(range(n), n_dev))
    return [i for i in range(n) if i not in dev], sorted(dev)


def run_key(cfg: PipelineConfig, data_hash: str) -> str:
    """What checkpoints depend on: model, call format, data and hyper-parameters."""
    f = {k: v for k, v in asdict(cfg.finetune).items() if k not in RESUMABLE_CHANGES}
    model = {k: getattr(cfg.model, k) for k in ("path", "tokenizer", "max_length")}  # not threads or device
    return config_hash({"model": model, "calls": asdict(cfg.calls), "finetune": f,
                        "seed": cfg.seed, "data": data_hash})


def model_card(cfg: PipelineConfig, data: dict, metrics: dict, spec: dict) -> str:
    best = metrics["best_dev_perplexity"]
    result = (f"dev perplexity {best:.3f} (best at step {metrics['best_step']})" if best is not None
              else "no dev set; the model of the last step")
    speed = f"{metrics['wall_seconds']} s at {metrics['tokens_per_second']:,.0f} tokens/s"
    return f"""{card_front_matter(cfg.model.path, cfg.corpus.path)}# Toolformer fine-tune of `{cfg.model.path}`

Fine-tuned with the causal-LM objective on a data set with API calls inline
(Schick et al., 2023), by `toolformer finetune`. Calls are written in the
`{cfg.calls.style}` style; at inference a call stops at the result marker, the
tool runs and its result is inserted (`toolformer generate --model {model_dir(cfg)} "..."`,
`toolformer chat --model {model_dir(cfg)}`).

## Data

- data set: `{data['dataset']}`
- documents: {data['documents']:,} ({data['augmented']:,} with calls), {data['dev_documents']:,} held out for dev
- packed rows of {data['seq_len']} tokens: {data['train_rows']:,} train, {data['dev_rows']:,} dev

## Result

{metrics['steps']} steps of {metrics['effective_batch_size']} sequences; {result};
final training loss {metrics['train_loss']:.4f}; {speed}
on {metrics['processes']} process(es).

## Config (`finetune` section)

```yaml
{dump_yaml(cfg.finetune).rstrip()}
```

{card_section(spec)}
Load with `toolformer.ToolformerModel.from_pretrained(...)` (model, tokenizer and tools), or the model alone with
`AutoModelForCausalLM.from_pretrained(...)` and `AutoTokenizer.from_pretrained(...)`, on this folder.
"""


def training_record(cfg: PipelineConfig) -> dict:
    """How the model was tuned, for its toolformer.json: the method, and for LoRA its settings and adapter."""
    fc = cfg.finetune
    if fc.method == "full":
        return {"method": "full"}
    from toolformer.lm.lora import ADAPTER

    return {"method": fc.method, "lora_rank": fc.lora_rank, "lora_alpha": fc.lora_alpha,
            "lora_dropout": fc.lora_dropout, "lora_targets": list(fc.lora_targets) or "every linear layer",
            "adapter": ADAPTER, "merged": True}


def _check_method_here(cfg: PipelineConfig, state) -> None:
    """A ValueError in one line when ``finetune.method`` cannot run on this machine (QLoRA without bitsandbytes,
    a GPU or a single process), before any model is loaded."""
    if cfg.finetune.method != "qlora":
        return
    from toolformer.lm.lora import qlora_unavailable

    why = qlora_unavailable()
    if not why and state.device.type != "cuda":
        why = f"method: qlora needs a CUDA GPU and this run trains on {state.device.type}"
    if not why and state.num_processes > 1:
        why = f"method: qlora trains in one process on one GPU; this launch has {state.num_processes}"
    if why:
        raise ValueError(f"finetune.{why}")


def _load_for_training(cfg: PipelineConfig, state) -> tuple[Any, Any, int]:
    """The model (float32, on the CPU: the training loop moves it to this process's device), its tokenizer and
    the row length; on a CPU the processes share its cores."""
    from toolformer.lm.modeling import (
        load_model,
        load_tokenizer,
        model_window,
        set_threads,
    )
    from toolformer.tools.calls import get_style

    if state.device.type == "cpu":
        # Several processes on one machine share its cores; one alone follows the load.
        set_threads(cfg.model.threads, share=state.num_processes)
    tokenizer = load_tokenizer(cfg.model.tokenizer or cfg.model.path, get_style(cfg.calls.style))
    if cfg.finetune.method == "qlora":  # 4 bits, on this process's GPU (checked: _check_method_here)
        from toolformer.lm.lora import load_4bit

        model = load_4bit(cfg.model.path, state.device, tokenizer, cfg.finetune.gradient_checkpointing)
    else:  # float32 on the CPU; the training loop moves it to this process's device
        model = load_model(cfg.model.path, torch.device("cpu"), torch.float32, tokenizer)
    seq_len = min(cfg.finetune.max_length, model_window(model))
    if getattr(tokenizer, "call_rows_note", "") and state.is_main_process:
        print(f"finetune: {tokenizer.call_rows_note}")
    if cfg.finetune.method != "full":
        from toolformer.lm import lora

        model = lora.wrap(model, cfg.finetune, tokenizer, get_style(cfg.calls.style))
        trained, total = lora.trainable_share(model)
        if state.is_main_process:
            layers = ", ".join(sorted(model.peft_config["default"].target_modules))
            kind = "QLoRA (4-bit base)" if cfg.finetune.method == "qlora" else "LoRA"
            print(f"finetune: {kind} rank {cfg.finetune.lora_rank} on {layers}: {trained:,} of {total:,} parameters "
                  f"trained ({trained / total:.2%})")
    return model, tokenizer, seq_len


def _pack_rows(cfg: PipelineConfig, tokenizer, texts: list[str], train_idx: list[int], dev_idx: list[int],
               seq_len: int) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The training rows (N, T) and the dev rows (M, T; None without dev documents), packed from the documents
    of each part."""
    whole = cfg.finetune.whole_documents
    train_rows = pack_sequences(tokenizer, [texts[i] for i in train_idx], seq_len, whole_documents=whole)  # (N, T)
    dev_rows = (pack_sequences(tokenizer, [texts[i] for i in dev_idx], seq_len, whole_documents=whole)
                if dev_idx else None)  # (M, T)
    return train_rows, dev_rows


def run_stage(cfg: PipelineConfig, force: bool = False, **options: Any) -> StageResult:
    """Fine-tune ``model.path`` on the data set and save it with its tools (see the module docstring); the
    stage takes no ``options``."""
    from accelerate import PartialState

    stage_options("finetune", options)
    check_finetune_output(cfg)  # never save over the model (or data) being read
    state = PartialState(cpu=use_cpu())
    _check_method_here(cfg, state)
    stage = StageFolder(cfg.run_dir, "finetune")
    data_path = dataset_dir(cfg)
    if not cfg.finetune.dataset:
        StageFolder(cfg.run_dir, "build").require(" (finetune reads its data set)")
    texts, augmented = load_texts(data_path)
    data_hash = texts_hash(texts)
    # A finished run on other data, or whose model folder is gone, is stale
    # even if the config is unchanged.
    previous = stage.manifest()
    if previous is not None and (previous.get("data_hash") != data_hash
                                 or not (model_dir(cfg) / "config.json").exists()):
        force = True
    # Every process decides from the same files before the main one changes them.
    skip = not force and stage.is_complete(stage_hash(cfg, "finetune"))
    state.wait_for_everyone()
    if state.is_main_process:
        run = start(cfg, "finetune", force)
    else:
        seed_everything(cfg.seed)
    state.wait_for_everyone()
    if skip:
        return StageResult("finetune", True, stage.manifest())

    model, tokenizer, seq_len = _load_for_training(cfg, state)
    train_idx, dev_idx = split_dev(len(texts), cfg.finetune.dev_ratio, cfg.seed)
    train_rows, dev_rows = _pack_rows(cfg, tokenizer, texts, train_idx, dev_idx, seq_len)
    out = model_dir(cfg)
    args = TrainArgs.from_config(cfg.finetune, seed=cfg.seed)
    metrics = train_causal_lm(model, train_rows, dev_rows, args, out, tokenizer=tokenizer, resume=not force,
                              run_key=run_key(cfg, data_hash))

    if not state.is_main_process:
        return StageResult("finetune", False, None)
    data = {
        "dataset": str(data_path), "documents": len(texts), "augmented": sum(map(bool, augmented)),
        "dev_documents": len(dev_idx), "seq_len": seq_len, "train_rows": len(train_rows),
        "dev_rows": 0 if dev_rows is None else len(dev_rows),
        "train_tokens": int((train_rows >= 0).sum()),
    }
    spec = write_spec(cfg, out, cfg.finetune.tool_data_max_mb, base_model=cfg.model.path, tokenizer=tokenizer,
                      training=training_record(cfg))
    atomic_write_text(out / "README.md", model_card(cfg, data, metrics, spec))
    print(f"finetune: {out / SPEC_FILE}: {spec_summary(spec)}")
    run.stage.finish(run.hash, cfg.seed, {**data, **metrics}, model=str(out), base_model=cfg.model.path,
                     data_hash=data_hash)
    best = metrics["best_dev_perplexity"]
    result = f"dev perplexity {best:.2f} (best at step {metrics['best_step']})" if best is not None else "no dev set"
    print(f"finetune: {metrics['steps']:,} steps, {result}, model in {out}")
    return run.result()
