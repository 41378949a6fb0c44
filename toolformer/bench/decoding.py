"""Benchmark of constrained decoding (``toolformer bench --constrained``): the time it spends masking
(cold: each automaton state's token mask computed; warm: kept) for BPE vocabularies of ~1k and ~32k tokens,
and with ``--run-config`` generation off and on with a finished run's tuned model on its evaluation sets.
:mod:`toolformer.bench.speed` runs it."""

from __future__ import annotations

import random
import time
from pathlib import Path

import torch


def _synthetic_texts(large: bool) -> list[str]:
    """Invented words and numbers, so that BPE finds as many merges as a large vocabulary needs (data/ has ~1k);
    none unless ``large``."""
    rng = random.Random(0)
    letters = "etaoinshrdlcumwfgypbvkjxqz"
    return [" ".join("".join(rng.choice(letters[: rng.randint(8, 26)]) for _ in range(rng.randint(2, 9)))
                     if rng.random() < 0.8 else str(rng.randint(0, 99999)) for _ in range(200))
            for _ in range(3000 if large else 0)]


def _call_biased_model(tok, style):
    """A random two-layer model whose output bias puts the call-start tokens in the top 10: a call at the
    first steps."""
    from transformers import GPT2Config, GPT2LMHeadModel

    from toolformer.lm.textpos import marker_token_ids

    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(vocab_size=len(tok), n_positions=256, n_embd=64, n_layer=2, n_head=2,
                                       bos_token_id=0, eos_token_id=0, tie_word_embeddings=False)).eval()
    with torch.no_grad():
        model.lm_head.bias = torch.nn.Parameter(torch.zeros(len(tok)))
        model.lm_head.bias[marker_token_ids(tok, style.start)] = 8.0
    return model


def _time_masking(grammar) -> tuple[list[float], list[int]]:
    """Wrap ``grammar.restrict`` to add up the seconds it takes and the rows it masks, into the one-element
    lists returned (the caller resets them)."""
    masking, rows = [0.0], [0]
    restrict = grammar.restrict

    def timed_restrict(logits, texts, restrict=restrict, masking=masking, rows=rows):
        t0 = time.perf_counter()
        restrict(logits, texts)
        masking[0] += time.perf_counter() - t0
        rows[0] += sum(t is not None for t in texts)

    grammar.restrict = timed_restrict
    return masking, rows


def _bench_vocabulary(tok, prompts: list[str], sandbox, style, new_tokens: int) -> dict:
    """Constrained generation of ``prompts`` with tokenizer ``tok``, cold then warm: seconds, masking seconds
    and share, rows masked, microseconds per row and the masks computed (printed on one line too)."""
    from toolformer.lm import constrain
    from toolformer.lm.generate import generate_with_tools

    model = _call_biased_model(tok, style)
    grammar = constrain.call_grammar(tok, style, sandbox.tools)  # the one generate_with_tools will use
    masking, rows = _time_masking(grammar)
    result: dict[str, float] = {}
    for mode in ("cold", "warm"):
        masking[0], rows[0] = 0.0, 0
        t0 = time.perf_counter()
        generate_with_tools(model, tok, prompts, sandbox, style, max_new_tokens=new_tokens,
                            top_k_trigger=10, dates=["2023-01-30"] * len(prompts), batch_size=16,
                            constrained=True)
        total = time.perf_counter() - t0
        # microseconds: warm masking of a small vocabulary takes well under a millisecond
        result |= {f"seconds_{mode}": round(total, 6), f"masking_seconds_{mode}": round(masking[0], 6),
                   f"masking_share_{mode}": round(masking[0] / total, 3)}
    result |= {"rows_masked": rows[0], "masking_us_per_row_warm": round(1e6 * masking[0] / max(1, rows[0]), 1),
               "masks": grammar.states_cached}
    print(f"vocabulary {len(tok):,}: masking {result['masking_seconds_cold']:.3g} s of "
          f"{result['seconds_cold']:.3g} s cold ({grammar.states_cached} masks computed), "
          f"{result['masking_seconds_warm']:.3g} s of {result['seconds_warm']:.3g} s warm "
          f"({result['masking_us_per_row_warm']} µs per row and step)")
    return result


def bench_constrained(vocab_sizes: list[int], n_prompts: int = 32, new_tokens: int = 32) -> dict:
    """Constrained generation on ``n_prompts`` corpus prompts with a random model biased to start a call in the
    first steps (top-k trigger 10; then most steps are inside a call): the whole decoding's seconds, those spent
    masking (``CallGrammar.restrict``: cold, the masks of each automaton state computed; warm, kept) and their
    share, for BPE vocabularies of each size."""
    from toolformer.lm.modeling import tiny_tokenizer_texts
    from toolformer.lm.tokenizer import train_tokenizer
    from toolformer.rundir.files import read_jsonl
    from toolformer.tools import build_tool
    from toolformer.tools.calls import get_style
    from toolformer.tools.qa import QA
    from toolformer.tools.sandbox import Sandbox

    synthetic = _synthetic_texts(max(vocab_sizes) > 1000)
    prompts = [d["text"][:120] for d in read_jsonl(Path("data/corpus.jsonl"), ("text",))][:n_prompts]
    sandbox = Sandbox({"Calculator": build_tool("Calculator"), "Calendar": build_tool("Calendar"),
                       "QA": QA("data/knowledge.jsonl")}, timeout_s=30)
    style = get_style("plain")
    out: dict = {"prompts": len(prompts), "new_tokens": new_tokens}
    for size in vocab_sizes:
        tok = train_tokenizer([*tiny_tokenizer_texts("data"), *synthetic], vocab_size=size)
        out[f"vocab_{len(tok)}"] = _bench_vocabulary(tok, prompts, sandbox, style, new_tokens)
    return out


def bench_constrained_run(config: str, repeats: int = 2) -> dict:
    """Seconds of the evaluate stage's decoding of the toolformer row on every evaluation set of a finished run,
    constraints off and on (best of ``repeats``, alternating)."""
    from toolformer.config.load import load_config
    from toolformer.config.schema import PipelineConfig
    from toolformer.lm.generate import generate_with_tools, load_model_folder
    from toolformer.stages.evaluate import load_tasks, tuned_model_path
    from toolformer.tools.calls import get_style
    from toolformer.tools.sandbox import build_sandbox

    cfg = load_config(PipelineConfig, config, [])
    model, tok = load_model_folder(cfg, tuned_model_path(cfg))
    sandbox, ev = build_sandbox(cfg), cfg.evaluate
    out: dict = {"run": cfg.run_dir}
    for tc, _, data in load_tasks(cfg):
        prompts = [tc.prompt.replace("{question}", it.question) for it in data.items]
        secs = {False: float("inf"), True: float("inf")}
        for _ in range(repeats):
            for constrained in (False, True):
                t0 = time.perf_counter()
                generate_with_tools(model, tok, prompts, sandbox, get_style(cfg.calls.style),
                                    max_new_tokens=ev.max_new_tokens, top_k_trigger=ev.top_k_trigger,
                                    max_calls=ev.max_calls, dates=[it.date for it in data.items],
                                    tools=set(sandbox.tools), batch_size=ev.batch_size, constrained=constrained,
                                    max_input_chars=cfg.tools.max_input_chars)
                secs[constrained] = min(secs[constrained], time.perf_counter() - t0)
        out[tc.name] = {"items": len(prompts), "seconds_off": round(secs[False], 2),
                        "seconds_on": round(secs[True], 2), "on_over_off": round(secs[True] / secs[False], 2)}
        print(f"{tc.name}: {len(prompts)} items, off {secs[False]:.2f} s, constrained {secs[True]:.2f} s "
              f"({secs[True] / secs[False]:.2f}x)")
    return out
