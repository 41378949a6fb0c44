"""Benchmark: the filter and the sampler against the model's raw forward speed.

Measured side by side in one process on one model (built in code: speed does
not depend on the weights):

* limit  — raw forward throughput (tokens/s) on packed full rows holding the
  same number of tokens the filter needs;
* filter — the project's batched filter on N candidates;
* naive  — what public reimplementations do: one candidate and one variant per
  forward, the whole text, no sharing (timed on a subset, per candidate);
* sample — position scoring + call sampling, with and without reuse of the
  prompt's key/value cache;
* ``toolformer bench --contention``: each stage's work idle and beside a
  competing process, with the thread count following the load or fixed
  (:mod:`toolformer.bench.contention`);
* ``--constrained`` instead: the time constrained decoding spends masking
  (cold: each automaton state's token mask computed; warm: kept), for BPE
  vocabularies of ~1k and ~32k tokens; with ``--run-config``, generation
  off and on with the run's tuned model on its evaluation sets (the evaluate
  stage's decoding): :mod:`toolformer.bench.decoding`.

Run ``python scripts/bench.py --quick`` (or ``toolformer bench --quick``); the
last line printed is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import random
import time
from pathlib import Path
from typing import Any

import torch

from toolformer.bench.decoding import bench_constrained, bench_constrained_run

MODELS = {
    # name: (width, layers, heads, vocab)
    "tiny": (64, 2, 2, 1000),
    "small": (256, 4, 4, 1000),  # ~3.4M parameters
    "100m": (768, 12, 12, 32000),  # GPT-2-small shape, ~110M parameters
}
_TOK: Any = None  # bench_sample's tokenizer, trained once


def build_model(name: str, dtype: torch.dtype, device: torch.device):
    from transformers import GPT2Config, GPT2LMHeadModel

    width, layers, heads, vocab = MODELS[name]
    torch.manual_seed(0)
    # GPT2Config takes PretrainedConfig's keywords too (attn_implementation) though its signature does not list them.
    cfg = GPT2Config(vocab_size=vocab, n_positions=1024, n_embd=width, n_layer=layers, n_head=heads,  # type: ignore[call-arg]
                     bos_token_id=0, eos_token_id=0, attn_implementation="sdpa")
    model = GPT2LMHeadModel(cfg)
    return model.to(device=device, dtype=dtype).eval(), vocab  # type: ignore[call-arg]  # to: @wraps(Module.to)


def make_requests(n: int, vocab: int, per_position: int, seed: int = 0, bos: int = 0):
    """N candidates on documents of 64–320 tokens, ``per_position`` calls per
    position, each with the three prefixes of the method (``bos`` first)."""
    from toolformer.lm.scoring import LossRequest

    rng = random.Random(seed)
    texts: dict[str, list[int]] = {}
    cands: list[tuple[LossRequest, LossRequest, LossRequest]] = []
    d = 0
    while len(cands) < n:
        key = f"d{d}"
        texts[key] = [rng.randrange(3, vocab) for _ in range(rng.randint(64, 320))]
        d += 1
        for _ in range(4):
            pos = rng.randrange(1, len(texts[key]) - 1)
            for _ in range(per_position):
                call = tuple(rng.randrange(3, vocab) for _ in range(rng.randint(8, 20)))
                no_result = (bos,) + call + (4, 5)
                with_result = (bos,) + call + (4, 6, 7, 8, 5)
                shared = len(call) + 2  # BOS + call + arrow: common to both variants
                cands.append((LossRequest((bos,), key, pos), LossRequest(no_result, key, pos, shared),
                              LossRequest(with_result, key, pos, shared)))
    return texts, cands[:n]


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize()


def timed(fn, device):
    sync(device)
    t0 = time.perf_counter()
    out = fn()
    sync(device)
    return out, time.perf_counter() - t0


@torch.no_grad()
def bench_limit(model, tokens: int, vocab: int, row_len: int, budget: int, device) -> float:
    rows = max(1, budget // row_len)
    n_batches = max(1, -(-tokens // (rows * row_len)))
    ids = torch.randint(3, vocab, (rows, row_len), device=device)
    model(input_ids=ids[:1], logits_to_keep=1)  # warm-up

    def run():
        for _ in range(n_batches):
            model(input_ids=ids, use_cache=False, logits_to_keep=1)

    _, secs = timed(run, device)
    return n_batches * rows * row_len / secs


@torch.no_grad()
def bench_naive(model, texts, cands, device, limit_n: int) -> float:
    """Candidates/s of a one-sequence-per-variant loop over whole texts."""
    def run():
        for reqs in cands[:limit_n]:
            for r in reqs:
                seq = torch.tensor([list(r.prefix) + texts[r.text_key]], device=device)
                logits = model(input_ids=seq, use_cache=False).logits
                torch.log_softmax(logits.float(), dim=-1)
    _, secs = timed(run, device)
    return min(limit_n, len(cands)) / secs


@torch.no_grad()
def bench_reference(model, texts, cands, device, limit_n: int) -> float:
    """Candidates/s of the reference filter: the same cut rows as the filter,
    one sequence per forward, no padding, no sharing."""
    from toolformer.lm.scoring import build_row

    def run():
        for reqs in cands[:limit_n]:
            for r in reqs:
                row, h = build_row(r.prefix, texts[r.text_key], r.position, 5, 1024)
                logits = model(input_ids=torch.tensor([row], device=device), use_cache=False).logits
                torch.log_softmax(logits[0, -h - 1 : -1].float(), dim=-1)
    _, secs = timed(run, device)
    return min(limit_n, len(cands)) / secs


def bench_sample(model, device, docs: int, reuse: bool, seed: int = 0, tokenizer=None) -> float:
    """Documents/s of position scoring + call sampling (``tokenizer``: the model's; else one trained here)."""
    from toolformer.lm.sampler import Sampler
    from toolformer.lm.textpos import tokenize_text
    from toolformer.lm.tokenizer import train_tokenizer
    from toolformer.tools import REGISTRY
    from toolformer.tools.calls import STYLES

    global _TOK
    if _TOK is None and tokenizer is None:
        from toolformer.lm.modeling import tiny_tokenizer_texts

        _TOK = train_tokenizer(tiny_tokenizer_texts(), vocab_size=600)  # the repository's data/
    tok = tokenizer or _TOK
    rng = random.Random(seed)
    words = ["the", "mill", "sold", "sacks", "of", "grain", "in", "spring", "and", "autumn", "with"]
    texts = [" ".join(rng.choice(words) if rng.random() < 0.7 else str(rng.randint(10, 9999)) for _ in range(40))
             for _ in range(docs)]
    tt = [(t, tokenize_text(tok, t)) for t in texts]
    sampler = Sampler(model, tok, STYLES["plain"], REGISTRY["Calculator"].prompt, [tok.bos_token_id], reuse_cache=reuse)
    gen = torch.Generator().manual_seed(seed)

    def run():
        scores = sampler.score_positions(tt, 16384)
        positions = [sorted(range(len(s)), key=lambda i: -s[i])[:5] for s in scores]
        sampler.sample_calls(tt, positions, 2, 8, 1.0, "Calculator", gen, 16384)

    _, secs = timed(run, device)
    return docs / secs


PROFILE_GROUPS = {  # aten op name fragments → what they are
    "matmul": ("addmm", "aten::mm", "bmm", "matmul", "linear"),
    "attention": ("scaled_dot_product", "flash", "efficient_attention", "_sdpa"),
    "softmax": ("softmax",),
    "elementwise": ("mul", "add", "tanh", "pow", "where", "gelu", "silu", "layer_norm", "rsqrt", "mean", "div",
                    "sub", "neg", "exp", "cos", "sin"),
    "index/copy": ("index", "gather", "copy_", "cat", "to_copy", "contiguous", "clone", "embedding"),
}


def profile_filter(scorer, requests, texts, device) -> dict:
    """Where the filter's time goes: torch.profiler's self time of the aten ops
    by group, and the share of wall time outside any op (Python, batching)."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with profile(activities=activities) as prof:
        _, secs = timed(lambda: scorer.losses(requests, texts), device)
    attr = "self_device_time_total" if device.type == "cuda" else "self_cpu_time_total"
    shares: dict[str, float] = {g: 0.0 for g in PROFILE_GROUPS}
    shares["other ops"] = 0.0
    events = [e for e in prof.key_averages() if e.key.startswith("aten::")]
    for e in events:
        group = next((g for g, keys in PROFILE_GROUPS.items() if any(k in e.key for k in keys)), "other ops")
        shares[group] += getattr(e, attr, 0.0) / 1e6
    ops = sum(shares.values())
    out = {g: round(v / secs, 3) for g, v in shares.items()}
    out["outside ops"] = round(max(0.0, secs - ops) / secs, 3)
    top = sorted(events, key=lambda e: -getattr(e, attr, 0.0))[:8]
    print("profile of one filter pass (self time, share of wall):")
    for e in top:
        print(f"  {e.key:<40} {getattr(e, attr, 0.0) / 1e6 / secs:6.1%}  ({e.count} calls)")
    return out


def bench_run_sharing(config: str, n: int, repeats: int = 2) -> dict:
    """The filter on the first ``n`` executed calls of a real run folder, in one process, modes interleaved: no
    sharing with every loss (``none``), shared rows with every loss (``rows``) and shared rows with L(e(c, ε))
    only where L(ε) − L⁺ does not already reject the call (``lean``, the filter stage's): seconds
    (best of ``repeats``), tokens and kept calls, which must be the same in every mode."""
    import itertools

    from toolformer.config.load import load_config
    from toolformer.config.schema import PipelineConfig
    from toolformer.lm.modeling import load
    from toolformer.rundir.folder import StageFolder, read_documents
    from toolformer.stages.filter import CandidateScorer

    cfg = load_config(PipelineConfig, config, [])
    model, tok = load(cfg.model, cfg.calls)
    records = list(itertools.islice(StageFolder(cfg.run_dir, "execute").records(), n))
    docs = read_documents(cfg.run_dir)
    out: dict[str, dict] = {}
    for _ in range(repeats):
        for mode, rows, every in (("none", False, True), ("rows", True, True), ("lean", True, False)):
            cfg.filter.share = rows
            scorer = CandidateScorer(cfg, model, tok, docs, all_losses=every)
            scored, secs = timed(lambda s=scorer: s.score(records), scorer.scorer.device)
            best = out.get(mode, {}).get("seconds", float("inf"))
            out[mode] = {"seconds": round(min(best, secs), 2), "tokens": scorer.scorer.tokens_scored,
                         "kept": sum(r["kept"] for r in scored)}
    print(f"filter on {len(records):,} calls of {cfg.run_dir} (best of {repeats}): " + "; ".join(
        f"{m} {v['seconds']} s, {v['tokens']:,} tokens, {v['kept']:,} kept" for m, v in out.items())
          + f"; lean/rows {out['lean']['seconds'] / out['rows']['seconds']:.2f}")
    return {"run": cfg.run_dir, "calls": len(records), **out}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="toolformer bench", description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="small", choices=sorted(MODELS), help="model shape built in code")
    p.add_argument("-n", "--candidates", type=int, default=2000, help="candidates N for the filter")
    p.add_argument("--per-position", type=int, default=4, help="candidates sharing one position")
    p.add_argument("--batch-tokens", type=int, default=16384, help="filter token budget per forward")
    p.add_argument("--dtype", default="auto", choices=["auto", "float32", "bfloat16"])
    p.add_argument("--device", default="auto")
    p.add_argument("--naive-n", type=int, default=40, help="candidates timed for the naive loop")
    p.add_argument("--sample-docs", type=int, default=16, help="documents for the sampler benchmark")
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--quick", action="store_true", help="tiny model, small N: under a minute on 2 cores")
    p.add_argument("--profile", action="store_true", help="also profile one filter pass (torch.profiler)")
    p.add_argument("--no-share", action="store_true", help="filter with one row per request (no shared rows)")
    p.add_argument("--share-prefixes", action="store_true",
                   help="also share the key/value cache of the head common to e(c, ε) and e(c, r)")
    p.add_argument("--tool-workers", type=int, nargs="*", default=[],
                   help="instead: WikiSearch calls/s on data/collection.jsonl with these numbers of workers (e.g. 1 8)")
    p.add_argument("--tool-calls", type=int, default=400, help="calls for --tool-workers")
    p.add_argument("--run-config", default="", help="instead: time the filter's sharing and lean modes on the first "
                   "--candidates executed calls of this config's run folder (e.g. runs/demo/config.yaml after the "
                   "demo)")
    p.add_argument("--constrained", action="store_true", help="instead: the time constrained decoding "
                   "spends masking, with BPE vocabularies of ~1k and ~32k tokens (run from the repository root); "
                   "with --run-config, generation off and on with that finished run's tuned model and eval sets")
    a = p.parse_args(argv)
    from toolformer.lm.modeling import resolve_device, resolve_dtype, set_threads

    if a.quick:
        a.model, a.candidates, a.naive_n, a.sample_docs = "tiny", 600, 20, 8
    set_threads(a.threads)
    if a.constrained:
        print(json.dumps(bench_constrained_run(a.run_config) if a.run_config else bench_constrained([1000, 32000])))
        return 0
    if a.run_config:
        print(json.dumps(bench_run_sharing(a.run_config, a.candidates)))
        return 0
    if a.tool_workers:
        print(json.dumps(bench_tool_workers(a.tool_workers, a.tool_calls)))
        return 0
    device = resolve_device(a.device)
    result = measure(a.model, a.candidates, a.naive_n, a.sample_docs, device, resolve_dtype(a.dtype, device),
                     a.per_position, a.batch_tokens, not a.no_share, a.share_prefixes, a.profile)
    print(f"limit {result['limit_tokens_per_s']:,} tok/s | filter {result['filter_tokens_per_s']:,} tok/s, "
          f"{result['filter_candidates_per_s']:,} cand/s | naive {result['naive_candidates_per_s']:,} cand/s | "
          f"reference {result['reference_candidates_per_s']:,} cand/s | "
          f"sample {result['sample_docs_per_s_cache']} vs {result['sample_docs_per_s_no_cache']} docs/s")
    print(json.dumps(result))
    return 0


def measure(model_name: str, candidates: int, naive_n: int, sample_docs: int, device: torch.device,
            dtype: torch.dtype, per_position: int = 4, batch_tokens: int = 16384, share_rows: bool = True,
            share_prefixes: bool = False, profile: bool = False) -> dict:
    """The filter, the limit, the naive loop and the sampler on one model built in code (see the module)."""
    model, vocab = build_model(model_name, dtype, device)
    return {"model": model_name} | measure_model(model, vocab, candidates, naive_n, sample_docs, device,
                                                 per_position, batch_tokens, share_rows, share_prefixes, profile)


def measure_model(model, vocab: int, candidates: int, naive_n: int, sample_docs: int, device: torch.device,
                  per_position: int = 4, batch_tokens: int = 16384, share_rows: bool = True,
                  share_prefixes: bool = False, profile: bool = False, tokenizer=None, bos: int = 0) -> dict:
    """:func:`measure` on a model already loaded (``tokenizer`` and ``bos``: its own, for a pretrained one)."""
    from toolformer.lm.scoring import LossScorer

    dtype = next(model.parameters()).dtype
    params = sum(p.numel() for p in model.parameters())
    texts, cands = make_requests(candidates, vocab, per_position, bos=bos)
    requests = [r for c in cands for r in c]

    scorer = LossScorer(model, 1, window=1024, horizon=5, batch_tokens=batch_tokens, share_rows=share_rows,
                        share_prefixes=share_prefixes)
    scorer.losses(requests[:30], texts)  # warm-up
    scorer.tokens_scored = scorer.tokens_computed = scorer.rows_scored = 0
    _, filter_secs = timed(lambda: scorer.losses(requests, texts), device)
    filter_tps = scorer.tokens_scored / filter_secs
    filter_cps = len(cands) / filter_secs
    mean_row = max(1, scorer.tokens_scored // max(1, scorer.rows_scored))
    limit_tps = bench_limit(model, scorer.tokens_scored, vocab, max(64, mean_row), batch_tokens, device)
    naive_cps = bench_naive(model, texts, cands, device, naive_n)
    reference_cps = bench_reference(model, texts, cands, device, naive_n * 2)
    s_cache = bench_sample(model, device, sample_docs, True, tokenizer=tokenizer) if vocab >= 600 else None
    s_plain = bench_sample(model, device, sample_docs, False, tokenizer=tokenizer) if vocab >= 600 else None
    result = {
        "params": params, "device": str(device), "dtype": str(dtype).replace("torch.", ""),
        "cpu_kernel": torch.backends.cpu.get_cpu_capability().lower(), "threads": torch.get_num_threads(),
        "N": len(cands), "share_rows": share_rows, "share_prefixes": share_prefixes and share_rows,
        "filter_tokens": scorer.tokens_scored,
        "filter_padding": round(1 - scorer.tokens_scored / max(1, scorer.tokens_computed), 3),
        "filter_tokens_per_s": round(filter_tps), "filter_candidates_per_s": round(filter_cps, 1),
        "limit_tokens_per_s": round(limit_tps), "naive_candidates_per_s": round(naive_cps, 2),
        "reference_candidates_per_s": round(reference_cps, 2), "sample_docs_per_s_cache": s_cache and round(s_cache, 2),
        "sample_docs_per_s_no_cache": s_plain and round(s_plain, 2),
        "filter_over_limit": round(filter_tps / limit_tps, 3), "filter_over_naive": round(filter_cps / naive_cps, 1),
        "sample_cache_speedup": s_cache and s_plain and round(s_cache / s_plain, 2),
    }
    if profile:
        result["profile"] = profile_filter(scorer, requests, texts, device)
    return result


def bench_tool_workers(workers: list[int], n_calls: int) -> dict:
    """Calls/s of WikiSearch on the shipped collection with each number of workers (one run, same queries)."""
    from toolformer.rundir.files import read_jsonl
    from toolformer.tools.sandbox import Sandbox
    from toolformer.tools.wikisearch import WikiSearch

    rng = random.Random(0)
    titles = [rec["title"] for rec in read_jsonl(Path("data/collection.jsonl"), ("title",))]
    queries = [f"{rng.choice(titles)} {rng.choice(titles).split()[0]} {i}" for i in range(n_calls)]
    tool = WikiSearch("data/collection.jsonl")
    Sandbox({"WikiSearch": tool}, timeout_s=30).run("WikiSearch", "warm up")  # index built or loaded once
    out = {"tool": "WikiSearch", "calls": n_calls}
    for w in workers:
        box = Sandbox({"WikiSearch": tool}, timeout_s=30, concurrency=w, cache=False)
        t0 = time.perf_counter()
        outcomes = box.run_many([("WikiSearch", q, None) for q in queries])
        secs = time.perf_counter() - t0
        out[f"calls_per_s_{w}_workers"] = round(n_calls / secs, 1)
        out[f"ok_{w}_workers"] = sum(o.ok for o in outcomes)
    return out


if __name__ == "__main__":
    raise SystemExit(main())
