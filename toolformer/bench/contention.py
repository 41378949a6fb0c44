"""Benchmark: how much one competing CPU-bound process slows each stage.

``toolformer bench --contention`` times the work of three stages on a model of
the small world's base-model shape (built in code: speed does not depend on the
weights), each idle and beside one competing process (a Python busy loop), with
two thread policies:

* ``follow`` — the default (``model.threads: 0``): one thread per core, lowered
  to the cores other processes leave free (:mod:`toolformer.lm.threads`);
* ``fixed`` — one thread per core whatever else runs (``model.threads`` set to
  the core count; the previous default).

Stages: ``finetune`` (training steps: forward, backward and AdamW on the demo's
batch of 32 rows of 128 tokens), ``filter`` (the filter's batched loss scorer
on random candidates) and ``evaluate`` (greedy decoding with the key/value
cache, 64 prompts, 32 new tokens). Each is timed ``--repeats`` times per
condition, alternating, and the median kept, with one idle timing on one
thread per repeat (the one-core bound of busy / idle); the result is ratios measured in
one run (busy / idle per policy, and follow / fixed when idle), since the
machines these run on are shared and noisy. The last line printed is one JSON
object.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Callable

import torch

# The small world's base model (data/world-base/config.json): width, layers, heads, feed-forward, vocabulary.
WORLD_SHAPE = (128, 6, 4, 341, 900)
SPIN = "while True: pass"


def build_world_model(seed: int = 0):
    from transformers import LlamaConfig, LlamaForCausalLM

    width, layers, heads, ffn, vocab = WORLD_SHAPE
    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=vocab, hidden_size=width, intermediate_size=ffn, num_hidden_layers=layers,
                      num_attention_heads=heads, num_key_value_heads=heads, max_position_embeddings=512,
                      bos_token_id=0, eos_token_id=0, pad_token_id=1, tie_word_embeddings=True)
    return LlamaForCausalLM(cfg), vocab


def train_work(model, vocab: int, steps: int) -> Callable[[], None]:
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    x = torch.randint(2, vocab, (32, 128), generator=torch.Generator().manual_seed(0))

    def run() -> None:
        model.train()
        for _ in range(steps):
            model(input_ids=x, labels=x).loss.backward()
            opt.step()
            opt.zero_grad()
        model.eval()

    return run


def filter_work(model, vocab: int, candidates: int) -> Callable[[], None]:
    from toolformer.bench.speed import make_requests
    from toolformer.lm.scoring import LossScorer

    texts, cands = make_requests(candidates, vocab, 4)
    requests = [r for c in cands for r in c]
    scorer = LossScorer(model, 1, window=512, horizon=5, batch_tokens=16384)

    @torch.no_grad()
    def run() -> None:
        scorer.losses(requests, texts)

    return run


def evaluate_work(model, vocab: int, rounds: int) -> Callable[[], None]:
    prompts = torch.randint(2, vocab, (64, 40), generator=torch.Generator().manual_seed(1))

    @torch.no_grad()
    def run() -> None:
        for _ in range(rounds):
            model.generate(input_ids=prompts, attention_mask=torch.ones_like(prompts), max_new_tokens=32,
                           min_new_tokens=32, do_sample=False, pad_token_id=1)

    return run


def set_policy(policy: str, model) -> None:
    """``follow``, ``fixed``, or ``one`` (one thread: what the stage gets beside one competitor on 2 cores)."""
    from toolformer.lm.threads import follow_load, set_threads, usable_cores

    set_threads({"follow": 0, "one": 1}.get(policy, len(usable_cores())), share=1)
    follow_load(model)


class Competitor:
    """One CPU-bound process for the length of a ``with`` block."""

    def __enter__(self):
        self.proc = subprocess.Popen([sys.executable, "-c", SPIN])
        time.sleep(0.5)  # started and spinning
        return self

    def __exit__(self, *exc) -> None:
        self.proc.kill()
        self.proc.wait()


def timed(fn: Callable[[], None]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def measure_stage(model, work: Callable[[], None], policies: list[str], repeats: int) -> dict:
    """Median seconds idle and busy per policy, alternating conditions, and idle with one thread: beside one
    competitor on 2 cores a stage gets one core, so busy / idle cannot go below that one-thread time over the
    idle time (``one_core_bound``) unless it takes more than its share."""
    times: dict[tuple[str, str], list[float]] = {(p, c): [] for p in policies for c in ("idle", "busy")}
    times[("one", "idle")] = []
    set_policy(policies[0], model)
    work()  # warm-up
    for _ in range(repeats):
        for policy in policies:
            set_policy(policy, model)
            times[(policy, "idle")].append(timed(work))
            with Competitor():
                set_policy(policy, model)
                times[(policy, "busy")].append(timed(work))
        set_policy("one", model)
        times[("one", "idle")].append(timed(work))
    out: dict = {}
    idle_of: dict[str, float] = {}
    for policy in policies:
        idle_of[policy] = idle = statistics.median(times[(policy, "idle")])
        busy = statistics.median(times[(policy, "busy")])
        out[policy] = {"idle_s": round(idle, 2), "busy_s": round(busy, 2), "busy_over_idle": round(busy / idle, 2)}
    if "follow" in out and "fixed" in out:
        out["idle_follow_over_fixed"] = round(idle_of["follow"] / idle_of["fixed"], 3)
    one = statistics.median(times[("one", "idle")])
    out["one_thread_idle_s"] = round(one, 2)
    out["one_core_bound"] = round(one / idle_of[policies[0]], 2)
    return out


def bench_contention(quick: bool = False, repeats: int = 3, policies: list[str] | None = None) -> dict:
    from toolformer.lm.threads import usable_cores

    policies = policies or ["follow", "fixed"]
    scale = 1 if quick else 3
    model, vocab = build_world_model()
    model.eval()
    works = {
        "finetune": train_work(model, vocab, 4 * scale),
        "filter": filter_work(model, vocab, 300 * scale),
        "evaluate": evaluate_work(model, vocab, 4 * scale),
    }
    result: dict = {"cores": len(usable_cores()), "repeats": repeats, "competitor": "one process: " + SPIN}
    for name, work in works.items():
        result[name] = measure_stage(model, work, policies, repeats)
    return result


def print_table(result: dict) -> None:
    print(f"{result['cores']} cores, one competing process; median of {result['repeats']}")
    print(f"{'stage':<10} {'policy':<7} {'idle s':>7} {'busy s':>7} {'busy/idle':>9}")
    for stage in ("finetune", "filter", "evaluate"):
        for policy, row in result[stage].items():
            if isinstance(row, dict):
                print(f"{stage:<10} {policy:<7} {row['idle_s']:>7} {row['busy_s']:>7} {row['busy_over_idle']:>9}")
        if "idle_follow_over_fixed" in result[stage]:
            print(f"{stage:<10} idle follow/fixed {result[stage]['idle_follow_over_fixed']}")
        print(f"{stage:<10} one thread idle {result[stage]['one_thread_idle_s']} s: busy/idle bound on one core "
              f"{result[stage]['one_core_bound']}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="toolformer bench --contention", description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="a third of the work per timing (about a minute)")
    p.add_argument("--repeats", type=int, default=3, help="timings per condition (the median is kept)")
    a = p.parse_args(argv)
    result = bench_contention(a.quick, a.repeats)
    print_table(result)
    print(json.dumps(result))
    return 0
