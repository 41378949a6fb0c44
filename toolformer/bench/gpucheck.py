"""One device check for the day a GPU is lent: ``bash scripts/gpu_check.sh``.

Prints one JSON line with:

* ``bench``: the filter against the raw forward limit and the naive loop
  (:mod:`toolformer.bench.speed`) on the 100M model in bfloat16;
* ``precision``: the filter's losses in bfloat16 against float32 on the
  same candidates (mean and largest absolute difference of L⁻ − L⁺, and the
  share of keep decisions at tau_f that flip);
* ``finetune``: seconds per optimizer step of the demo's fine-tune shape
  (the small world's base model, 32 rows of 128 tokens);
* ``peak_memory_mib``: peak GPU memory (peak resident memory with ``--cpu``).

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
    """L⁻ − L⁺ of ``n`` candidates in float32 and in bfloat16 on one model (log-softmax in float32 both times)."""
    from toolformer.bench.speed import build_model, make_requests
    from toolformer.lm.scoring import LossScorer

    model, vocab = build_model(model_name, torch.float32, device)
    texts, cands = make_requests(n, vocab, per_position=2, seed=1)
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
            "max_abs_margin_diff": round(max(diffs), 5), "kept_fp32": sum(m >= tau for m in fp32),
            "kept_decisions_flipped": flips, "flipped_share": round(flips / len(cands), 4),
            "flipped_share_at_median_margin": round(flips_median / len(cands), 4)}


def finetune_step_time(device: torch.device, dtype: torch.dtype, steps: int, batch: int, seq_len: int) -> dict:
    """Seconds per AdamW step (forward, backward, update) of the demo's model shape (the shipped base model's)."""
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

    def step() -> None:
        with torch.autocast(device.type, dtype=dtype, enabled=dtype != torch.float32):
            loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    for _ in range(3):  # warm-up
        step()
    if device.type == "cuda":
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    if device.type == "cuda":
        torch.cuda.synchronize()
    secs = (time.perf_counter() - t0) / steps
    return {"model": f"demo base ({pc.arch}, {pc.hidden} wide, {pc.layers} layers)",
            "parameters": sum(p.numel() for p in model.parameters()), "batch": f"{batch}x{seq_len}",
            "dtype": str(dtype).replace("torch.", ""), "seconds_per_step": round(secs, 4)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="gpu_check", description=__doc__.split("\n\n")[0])
    p.add_argument("--cpu", action="store_true", help="run on the CPU with small sizes")
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
    result["wall_s"] = round(time.perf_counter() - t0, 1)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
