"""The published world's base model, trained from scratch on real text only (``toolformer published pretrain``).

1. A BPE tokenizer learnt on the world's texts (pre-training and annotation texts, the annotation texts with
   their gold calls inline so that the call markers and tool names are single tokens; one token per digit).
2. A small Llama-shaped causal LM (``pretrain`` section: its shape and steps), trained on ``pretrain.jsonl``
   packed into rows that each start with BOS; the best model by dev perplexity (held-out pre-training documents)
   is kept. No call syntax is in that text.

The folder gets ``pipeline_config.yaml`` (the config) and, last, ``pretrain.json``: the key (the sha256 of the
texts it read and the settings), parameters, steps, wall time and the sha256 of the weights (and of its config and
tokenizer). The repository ships the model ``configs/published.yaml`` makes (``data/published-base``): when its
record has this config's key and steps and its weights hash matches, it is copied (or, being the output folder,
used) instead of trained; ``--force`` trains anyway. A record is checked before the model is used: its format,
key and steps, the sha256 of its files; a damaged one is exit 2 naming it. Training removes the record first
(it comes back last), so a folder without one holds an unfinished training: a rerun, forced or not, resumes from
its last checkpoint, while ``--force`` on a finished model trains from step 0.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path

from toolformer.config.load import config_hash
from toolformer.lm.modeling import set_threads
from toolformer.published.config import PublishedWorldConfig, dump_published
from toolformer.published.world import FORMULA_SOURCES, build_world
from toolformer.rundir.files import atomic_write_text, read_jsonl
from toolformer.rundir.folder import FORMAT, versions
from toolformer.tools.calls import get_style, insert_calls
from toolformer.worlds.basemodel import (
    CHECKED_FILES,
    MANIFEST,
    WORLD_TOOLS,
    begin_training,
    build_model,
    check_tokenizer,
    check_weights,
    pack_with_bos,
    read_record,
    start_model,
    use_shipped,
)
from toolformer.worlds.files import sha256_file


def tokenizer_texts(root: Path) -> list[str]:
    """What the tokenizer learns from: the pre-training and annotation texts, the annotation texts with their
    gold calls inline, the tool names (weighted, so each becomes one token). The gold calls of the MAWPS and
    ASDiv documents (from their formulas, world format 3) are not inline: the shipped base model's tokenizer was
    learnt before them, and its texts, so its key, stay the same; the GSM8K calls inline are of the same syntax."""
    style = get_style("plain")
    corpus = read_jsonl(root / "corpus.jsonl", ("text",))
    golds = [[] if d.get("source") in FORMULA_SOURCES else d.get("gold_calls") or [] for d in corpus]
    inline = [insert_calls(d["text"], [(g["char_start"], style.render(g["tool"], g["input"] or "?", g["result"]))
                                       for g in gs]) for d, gs in zip(corpus, golds)]
    return [*(d["text"] for d in read_jsonl(root / "pretrain.jsonl", ("text",))), *(d["text"] for d in corpus),
            *inline, *[f" [{name}(" for name in WORLD_TOOLS] * 2000]


def pretrain_key(cfg: PublishedWorldConfig, root: Path) -> str:
    """What the base model depends on: the sha256 of its texts (pre-training, and the tokenizer's), the
    pre-training settings but its folders and schedule of checks, the seed and the format."""
    pc = {k: v for k, v in vars(cfg.pretrain).items()
          if k not in ("output_dir", "threads", "probe_items", "max_steps", "eval_every", "shipped", "report_to",
                       "init_from", "weights")}  # weights: a pretrained model instead, when set; nothing trained here
    texts = {"pretrain": sha256_file(root / "pretrain.jsonl"),
             "tokenizer": hashlib.sha256("\n".join(tokenizer_texts(root)).encode()).hexdigest()}
    if cfg.pretrain.init_from:  # the model continued, by the sha256 of its weights
        texts["init_from"] = sha256_file(Path(cfg.pretrain.init_from) / "model.safetensors")
    return config_hash({"format": FORMAT, "world": "published", "pretrain": pc, "seed": cfg.seed, "texts": texts})


def _train(cfg: PublishedWorldConfig, root: Path, out: Path, key: str, force: bool) -> tuple[dict, int, int]:
    """Tokenizer and model trained into ``out``; (the training's result, parameters, vocabulary size)."""
    from toolformer.lm.tokenizer import set_prefix_space, train_tokenizer
    from toolformer.lm.trainargs import TrainArgs
    from toolformer.lm.training import train_causal_lm
    from toolformer.stages import seed_everything

    pc = cfg.pretrain
    seed_everything(cfg.seed)
    model = None
    if pc.init_from:  # continue a base model (its tokenizer too)
        tokenizer, model = start_model(pc)
    else:
        tokenizer = train_tokenizer(tokenizer_texts(root), vocab_size=pc.vocab_size, digits_apart=pc.digits_apart)
    check_tokenizer(tokenizer, pc.digits_apart)
    if pc.prefix_space:
        set_prefix_space(tokenizer)
    docs = [d["text"] for d in read_jsonl(root / "pretrain.jsonl", ("text",))]
    n_dev = min(pc.dev_docs, len(docs) // 10)
    train_rows = pack_with_bos(tokenizer, docs[n_dev:], pc.seq_len, pc.packing)  # (N, T)
    dev_rows = pack_with_bos(tokenizer, docs[:n_dev], pc.seq_len, pc.packing) if n_dev else None
    model = model or build_model(tokenizer, pc)
    params = sum(p.numel() for p in model.parameters())
    passes = pc.max_steps * pc.batch_size / len(train_rows)
    print(f"pretrain: {params:,} parameters, vocabulary {len(tokenizer):,}, {len(train_rows):,} rows of "
          f"{pc.seq_len} tokens ({len(train_rows) * pc.seq_len:,} tokens; {passes:.2f} passes)")
    args = TrainArgs(learning_rate=pc.learning_rate, warmup_ratio=pc.warmup_ratio, schedule="cosine",
                     batch_size=pc.batch_size, micro_batch_size=pc.batch_size, max_steps=pc.max_steps,
                     eval_every=pc.eval_every, save_every=pc.eval_every, weight_decay=pc.weight_decay,
                     seed=cfg.seed, log_every=10, report_to=pc.report_to)
    begin_training(out, force)
    result = train_causal_lm(model, train_rows, dev_rows, args, out, tokenizer, run_key=key)
    return result, params, len(tokenizer)


def refuse_other_shipped(cfg: PublishedWorldConfig, key: str) -> None:
    """A shipped base model trained on other texts or settings is not silently replaced by an hour of training:
    a ValueError (exit 2) says so; ``--force`` trains one here."""
    record_path = Path(cfg.pretrain.shipped) / MANIFEST
    if not cfg.pretrain.shipped or not record_path.exists():
        return
    record = read_record(record_path, "restore the shipped base model (git checkout it), or set pretrain.shipped='' "
                         "to train here")
    if record.get("key") != key or record.get("steps") != cfg.pretrain.max_steps:
        raise ValueError(f"pretrain: the shipped base model {record_path.parent} was trained on other texts or "
                         f"settings (key {str(record.get('key'))[:12]}, {record.get('steps')} steps; this config: "
                         f"{key[:12]}, {cfg.pretrain.max_steps} steps): pass --force to train one here (about "
                         f"{record.get('wall_seconds', 0) / 60:.0f} min on 2 cores), or set pretrain.shipped=''")


def is_complete(cfg: PublishedWorldConfig, out: Path, key: str) -> bool:
    """Whether ``out`` (which has a record) holds the finished base model of this config: its record is of this
    format, key and steps, and its weights are those recorded. A record of another key or steps is refused
    (exit 2) rather than trained over, as is a damaged record or a replaced file; ``--force`` trains here."""
    manifest = out / MANIFEST
    again = ("rerun `toolformer published pretrain --force` (with this config) to train it here, or set "
             "pretrain.output_dir elsewhere")
    done = read_record(manifest, again)
    if done.get("key") != key or done.get("steps") != cfg.pretrain.max_steps:
        raise ValueError(f"pretrain.output_dir: {out} holds a base model trained on other texts or settings (key "
                         f"{str(done.get('key'))[:12]}, {done.get('steps')} steps; this config: {key[:12]}, "
                         f"{cfg.pretrain.max_steps} steps); pass --force to replace it, or set pretrain.output_dir "
                         "elsewhere")
    check_weights(out, done, manifest, again)
    print(f"pretrain: already complete ({manifest}), skipped; --force retrains")
    return True


def pretrain_base_model(cfg: PublishedWorldConfig, force: bool = False) -> Path:
    """The base model in ``cfg.base_model_dir()``: kept when complete with this key, copied from the shipped
    one when it matches, else trained."""
    root = build_world(cfg, quiet=True)
    pc = cfg.pretrain
    out = cfg.base_model_dir()
    key = pretrain_key(cfg, root)
    if not force and (out / MANIFEST).exists() and is_complete(cfg, out, key):
        return out
    if not force:
        refuse_other_shipped(cfg, key)
        if use_shipped(cfg.pretrain, key, out):
            return out
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    set_threads(pc.threads)
    t0 = time.perf_counter()
    result, params, vocab = _train(cfg, root, out, key, force)
    wall = round(time.perf_counter() - t0, 1)
    atomic_write_text(out / "pipeline_config.yaml", "# The config this base model was trained with.\n"
                      + dump_published(cfg))
    record = {"format": FORMAT, "key": key, "seed": cfg.seed, "world": str(root), "parameters": params,
              "arch": pc.arch, "model_sha256": sha256_file(out / "model.safetensors"),
              "files": {name: sha256_file(out / name) for name in CHECKED_FILES},
              "read": {name: sha256_file(root / name) for name in ("pretrain.jsonl", "corpus.jsonl")},
              "published_files": json.loads((root / "world.json").read_text()).get("files"),
              "vocab_size": vocab, "steps": result["steps"], "seq_len": pc.seq_len, "batch_size": pc.batch_size,
              "settings": {k: v for k, v in vars(pc).items() if k not in ("output_dir", "shipped")},
              "train": result, "wall_seconds": wall, "versions": versions(),
              "command": "toolformer published pretrain --config pipeline_config.yaml (this folder's)"}
    atomic_write_text(out / MANIFEST, json.dumps(record, indent=2, ensure_ascii=False) + "\n")
    print(f"pretrain: {params:,} parameters, {result['steps']:,} steps of {pc.batch_size}x{pc.seq_len} tokens in "
          f"{result['wall_seconds']:.0f} s ({result['tokens_per_second']:,.0f} tokens/s), best dev perplexity "
          f"{result['best_dev_perplexity']}; model in {out}")
    return out
