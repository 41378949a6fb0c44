"""``toolformer bench --weights NAME|FOLDER``: the benchmark on a real pretrained model, in one process.

* ``filter_over_limit``, ``filter_over_naive``, ``filter_over_reference``: the filter on N candidates against the
  model's raw forward speed and the one-sequence loops (:func:`toolformer.bench.speed.measure_model`, token ids
  drawn from the model's vocabulary, its BOS first: speed does not depend on what the tokens say);
* ``sample_cache_speedup``: position scoring + call sampling with the model's own tokenizer, the prompt's
  key/value cache reused against not;
* ``finetune``: full fine-tuning and LoRA side by side (:mod:`toolformer.bench.methods`, each in a process of
  its own): tokens/s of AdamW steps on rows of ``--rows`` × ``--row-tokens`` (the published config's 4 × 256),
  peak memory, and LoRA's against full's;
* ``generate`` (with ``--run RUN_DIR``, a finished run of these weights, e.g. one of ``published.scale``): the
  evaluate stage's decoding of the run's tuned model on the first ``--generate-items`` items of each
  evaluation set, tools on (calls made and results read in) and off: tokens/s of the text each produced.

NAME is a model of ``toolformer weights fetch`` (its cached import, fetched once), or a model folder.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path


def generation_speed(run_dir: str, items: int) -> dict:
    """Tokens/s of the evaluate stage's decoding with the run's tuned model, tools on and off, per set."""
    from toolformer.config.load import load_config
    from toolformer.config.schema import PipelineConfig
    from toolformer.lm.generate import generate_with_tools, load_model_folder
    from toolformer.stages.evaluate import load_tasks, tuned_model_path
    from toolformer.tools.calls import get_style
    from toolformer.tools.sandbox import build_sandbox

    config = Path(run_dir) / "config.yaml"
    if not config.is_file():
        raise ValueError(f"--run {run_dir}: no config.yaml there (a finished run folder has one)")
    cfg = load_config(PipelineConfig, config, [])
    model, tok = load_model_folder(cfg, tuned_model_path(cfg))
    sandbox, ev = build_sandbox(cfg), cfg.evaluate
    out: dict = {"run": run_dir, "model": tuned_model_path(cfg)}
    for tc, _, data in load_tasks(cfg):
        chosen = data.items[:items]
        prompts = [tc.prompt.replace("{question}", it.question) for it in chosen]
        row: dict = {"items": len(prompts)}
        for tools in (True, False):
            t0 = time.perf_counter()
            gens = generate_with_tools(model, tok, prompts, sandbox, get_style(cfg.calls.style),
                                       max_new_tokens=tc.max_new_tokens or ev.max_new_tokens,
                                       top_k_trigger=ev.top_k_trigger, max_calls=ev.max_calls, disabled=not tools,
                                       dates=[it.date for it in chosen], tools=set(sandbox.tools),
                                       batch_size=ev.batch_size, max_input_chars=cfg.tools.max_input_chars)
            secs = time.perf_counter() - t0
            tokens = sum(len(tok(g.text, add_special_tokens=False)["input_ids"]) for g in gens)
            key = "tools" if tools else "no_tools"
            row[key] = {"seconds": round(secs, 2), "tokens_per_s": round(tokens / secs, 1),
                        "calls": sum(len(g.calls) for g in gens)}
        out[tc.name] = row
    return out


def measure_weights(weights: str, candidates: int, naive_n: int, sample_docs: int, rows: int, row_tokens: int,
                    steps: int, run_dir: str, generate_items: int) -> dict:
    """Every measurement of the module on one pretrained model (float32, CPU or the default device)."""
    from toolformer.bench.methods import compare, model_folder
    from toolformer.bench.speed import measure_model
    from toolformer.config.schema import ModelConfig
    from toolformer.lm.modeling import load

    folder = model_folder(weights)
    model, tok = load(ModelConfig(path=str(folder), dtype="float32"))
    vocab = model.get_input_embeddings().weight.shape[0]
    device = next(model.parameters()).device
    result = {"weights": weights, "folder": str(folder), "vocabulary": vocab}
    result |= measure_model(model, min(vocab, len(tok)), candidates, naive_n, sample_docs, device,
                            tokenizer=tok, bos=tok.bos_token_id)
    result["filter_over_reference"] = round(result["filter_candidates_per_s"]
                                            / result["reference_candidates_per_s"], 1)
    del model  # the fine-tuning methods load it again, each in a process of its own
    result["finetune"] = compare(str(folder), rows=rows, row_tokens=row_tokens, steps=steps)["methods"]
    if run_dir:
        result["generate"] = generation_speed(run_dir, generate_items)
    return result


def summary(r: dict) -> str:
    """One line of the ratios and speeds."""
    from toolformer.bench.methods import summary as methods_summary

    line = (f"{Path(r['folder']).name} ({r['params'] / 1e6:,.1f}M, {r['threads']} threads): filter "
            f"{r['filter_tokens_per_s']:,} tok/s = {r['filter_over_limit']:.2f} of the forward limit, "
            f"{r['filter_over_naive']}x the naive loop, {r['filter_over_reference']}x the reference loop | sample "
            f"cache {r['sample_cache_speedup']}x | "
            + methods_summary({"folder": r["folder"], "methods": r["finetune"]}))
    for name, g in r.get("generate", {}).items():
        if isinstance(g, dict):
            line += (f" | generate {name}: {g['tools']['tokens_per_s']} tok/s with tools "
                     f"({g['tools']['calls']} calls), {g['no_tools']['tokens_per_s']} without")
    return line


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="toolformer bench --weights", description=__doc__.split("\n\n")[0])
    p.add_argument("--weights", required=True, help="a model of `toolformer weights fetch` (smollm2, gemma3-270m) "
                   "or a model folder")
    p.add_argument("-n", "--candidates", type=int, default=600, help="candidates N for the filter")
    p.add_argument("--naive-n", type=int, default=20, help="candidates timed for the naive and reference loops")
    p.add_argument("--sample-docs", type=int, default=8, help="documents for the sampler benchmark")
    p.add_argument("--rows", type=int, default=4, help="fine-tuning rows a step (default 4)")
    p.add_argument("--row-tokens", type=int, default=256, help="tokens a fine-tuning row (default 256)")
    p.add_argument("--steps", type=int, default=3, help="fine-tuning steps timed")
    p.add_argument("--run", default="", help="also generation speed with the tuned model of this finished run "
                   "folder, tools on and off")
    p.add_argument("--generate-items", type=int, default=32, help="with --run: items of each evaluation set")
    p.add_argument("--threads", type=int, default=0)
    a = p.parse_args(argv)
    from toolformer.lm.modeling import set_threads

    set_threads(a.threads)
    try:
        out = measure_weights(a.weights, a.candidates, a.naive_n, a.sample_docs, a.rows, a.row_tokens, a.steps,
                              a.run, a.generate_items)
    except ValueError as e:
        print(f"bench: error: {e}")
        return 2
    print(summary(out))
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
