"""Preflight, the work: how many documents the corpus holds, what the config makes of them (positions,
candidates, filter rows and tokens, fine-tuning tokens) and, from a timed forward and a timed generate on this
device, the hours per stage.

:func:`estimate_work` is a pure function of the scanned documents' statistics, the corpus size and the
timings, so every count it gives scales with the corpus.
"""

from __future__ import annotations

import time
from pathlib import Path

import torch

from toolformer.config.schema import PipelineConfig
from toolformer.corpus.reader import SUFFIXES, iter_corpus

COUNT_BYTES = 64 * 2**20  # a local corpus up to this size is counted; a larger one is estimated from its size
TIMING_TOKENS = {"cpu": 4096, "cuda": 16384}  # tokens of the timed forward (at most filter.batch_tokens)
GENERATE_ROWS = {"cpu": 32, "cuda": 256}  # rows of the timed generate at most (a CPU's time grows with them)
GENERATE_STEPS = 8  # its decoding steps (at most sample.max_new_tokens)
BACKWARD = 3.0  # a training step costs about three forwards (forward, then backward at twice the cost)
CALL_TOKENS = 24  # tokens of a call as the filter's prefix, when no probe measured them


def _corpus_files(path: Path) -> list[Path]:
    if path.is_file():
        return [path]
    return sorted(p for p in path.iterdir() if p.is_file() and not p.name.startswith(".")
                  and any(p.name.lower().endswith(s) for s in SUFFIXES))


def _bytes_per_document(files: list[Path], n: int, text_bytes: int) -> tuple[float, str]:
    """Mean bytes per document of a corpus file: of its first ``n`` lines when it is plain JSON Lines or text,
    else of the first documents' text alone (rough: the format's own bytes are left out)."""
    first = files[0]
    if first.name.lower().endswith((".jsonl", ".txt")):
        sizes = []
        with first.open("rb") as f:
            for line in f:
                if line.strip():
                    sizes.append(len(line))
                if len(sizes) == n:
                    break
        if sizes:
            return sum(sizes) / len(sizes), f"the first {len(sizes):,} lines"
    return text_bytes / max(1, n), f"the text of the first {n:,} documents (rough)"


def count_documents(cfg: PipelineConfig, scanned: int, exhausted: bool, text_bytes: int) -> tuple[int | None, str]:
    """(documents in the corpus, how that number was found); None when it cannot be known cheaply (a hub data
    set without ``corpus.max_docs``). A local corpus of at most :data:`COUNT_BYTES` is counted, a larger one
    estimated from its size and the first documents; ``corpus.max_docs`` caps either."""
    cap = cfg.corpus.max_docs
    if exhausted:
        return scanned, f"counted: the corpus ends after {scanned:,} documents"
    path = Path(cfg.corpus.path)
    n: int | None = None
    if path.is_dir() and ((path / "state.json").exists() or (path / "dataset_dict.json").exists()):
        import datasets

        ds = datasets.load_from_disk(str(path))
        ds = ds[cfg.corpus.split] if isinstance(ds, datasets.DatasetDict) else ds
        n, how = ds.num_rows, "the data set's rows"
    elif path.exists():
        files = _corpus_files(path)
        size = sum(f.stat().st_size for f in files)
        if size <= COUNT_BYTES:
            n, how = sum(1 for _ in iter_corpus(cfg.corpus, [])), "counted"
        else:
            per_doc, basis = _bytes_per_document(files, scanned, text_bytes)
            n, how = int(size / per_doc), f"estimated from the size ({size / 1e6:,.0f} MB) and {basis}"
    else:
        how = "unknown (a hub data set: set corpus.max_docs to bound it)"
    if cap and (n is None or n > cap):
        return cap, f"corpus.max_docs ({how} otherwise)"
    return n, how


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _best_of_two(device: torch.device, work) -> float:
    """The shorter wall time of two runs of ``work()`` (the first also warms up)."""
    best = float("inf")
    for _ in range(2):
        _sync(device)
        t0 = time.perf_counter()
        work()
        _sync(device)
        best = min(best, time.perf_counter() - t0)
    return best


def machine_load() -> dict:
    """The CPUs this process may use and the machine's load average over a minute (None where unknown): a
    shared machine's timings are slower than the run's will be on a machine of its own."""
    import os

    from toolformer.lm.threads import usable_cores

    cores = len(usable_cores())
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    return {"cores": cores, "load_1min": None if load is None else round(load, 2)}


@torch.no_grad()
def time_forward(model, length: int, budget: int) -> dict:
    """Tokens per second of one forward over a batch of rows of ``length`` tokens (the run's longest row, capped
    by the model window; ``budget`` tokens at most, the vocabulary projection on the last position only where
    the model allows it)."""
    import inspect

    device = next(model.parameters()).device
    length = max(8, length)
    rows = max(1, min(budget, TIMING_TOKENS.get(device.type, 4096)) // length)
    vocab = model.get_input_embeddings().weight.shape[0]
    ids = torch.randint(0, vocab, (rows, length), device=device)
    keep = {"logits_to_keep": 1} if "logits_to_keep" in inspect.signature(model.forward).parameters else {}
    seconds = _best_of_two(device, lambda: model(input_ids=ids, use_cache=False, **keep))  # the first warms up
    return {"rows": rows, "length": length, "seconds": seconds, "tokens_per_s": rows * length / max(seconds, 1e-9)}


@torch.no_grad()
def time_generate(model, window: int, prefix: int, steps: int, pad_id: int, budget: int) -> dict:
    """Seconds per decoding step of ``model.generate`` for the rows of ``prefix`` + ``steps`` tokens that fit the
    token ``budget`` (as the sampler batches its samples; at most :data:`GENERATE_ROWS` of the device): after a
    warm-up, a generate of one token and one of :data:`GENERATE_STEPS` tokens; a step is their difference over
    the steps between them (the prefix's forward is in both)."""
    device = next(model.parameters()).device
    steps = max(1, min(steps, GENERATE_STEPS, window // 2))
    prefix = max(1, min(prefix, window - steps))
    vocab = model.get_input_embeddings().weight.shape[0]
    rows = max(1, min(GENERATE_ROWS.get(device.type, 32), budget // (prefix + steps)))
    ids = torch.randint(0, vocab, (rows, prefix), device=device)
    mask = torch.ones_like(ids)

    def generate(n: int) -> float:
        _sync(device)
        t0 = time.perf_counter()
        model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=n, min_new_tokens=n, do_sample=False,
                       pad_token_id=pad_id)
        _sync(device)
        return time.perf_counter() - t0

    generate(1)  # warm-up
    prefill = generate(1)  # the prefix's forward and one step
    seconds = generate(steps)
    # The sampler forwards each row once (counted in the sample stage's forward tokens) and then decodes from its
    # cache: a step is the difference of the two generates, not the prefix's forward spread over the steps.
    per_step = max(seconds - prefill, 0.0) / (steps - 1) if steps > 1 else seconds
    return {"rows": rows, "prefix": prefix, "steps": steps, "seconds": seconds, "prefill_seconds": prefill,
            "seconds_per_step": max(per_step, seconds / steps / 100)}


def _tool_work(cfg: PipelineConfig, t: dict, scale: float) -> dict:
    """One tool's share of the work, from its statistics on the scanned documents scaled by ``scale``."""
    sampler = t["method"] in ("sampler", "both")
    rules = t["method"] in ("rules", "both")
    kept_positions = t["kept_positions"] * scale if sampler else 0.0
    sampled = kept_positions * t["m"]
    rule_candidates = t["rule_candidates"] * scale if rules else 0.0
    usable = sampled * t["usable_share"] + rule_candidates
    kept = usable * t["kept_share"] if t["kept_share"] is not None else None
    if kept is not None and cfg.build.max_per_tool:
        kept = min(kept, float(cfg.build.max_per_tool))
    return {"windows": round(t["windows"] * scale), "kept_positions": round(kept_positions),
            "candidates": round(sampled + rule_candidates), "sampled_calls": round(sampled),
            "rule_candidates": round(rule_candidates), "usable_candidates": round(usable),
            "kept": None if kept is None else round(kept)}


def _decode_seconds(cfg: PipelineConfig, sampled: float, t: dict, timing: dict) -> float:
    """Seconds to sample ``sampled`` calls of one tool: at the wall time per call of the calls preflight sampled
    with the stage's own sampler where it sampled some, else from the timed generate's seconds per step."""
    if t.get("seconds_per_sample"):
        return sampled * t["seconds_per_sample"]
    return sampled * cfg.sample.max_new_tokens * timing["seconds_per_step"] / max(1, timing["generate_rows"])


def _hours(tokens: float, tokens_per_s: float) -> float:
    return tokens / max(tokens_per_s, 1e-9) / 3600


def estimate_work(cfg: PipelineConfig, stats: dict, documents: int, timing: dict) -> dict:
    """The work of the whole corpus of ``documents`` documents from ``stats`` (the scanned documents: their count,
    windows, tokens and per tool its method, m, windows, kept positions, rule candidates, usable share of sampled
    calls, kept share of the probe, prompt tokens, seconds per sampled call or None) and ``timing`` (forward
    tokens per second, seconds per decoding step of ``generate_rows`` rows, seconds per executed call)."""
    scale = documents / max(1, stats["documents"])
    window_tokens = stats["tokens"] / max(1, stats["windows"])
    tools = {name: _tool_work(cfg, t, scale) for name, t in stats["tools"].items()}
    sample_tokens = 0.0
    for name, t in stats["tools"].items():
        if t["method"] in ("sampler", "both"):  # the prompt's tail, a copy of the text and the text, then once more
            rows = tools[name]["windows"]  # for the windows whose positions are sampled
            sample_tokens += rows * (t["prompt_tokens"] + 2 * window_tokens) * (1 if stats["free"] else 2)
    sampled = sum(w["sampled_calls"] for w in tools.values())
    decode_s = sum(_decode_seconds(cfg, tools[name]["sampled_calls"], t, timing) for name, t in stats["tools"].items())
    candidates = sum(w["usable_candidates"] for w in tools.values())
    share_windows = min(stats["windows"] * scale, candidates)
    filter_rows = 2 * candidates + (share_windows if cfg.filter.share else candidates)  # L(ε) shared per window
    per_row = (stats.get("call_tokens") or CALL_TOKENS) + window_tokens / 2 + cfg.filter.horizon  # prefix + text
    filter_tokens = filter_rows * per_row
    length = min(cfg.finetune.max_length, stats["window"])
    train_tokens = cfg.finetune.max_steps * cfg.finetune.batch_size * length
    kept = [w["kept"] for w in tools.values() if w["kept"] is not None]
    tps = timing["tokens_per_s"]
    hours = {"sample": _hours(sample_tokens, tps) + decode_s / 3600,
             "execute": candidates * timing.get("seconds_per_call", 0.0) / max(1, cfg.tools.concurrency) / 3600,
             "filter": _hours(filter_tokens, timing.get("filter_tokens_per_s") or tps),
             "finetune": _hours(BACKWARD * train_tokens, tps)}
    hours["total"] = sum(hours.values())
    return {"documents": documents, "windows": round(stats["windows"] * scale),
            "positions": round(stats["tokens"] * scale), "tools": tools,
            "sample": {"forward_tokens": round(sample_tokens), "sampled_calls": sampled},
            "filter": {"rows": round(filter_rows), "tokens": round(filter_tokens)},
            "finetune": {"steps": cfg.finetune.max_steps, "tokens": train_tokens,
                         "dataset_tokens": round(sum(kept) * window_tokens * (1 + cfg.build.plain_ratio))},
            "hours": {k: float(f"{v:.4g}") for k, v in hours.items()}}



def peak_memory(model, row_tokens: int, window_tokens: int) -> dict:
    """Bytes the model's weights take and the logits of one row of ``row_tokens`` tokens: row x vocabulary x 4
    bytes (float32; the sampler scores every position of its row, so a long window with a 150k vocabulary
    needs tens of GiB). ``corpus.window_tokens`` bounds the row (``window_tokens``: its value, or the length the
    model window left when it is 0)."""
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    vocab = model.get_output_embeddings().weight.shape[0] if model.get_output_embeddings() is not None \
        else model.get_input_embeddings().weight.shape[0]
    logits = row_tokens * vocab * 4
    return {"model_bytes": weights, "row_tokens": row_tokens, "vocabulary": vocab, "logits_bytes": logits,
            "peak_bytes": weights + logits, "bound_by": "corpus.window_tokens", "window_tokens": window_tokens}
