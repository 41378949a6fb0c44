"""``pretrain_base_model(cfg)``: the small world's base model, trained from scratch.

1. A BPE tokenizer (:func:`toolformer.lm.tokenizer.train_tokenizer`) on the
   pre-training and annotation texts, the annotation texts with their gold
   calls inline (the shape of the fine-tuning data, so `` [`` is one token) and
   the tool names: one token per digit; ``[``, ``]``, ``(``, ``)``, ``→`` and
   the tool names single tokens.
2. A tiny causal LM (width 128, 6 layers, 1.3M parameters by default, as shipped; cosine learning rate).
   Llama-shaped by default (rotary positions learned to copy sooner than
   GPT-2's learned positions). With the documents packed back to back,
   copying from a prefix appeared between steps 1,500 and 1,750 of 32x128
   tokens; packed whole (about a quarter of the tokens padding) it was still
   weak at 2,000.
3. :func:`toolformer.lm.training.train_causal_lm` on pretrain.jsonl packed into
   rows that each start with BOS, as every prompt and filter sequence does
   (``pretrain.packing``);
   the best model by dev perplexity (held-out pre-training documents) is kept.
4. The copy probe (:mod:`toolformer.smallworld.probe`), saved as ``probe.json``.

The folder gets ``pipeline_config.yaml`` (the resolved config) and, last,
``pretrain.json``: config key, parameters, steps, wall time, probe numbers and
the sha256 of the weights (checked, with the record, before the model is used). A rerun with the same config
returns at once; ``force`` retrains; a changed ``max_steps`` continues from the last checkpoint. Training removes
the record first, so a folder without one holds an unfinished training: a rerun, forced or not, resumes it.

Pre-training takes longer than the rest of the demo, so the repository ships
the base model ``configs/demo.yaml`` makes (``data/world-base``, 5.3 MB, and the
first phase it continues, ``data/world-base-start``): when its record has this
config's key and steps and the weights hash matches, it is copied instead of
trained (``pretrain.shipped``; ``--force`` trains anyway).
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path
from typing import Any

from toolformer.config.load import config_hash
from toolformer.lm.modeling import set_threads
from toolformer.rundir.files import atomic_write_text, read_jsonl
from toolformer.rundir.folder import FORMAT, fmt_pct, versions
from toolformer.smallworld.config import SmallWorldConfig, dump_smallworld
from toolformer.smallworld.generator import base_model_dir, ensure_world, world_paths
from toolformer.smallworld.probe import call_items, call_probe, copy_probe, probe_items, run_probe
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


def tokenizer_texts(paths: dict[str, Path], corpus_docs: int = 0) -> list[str]:
    """What the tokenizer learns from: pre-training and annotation texts (the
    first ``corpus_docs`` of corpus.jsonl, 0 = all: not the two-step documents
    appended after them), the annotation texts with their gold calls inline
    (not the ``aside`` ones of facts stated in passing, recorded after the
    shipped base model was trained), the tool names."""
    style = get_style("plain")
    corpus = read_jsonl(paths["corpus"], ("text",))[: corpus_docs or None]
    inline = [insert_calls(d["text"], [(g["char_start"], style.render(g["tool"], g["input"], g["result"]))
                                       for g in d["gold_calls"] if not g.get("aside")]) for d in corpus]
    return [*(d["text"] for d in read_jsonl(paths["pretrain"], ("text",))), *(d["text"] for d in corpus), *inline,
            *[f"[{name}(" for name in WORLD_TOOLS] * 1000]  # weighted, so each name becomes one token


def _probe_during_training(model, tokenizer, paths: dict, pc, seed: int, corpus_docs: int = 0):
    """A callback for the training loop: the copy probe every ``eval_every``
    steps, to see when copying appears (suddenly, after a plateau: docs/design.md)."""
    from tqdm import tqdm


    if not pc.probe_items:
        return None
    items = {tool: probe_items(paths["corpus"], tool, min(100, pc.probe_items), seed, corpus_docs)
             for tool in ("Calculator", "QA")}
    calls = call_items(paths, min(100, pc.probe_items), seed)

    def on_step(step: int, _record: dict) -> None:
        if step % pc.eval_every or step >= pc.max_steps:
            return
        model.eval()
        parts = []
        for tool, its in items.items():
            r = copy_probe(model, tokenizer, its)
            parts.append(f"{tool} {r['loss_correct']:.2f} / {r['loss_none']:.2f} / {r['loss_wrong']:.2f}")
        into = []
        for name, its in calls.items():
            r = call_probe(model, tokenizer, its)
            if r["items"]:
                into.append(f"{name} {r['loss_right']:.2f} / {r['loss_wrong']:.2f}, "
                            f"{fmt_pct(r['greedy_ok'], digits=0)}")
        model.train()
        tqdm.write(f"step {step}: copy probe, loss at the answer with the correct call / none / wrong result: "
                   + "; ".join(parts))
        tqdm.write(f"step {step}: call probe, argument loss right / corrupted, greedy call usable: "
                   + "; ".join(into))

    return on_step


def pretrain_key(cfg: SmallWorldConfig) -> str:
    """What the base model depends on: the texts it learns from (the sha256 of pretrain.jsonl, and of the
    tokenizer's texts when it trains its own tokenizer), the pre-training settings, the seed and the format.
    The world's settings count through the texts they write, so one that shapes only what pre-training does
    not read (the two-step documents after the corpus_docs others, the evaluation sets) leaves the key alone.
    A model to start from (``pretrain.init_from``) counts by the sha256 of its weights and tokenizer, not by its
    path. Writes the world first if it is not there."""
    pc = {k: v for k, v in vars(cfg.pretrain).items()
          if k not in ("output_dir", "threads", "probe_items", "max_steps", "eval_every", "shipped", "report_to")}
    ensure_world(cfg, quiet=True)
    paths = world_paths(cfg)
    texts = {"pretrain": sha256_file(paths["pretrain"])}
    if pc["init_from"]:
        start = Path(pc["init_from"])
        for name in ("model.safetensors", "tokenizer.json"):
            if not (start / name).exists():
                raise FileNotFoundError(f"pretrain.init_from: {start / name} does not exist; give the folder of a "
                                        "base model")
        pc["init_from"] = {name: "sha256:" + sha256_file(start / name)
                           for name in ("model.safetensors", "tokenizer.json")}
    else:
        texts["tokenizer"] = hashlib.sha256("\n".join(tokenizer_texts(paths, cfg.world.corpus_docs))
                                           .encode()).hexdigest()
    return config_hash({"format": FORMAT, "pretrain": pc, "seed": cfg.seed, "texts": texts})


def _tokenizer_and_model(cfg: SmallWorldConfig, paths: dict[str, Path]) -> tuple[Any, Any]:
    """The tokenizer, checked (trained on the world's texts, or that of ``pretrain.init_from``), and the model
    to start from (None: one is built from scratch)."""
    from toolformer.lm.tokenizer import set_prefix_space, train_tokenizer

    pc = cfg.pretrain
    if pc.init_from:
        tokenizer, model = start_model(pc)
    else:
        tokenizer = train_tokenizer(tokenizer_texts(paths, cfg.world.corpus_docs), vocab_size=pc.vocab_size,
                                    digits_apart=pc.digits_apart)
        model = None
    check_tokenizer(tokenizer, pc.digits_apart)
    if pc.prefix_space:
        set_prefix_space(tokenizer)
    return tokenizer, model


def _probe_best(cfg: SmallWorldConfig, out: Path, paths: dict[str, Path]) -> dict:
    """With ``pretrain.probe_items``, the probes of the best model saved in ``out`` (written to its probe.json);
    else {}."""
    pc = cfg.pretrain
    if not pc.probe_items:
        return {}
    from transformers import AutoModelForCausalLM, AutoTokenizer

    best = AutoModelForCausalLM.from_pretrained(out).eval()
    probe = run_probe(best, AutoTokenizer.from_pretrained(out), paths, pc.probe_items, seed=cfg.seed,
                      corpus_docs=cfg.world.corpus_docs)
    atomic_write_text(out / "probe.json", json.dumps(probe, indent=2, ensure_ascii=False) + "\n")
    return probe


def _record(cfg: SmallWorldConfig, key: str, out: Path, paths: dict[str, Path], vocab_size: int, params: int,
            result: dict, wall: float, probe: dict) -> dict:
    """The base model's manifest (``pretrain.json``): its key, the hashes of its weights and corpus, the
    training's result, the probes and the versions."""
    pc = cfg.pretrain
    weights = sha256_file(out / "model.safetensors")
    return {"format": FORMAT, "key": key, "seed": cfg.seed, "world": str(paths["summary"].parent), "parameters": params,
            "arch": pc.arch, "model_sha256": weights, "files": {n: sha256_file(out / n) for n in CHECKED_FILES},
            "pretrain_corpus_sha256": sha256_file(paths["pretrain"]),
            "vocab_size": vocab_size, "steps": result["steps"], "seq_len": pc.seq_len,
            "batch_size": pc.batch_size, "train": result, "wall_seconds": wall,
            "init_from": ({"path": pc.init_from,
                           "model_sha256": sha256_file(Path(pc.init_from) / "model.safetensors")}
                          if pc.init_from else None),
            "probe": {k: {m: v for m, v in r.items() if m != "examples"} for k, r in probe.items()},
            "versions": versions(),
            "command": "toolformer world pretrain --config pipeline_config.yaml (this folder's)"}


def pretrain_base_model(cfg: SmallWorldConfig, force: bool = False) -> Path:
    """Train the tokenizer and base model of the small world; return the model folder."""
    pc = cfg.pretrain
    out = base_model_dir(cfg)
    key = pretrain_key(cfg)
    manifest = out / MANIFEST
    if not force and manifest.exists():
        again = "rerun with --force to train it again"
        done = read_record(manifest, again)
        if done.get("key") == key and done.get("steps") == pc.max_steps:
            check_weights(out, done, manifest, again)
            print(f"pretrain: already complete ({manifest}), skipped; --force retrains")
            return out
    if not force and use_shipped(cfg.pretrain, key, out):
        return out
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")  # its threads fight torch's for 2 cores
    set_threads(pc.threads)
    from toolformer.lm.rows import IGNORE_INDEX
    from toolformer.lm.trainargs import TrainArgs
    from toolformer.lm.training import train_causal_lm
    from toolformer.stages import seed_everything

    ensure_world(cfg)
    paths = world_paths(cfg)
    seed_everything(cfg.seed)
    t0 = time.perf_counter()
    tokenizer, model = _tokenizer_and_model(cfg, paths)
    docs = [d["text"] for d in read_jsonl(paths["pretrain"], ("text",))]
    n_dev = min(pc.dev_docs, len(docs) // 10)
    train_rows = pack_with_bos(tokenizer, docs[n_dev:], pc.seq_len, pc.packing)  # (N, T)
    dev_rows = pack_with_bos(tokenizer, docs[:n_dev], pc.seq_len, pc.packing) if n_dev else None
    model = model or build_model(tokenizer, pc)
    params = sum(p.numel() for p in model.parameters())
    padding = float((train_rows == IGNORE_INDEX).float().mean())
    print(f"pretrain: {params:,} parameters, vocabulary {len(tokenizer):,}, {len(train_rows):,} rows of {pc.seq_len} "
          f"training tokens ({padding:.1%} of them padding, packing {pc.packing})")
    args = TrainArgs(learning_rate=pc.learning_rate, warmup_ratio=pc.warmup_ratio, schedule="cosine",
                     batch_size=pc.batch_size, micro_batch_size=pc.batch_size, max_steps=pc.max_steps,
                     eval_every=pc.eval_every, save_every=pc.eval_every, weight_decay=pc.weight_decay,
                     seed=cfg.seed, log_every=10, report_to=pc.report_to)
    begin_training(out, force)
    result = train_causal_lm(model, train_rows, dev_rows, args, out, tokenizer, run_key=key,
                             on_step=_probe_during_training(model, tokenizer, paths, pc, cfg.seed,
                                                            cfg.world.corpus_docs))

    probe = _probe_best(cfg, out, paths)
    wall = round(time.perf_counter() - t0, 1)
    atomic_write_text(out / "pipeline_config.yaml", "# The config this base model was trained with.\n"
                      + dump_smallworld(cfg))
    record = _record(cfg, key, out, paths, len(tokenizer), params, result, wall, probe)
    atomic_write_text(manifest, json.dumps(record, indent=2, ensure_ascii=False) + "\n")
    calc = probe.get("Calculator", {})
    copy = (f"; copy probe (Calculator) loss {calc['loss_correct']:.2f} with the call vs {calc['loss_none']:.2f} "
            f"without" if calc.get("items") else "")
    print(f"pretrain: {params:,} parameters, {result['steps']:,} steps of {pc.batch_size}x{pc.seq_len} tokens in "
          f"{result['wall_seconds']:.0f} s ({result['tokens_per_second']:,.0f} tokens/s), best dev perplexity "
          f"{result['best_dev_perplexity']}{copy}; model in {out}")
    return out
