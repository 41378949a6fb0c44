"""Copy probe: can the base model use a call put before the text?

The filter keeps a call only if its result, as a prefix before the whole
text, lowers the weighted loss L_i at the answer (docs/design.md: a model that
cannot copy from a prefix keeps nothing). For items of the annotation corpus
whose gold call is known, this computes, exactly as the filter does
(:class:`toolformer.lm.scoring.LossScorer`, sequence = [BOS] + tokens(z +
separator) + tokens(text)):

* ``loss_correct``: L_i(e(c, r)) with the right result,
* ``loss_none``: L_i(ε), no prefix,
* ``loss_no_result``: L_i(e(c, ε)),
* ``loss_wrong``: L_i(e(c, r')) with a wrong result r',

and the share of items where the correct call helps by at least 0.5
(``loss_none − loss_correct``) and where the filter would keep it at
tau_f = 0.5 (``min(loss_none, loss_no_result) − loss_correct``). After good
pre-training a prototype measured 0.13 / 1.69 / 3.07 for correct / none / wrong.

The **call probe** measures the other half of tool use, copying *into* the
call: after an evaluation prompt (training or held-out forms) and `` [tool(``,
the mean loss per token of the argument the tool needs against a corrupted
one (an operand with one digit altered, or − / ÷ operands swapped; the
question with another entity), and the argument the model writes greedily
(``greedy_ok``: the arithmetic call computes the answer, or the written
question names the subject; ``greedy_operands``: the arithmetic call has the
right two numbers, whatever the operator and order).

It also measures the base model's own accuracy on math_seen and math_unseen
(greedy, the prompt ``{Body} {Question} The answer is``, first number of the
output): it should be low, or a calculator has nothing to add.
"""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

import torch

from toolformer.lm.modeling import document_start, set_threads
from toolformer.lm.scoring import LossRequest, LossScorer
from toolformer.lm.textpos import tokenize_text
from toolformer.rundir.files import read_jsonl
from toolformer.rundir.folder import fmt_pct
from toolformer.smallworld.generator import base_model_dir, world_paths
from toolformer.tools.calls import get_style

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


def probe_items(corpus_path: str | Path, tool: str, limit: int, seed: int = 0, corpus_docs: int = 0) -> list[dict]:
    """Up to ``limit`` gold calls of ``tool`` from the annotation corpus (its
    first ``corpus_docs`` documents, 0 = all: not the two-step ones appended
    after them), each with its document text and a wrong result."""
    rows = read_jsonl(corpus_path)[: corpus_docs or None]
    rng = random.Random(seed)
    items = []
    for row in rows:
        for g in row.get("gold_calls", []):
            if g["tool"] == tool and not g.get("aside"):
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
    bos = tuple(document_start(tokenizer))
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
        variants = (None, *(style.render(it["tool"], it["input"], r) for r in ("", it["result"], it["wrong"])))
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
        "kept_tau_1.0": sum(min(r[0], r[1]) - r[2] >= 1.0 for r in rows) / n,
    }


@torch.no_grad()
def greedy_numbers(model, tokenizer, prompts: list[str], max_new_tokens: int = 10, batch_size: int = 64) -> list[str]:
    """Greedy continuation of each prompt (after BOS); returns the generated text.
    Prompts of equal token length are batched together, so nothing is padded."""
    bos = document_start(tokenizer)
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
    """The base model's accuracy on a math evaluation set with :data:`MATH_PROMPT`."""
    problems = json.loads(Path(eval_math_path).read_text(encoding="utf-8"))[:limit]
    prompts = [math_prompt(p) for p in problems]
    outputs = greedy_numbers(model, tokenizer, prompts)
    correct = sum(first_number(o) == float(p["Answer"]) for o, p in zip(outputs, problems))
    return {"items": len(problems), "accuracy": correct / len(problems) if problems else 0.0,
            "examples": [{"prompt": p, "output": o} for p, o in list(zip(prompts, outputs))[:3]]}


def math_prompt(p: dict) -> str:
    """The evaluation prompt of an SVAMP-format problem (``Body`` + ``Question`` in :data:`MATH_PROMPT`)."""
    return MATH_PROMPT.format(question=f"{p['Body']} {p['Question']}".strip())


# -- copying into the call ----------------------------------------------------------

def _altered(rng: random.Random, number: str) -> str:
    """``number`` with one digit changed (never the leading digit to 0)."""
    k = rng.randrange(len(number))
    digits = [d for d in "0123456789" if d != number[k] and (k or d != "0")]
    return number[:k] + rng.choice(digits) + number[k + 1 :]


def call_items(paths: dict, limit: int, seed: int = 0) -> dict[str, list[dict]]:
    """Prompts in seen and held-out forms with the call argument the tool
    needs and a corrupted one: for arithmetic, one digit of an operand altered
    (and, for − and ÷, the operands swapped); for QA, the question with its
    subject replaced by another entity of the same kind."""
    rng = random.Random(seed)
    out: dict[str, list[dict]] = {}
    for name in ("seen", "unseen"):
        problems = json.loads(Path(paths[f"eval_math_{name}"]).read_text(encoding="utf-8"))[:limit]
        items = []
        for p in problems:
            a, op, b = p["Equation"].strip("( )").split()
            wrong = [f"{_altered(rng, a)} {op} {b}", f"{a} {op} {_altered(rng, b)}"]
            if op in "-/":
                wrong.append(f"{b} {op} {a}")
            items.append({"prompt": math_prompt(p), "tool": "Calculator",
                          "argument": f"{a} {op} {b}", "wrong": rng.choice(wrong), "answer": str(p["Answer"]),
                          "form": p.get("Form", "")})
        out[f"math_{name}"] = items
        qs = read_jsonl(paths[f"eval_qa_{name}"])
        by_kind: dict[str, list[str]] = {}
        for q in qs:  # other entities of each relation, from the whole file
            by_kind.setdefault(q["relation"], []).append(q["subject"])
        items = []
        for q in qs[:limit]:
            others = [s for s in by_kind[q["relation"]] if s != q["subject"]]
            subject = q["subject"].removeprefix("River ")
            if not others or subject not in q["question"]:
                continue
            other = rng.choice(others).removeprefix("River ")
            items.append({"prompt": QA_PROMPT.format(question=q["question"]), "tool": "QA", "argument": q["question"],
                          "wrong": q["question"].replace(subject, other), "subject": subject})
        out[f"qa_{name}"] = items
    return out


@torch.no_grad()
def _argument_loss(model, tokenizer, prompt: str, argument: str) -> float:
    """Mean loss per token of ``argument`` + ``)`` after ``prompt`` + `` [tool(``."""
    bos = document_start(tokenizer)
    head = bos + tokenizer(prompt, add_special_tokens=False)["input_ids"]
    full = bos + tokenizer(prompt + argument + ")", add_special_tokens=False)["input_ids"]
    n = len(full) - len(head)
    device = next(model.parameters()).device
    ids = torch.tensor([full], device=device)  # (1, T)
    logp = torch.log_softmax(model(input_ids=ids).logits[0, :-1].float(), dim=-1)  # (T-1, V)
    target = ids[0, 1:]  # (T-1,)
    token_lp = logp.gather(1, target[:, None])[:, 0]  # (T-1,)
    return float(-token_lp[-n:].mean())


def call_probe(model, tokenizer, items: list[dict], max_new_tokens: int = 40) -> dict:
    """Loss of the right call argument against a corrupted one after the
    prompt and `` [tool(``, and the argument the model writes greedily."""
    if not items:
        return {"items": 0}
    style = get_style("plain")
    rows = []
    prompts = [f"{it['prompt']} {style.start}{it['tool']}(" for it in items]
    written = greedy_numbers(model, tokenizer, prompts, max_new_tokens=max_new_tokens)
    for it, prompt, out in zip(items, prompts, written):
        right = _argument_loss(model, tokenizer, prompt, it["argument"])
        wrong = _argument_loss(model, tokenizer, prompt, it["wrong"])
        arg = out.split(")")[0].strip()
        if it["tool"] == "Calculator":
            ok = arg.replace(",", "") == it["argument"] or _value(arg) == it["answer"]
            operands = sorted(_NUMBER.findall(arg.replace(",", ""))) == sorted(_NUMBER.findall(it["argument"]))
        else:
            ok = operands = it["subject"] in arg
        rows.append((right, wrong, arg == it["argument"], ok, arg, operands))
    by_form: dict[str, dict] = {}
    for it, r in zip(items, rows):
        if it.get("form"):
            counts = by_form.setdefault(it["form"], {"items": 0, "usable": 0})
            counts["items"] += 1
            counts["usable"] += bool(r[3])
    n = len(rows)
    return {"by_form": dict(sorted(by_form.items())),
            "items": n, "loss_right": sum(r[0] for r in rows) / n, "loss_wrong": sum(r[1] for r in rows) / n,
            "prefers_right": sum(r[0] < r[1] for r in rows) / n, "greedy_exact": sum(r[2] for r in rows) / n,
            "greedy_ok": sum(r[3] for r in rows) / n, "greedy_operands": sum(r[5] for r in rows) / n,
            "examples": [{"prompt": p, "written": r[4], "argument": it["argument"]}
                         for p, r, it in list(zip(prompts, rows, items))[:3]]}


def _value(expression: str) -> str | None:
    from toolformer.tools.base import ToolError
    from toolformer.tools.calculator import calculate

    try:
        return calculate(expression)
    except (ToolError, ValueError):
        return None


def run_call_probe(model, tokenizer, paths: dict, items: int, seed: int = 0, quiet: bool = False) -> dict:
    """:func:`call_probe` on every evaluation set; one line per set."""
    report = {}
    for name, its in call_items(paths, items, seed).items():
        r = call_probe(model, tokenizer, its)
        report[name] = r
        if r["items"] and not quiet:
            print(f"call probe {name}: argument loss right {r['loss_right']:.2f} vs corrupted {r['loss_wrong']:.2f} "
                  f"(right preferred in {fmt_pct(r['prefers_right'])}); greedy call exact "
                  f"{fmt_pct(r['greedy_exact'])}, usable {fmt_pct(r['greedy_ok'])} of {r['items']} (the "
                  f"operands or the subject right: {fmt_pct(r['greedy_operands'])})")
            if worst := weakest_forms(r["by_form"]):
                print(f"call probe {name}, usable calls of the weakest forms: {worst}")
    return report


def weakest_forms(by_form: dict[str, dict], limit: int = 6) -> str:
    """``form usable/items`` for the forms with unusable calls, the lowest share first."""
    weak = sorted((c["usable"] / c["items"], form, c) for form, c in by_form.items() if c["usable"] < c["items"])
    return ", ".join(f"{form} {c['usable']}/{c['items']}" for _, form, c in weak[:limit])


def run_probe(model, tokenizer, paths: dict, items: int, separator: str = "\n", seed: int = 0,
              corpus_docs: int = 0) -> dict:
    """The copy probes (on the first ``corpus_docs`` annotation documents, 0 = all), the call probe and the
    math check; prints one line each."""
    model.eval()
    report = {}
    for tool in ("Calculator", "QA"):
        r = copy_probe(model, tokenizer, probe_items(paths["corpus"], tool, items, seed, corpus_docs), separator)
        report[tool] = r
        if r["items"]:
            print(f"probe {tool}: loss at the answer with the correct call {r['loss_correct']:.2f}, "
                  f"none {r['loss_none']:.2f}, wrong result {r['loss_wrong']:.2f}; the call helps by ≥ 0.5 in "
                  f"{fmt_pct(r['helps_0.5'])} of {r['items']} items (kept at tau_f 0.5: "
                  f"{fmt_pct(r['kept_tau_0.5'])}, wrong results kept: {fmt_pct(r['wrong_kept_tau_0.5'])})")
    report["call"] = run_call_probe(model, tokenizer, paths, items, seed)
    for name in ("seen", "unseen"):
        m = math_accuracy(model, tokenizer, paths[f"eval_math_{name}"], items)
        report[f"math_{name}"] = m
        print(f"probe math_{name}: base model accuracy {fmt_pct(m['accuracy'])} of {m['items']} problems "
              f"(greedy, prompt {MATH_PROMPT!r})")
    return report


def cli_probe(cfg, model: str | None = None, as_json: bool = False) -> int:
    """``toolformer world probe``: the copy probes, the call probe and the math
    accuracy of a model folder (by default the config's base model)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    set_threads(cfg.pretrain.threads)
    path = model or str(base_model_dir(cfg))
    if not Path(path, "config.json").exists():
        raise FileNotFoundError(f"{path}: model folder does not exist (run `toolformer world pretrain` first)")
    report = run_probe(AutoModelForCausalLM.from_pretrained(path).eval(), AutoTokenizer.from_pretrained(path),
                       world_paths(cfg), cfg.pretrain.probe_items or 200, seed=cfg.seed,
                       corpus_docs=cfg.world.corpus_docs)
    if as_json:
        print(json.dumps(report, indent=2, ensure_ascii=False))
    return 0
