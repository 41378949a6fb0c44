"""Copy probe: can the base model use a call put before the text?

The filter keeps a call only if its result, as a prefix before the whole
text, lowers the weighted loss L_i at the answer (DESIGN §5: a model that
cannot copy from a prefix keeps nothing). For items of the annotation corpus
whose gold call is known, this computes, exactly as the filter does
(:class:`toolformer.scoring.LossScorer`, sequence = [BOS] + tokens(z +
separator) + tokens(text)):

* ``loss_correct``: L_i(e(c, r)) with the right result,
* ``loss_none``: L_i(ε), no prefix,
* ``loss_no_result``: L_i(e(c, ε)),
* ``loss_wrong``: L_i(e(c, r')) with a wrong result r',

and the share of items where the correct call helps by at least 0.5
(``loss_none − loss_correct``) and where the filter would keep it at
tau_f = 0.5 (``min(loss_none, loss_no_result) − loss_correct``). After good
pre-training DESIGN reports 0.13 / 1.69 / 3.07 for correct / none / wrong.

It also measures the base model's own accuracy on eval_math (greedy, the
prompt ``{Body} {Question} The answer is``, first number of the output): it
should be low, or a calculator has nothing to add.
"""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

import torch

from toolformer.calls import get_style
from toolformer.modeling import bos_ids
from toolformer.scoring import LossRequest, LossScorer
from toolformer.textpos import tokenize_text

MATH_PROMPT = "{question} The answer is"
"""Suggested evaluation prompt for word problems; ``{question}`` = Body + " " + Question."""
QA_PROMPT = "Question: {question} Answer:"
"""Suggested evaluation prompt for questions."""
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


def _wrong_result(rng: random.Random, tool: str, result: str, others: list[str]) -> str:
    """A plausible wrong result: a nearby number with as many digits, or
    another answer of the same kind of question."""
    if tool == "Calculator":
        value = int(result)
        while True:
            wrong = value + rng.choice([-1, 1]) * rng.randint(1, max(9, value // 4))
            if wrong > 0 and wrong != value and len(str(wrong)) == len(result):
                return str(wrong)
    choices = [o for o in others if o != result]
    return rng.choice(choices) if choices else result + "x"


def probe_items(corpus_path: str | Path, tool: str, limit: int, seed: int = 0) -> list[dict]:
    """Up to ``limit`` gold calls of ``tool`` from the annotation corpus, each with
    its document text and a wrong result."""
    rows = [json.loads(line) for line in Path(corpus_path).read_text(encoding="utf-8").splitlines() if line.strip()]
    rng = random.Random(seed)
    items = []
    for row in rows:
        for g in row.get("gold_calls", []):
            if g["tool"] == tool:
                items.append({"doc_id": row["id"], "text": row["text"], **g})
    rng.shuffle(items)
    items = items[:limit]
    results = [it["result"] for it in items]
    for it in items:
        it["wrong"] = _wrong_result(rng, tool, it["result"], results)
    return items


def copy_probe(model, tokenizer, items: list[dict], separator: str = "\n", horizon: int = 5,
               style_name: str = "plain") -> dict:
    """The four losses per item and their means; see the module docstring."""
    style = get_style(style_name)
    bos = tuple(bos_ids(tokenizer))
    window = model.config.max_position_embeddings
    scorer = LossScorer(model, tokenizer.pad_token_id or 0, window, horizon)

    def prefix(call_text: str | None) -> tuple[int, ...]:
        if call_text is None:
            return bos
        return bos + tuple(tokenizer(call_text + separator, add_special_tokens=False)["input_ids"])

    texts, requests, plan = {}, [], []
    for k, it in enumerate(items):
        tt = tokenize_text(tokenizer, it["text"])
        if it["char_start"] not in tt.char_starts:
            continue  # the answer does not start a token; the filter could not score it either
        key = f"{k}"
        texts[key] = tt.ids
        position = tt.char_starts.index(it["char_start"])
        variants = (None, style.render(it["tool"], it["input"], ""), style.render(it["tool"], it["input"], it["result"]),
                    style.render(it["tool"], it["input"], it["wrong"]))
        reqs = [LossRequest(prefix(z), key, position) for z in variants]
        requests += reqs
        plan.append(reqs)
    losses = scorer.losses(requests, texts)
    rows = [[losses[r] for r in reqs] for reqs in plan]
    n = len(rows)
    if not n:
        return {"items": 0}
    mean = lambda j: sum(r[j] for r in rows) / n  # noqa: E731
    return {
        "items": n,
        "loss_none": mean(0), "loss_no_result": mean(1), "loss_correct": mean(2), "loss_wrong": mean(3),
        "helps_0.5": sum(r[0] - r[2] >= 0.5 for r in rows) / n,
        "kept_tau_0.5": sum(min(r[0], r[1]) - r[2] >= 0.5 for r in rows) / n,
        "wrong_kept_tau_0.5": sum(min(r[0], r[1]) - r[3] >= 0.5 for r in rows) / n,
    }


@torch.no_grad()
def greedy_numbers(model, tokenizer, prompts: list[str], max_new_tokens: int = 10, batch_size: int = 64) -> list[str]:
    """Greedy continuation of each prompt (after BOS); returns the generated text.
    Prompts of equal token length are batched together, so nothing is padded."""
    bos = bos_ids(tokenizer)
    device = next(model.parameters()).device
    encoded = [bos + tokenizer(p, add_special_tokens=False)["input_ids"] for p in prompts]
    out: list[str] = [""] * len(prompts)
    by_len: dict[int, list[int]] = {}
    for k, ids in enumerate(encoded):
        by_len.setdefault(len(ids), []).append(k)
    for group_all in by_len.values():
        for start in range(0, len(group_all), batch_size):
            group = group_all[start : start + batch_size]
            ids = torch.tensor([encoded[k] for k in group], device=device)  # (B, T)
            for _ in range(max_new_tokens):
                logits = model(input_ids=ids, use_cache=False).logits[:, -1]  # (B, V)
                ids = torch.cat([ids, logits.argmax(-1, keepdim=True)], dim=1)
            for b, k in enumerate(group):
                out[k] = tokenizer.decode(ids[b, len(encoded[k]) :].tolist(), skip_special_tokens=True)
    return out


def first_number(text: str) -> float | None:
    m = _NUMBER.search(text.replace(",", ""))
    return float(m.group()) if m else None


def math_accuracy(model, tokenizer, eval_math_path: str | Path, limit: int) -> dict:
    """The base model's accuracy on eval_math with :data:`MATH_PROMPT`."""
    problems = json.loads(Path(eval_math_path).read_text(encoding="utf-8"))[:limit]
    prompts = [MATH_PROMPT.format(question=f"{p['Body']} {p['Question']}") for p in problems]
    outputs = greedy_numbers(model, tokenizer, prompts)
    correct = sum(first_number(o) == float(p["Answer"]) for o, p in zip(outputs, problems))
    return {"items": len(problems), "accuracy": correct / len(problems) if problems else 0.0,
            "examples": [{"prompt": p, "output": o} for p, o in list(zip(prompts, outputs))[:3]]}


def run_probe(model, tokenizer, corpus_path: str | Path, eval_math_path: str | Path, items: int,
              separator: str = "\n", seed: int = 0) -> dict:
    """Both copy probes and the math check; prints one line each."""
    model.eval()
    report = {}
    for tool in ("Calculator", "QA"):
        r = copy_probe(model, tokenizer, probe_items(corpus_path, tool, items, seed), separator)
        report[tool] = r
        if r["items"]:
            print(f"probe {tool}: loss at the answer with the correct call {r['loss_correct']:.2f}, "
                  f"none {r['loss_none']:.2f}, wrong result {r['loss_wrong']:.2f}; the call helps by ≥ 0.5 in "
                  f"{100 * r['helps_0.5']:.1f} % of {r['items']} items (kept at tau_f 0.5: "
                  f"{100 * r['kept_tau_0.5']:.1f} %, wrong results kept: {100 * r['wrong_kept_tau_0.5']:.1f} %)")
    m = math_accuracy(model, tokenizer, eval_math_path, items)
    report["eval_math"] = m
    print(f"probe eval_math: base model accuracy {100 * m['accuracy']:.1f} % of {m['items']} problems "
          f"(greedy, prompt {MATH_PROMPT!r})")
    return report


def cli_probe(cfg, model: str | None = None, as_json: bool = False) -> int:
    """``toolformer probe``: the copy probe and eval_math accuracy of a model
    folder (by default the config's base model)."""
    import json

    from transformers import AutoModelForCausalLM, AutoTokenizer

    from toolformer.modeling import set_threads
    from toolformer.world.generator import world_paths
    from toolformer.world.pretrain import base_model_dir

    set_threads(cfg.pretrain.threads)
    path = model or str(base_model_dir(cfg))
    if not Path(path, "config.json").exists():
        raise FileNotFoundError(f"{path}: model folder does not exist (run `toolformer pretrain` first)")
    paths = world_paths(cfg)
    report = run_probe(AutoModelForCausalLM.from_pretrained(path).eval(), AutoTokenizer.from_pretrained(path),
                       paths["corpus"], paths["eval_math"], cfg.pretrain.probe_items or 200, seed=cfg.seed)
    if as_json:
        print(json.dumps(report, indent=2, ensure_ascii=False))
    return 0
