"""How a base model's greedy calculator calls on the call probe's prompts are wrong, operand by operand:

    python -m toolformer.smallworld.lab.call_errors data/world-base --config configs/demo.yaml \
        --set math_unseen --items 300
    python -m toolformer.smallworld.lab.call_errors data/world-base --svamp runs/novel.json --by-form

``--svamp PATH`` probes the problems of any SVAMP-format file instead of the world's set (for example the
phrasings of ``python -m toolformer.smallworld.lab.novel_phrasings``), with the same prompt; ``--by-form`` adds a
line per ``Form``.

The prompts are the call probe's (``toolformer.smallworld.probe.call_items``: an evaluation problem, the demo's
prompt and `` [Calculator(``). Each item counts once: exact; both operands right but the operation or order
wrong; else each wrong operand by kind — another number of the prompt, an operand missing (the same number
written twice), the same length with only the first digit wrong, one later digit wrong, several digits
wrong, another length — joined with ``+`` when two operands are wrong.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections import Counter, defaultdict

NUMBER = re.compile(r"\d[\d,]*")


def operand_kind(written: str, gold: tuple[str, str], prompt_numbers: list[str]) -> str:
    """How one written operand that is neither gold operand is wrong."""
    if written in prompt_numbers:
        return "other prompt number"
    best = min(gold, key=lambda g: sum(x != y for x, y in zip(g, written)) + abs(len(g) - len(written)))
    if len(best) != len(written):
        return "length"
    diff = [i for i, (x, y) in enumerate(zip(best, written)) if x != y]
    return "first digit" if diff == [0] else "one later digit" if len(diff) == 1 else "many digits"


def classify(written: str, argument: str, prompt: str) -> str:
    """The category of one greedy call ``written`` against the right ``argument`` (``a op b``)."""
    arg = written.replace(",", "").strip()
    if arg == argument:
        return "exact"
    a, _op, b = argument.split()
    numbers = re.findall(r"\d+", arg)
    if sorted(numbers) == sorted([a, b]):
        return "operands right, operation or order wrong"
    in_prompt = [n.replace(",", "") for n in NUMBER.findall(prompt)]
    kinds = [operand_kind(n, (a, b), in_prompt) for n in numbers if n not in (a, b)]
    return "wrong: " + ("+".join(kinds) if kinds else "an operand missing")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model", help="a model folder (a base model: data/world-base, RUN_DIR/base-model)")
    parser.add_argument("--config", default="configs/demo.yaml", help="the config whose world has the prompts")
    parser.add_argument("--set", default="math_unseen", choices=["math_seen", "math_unseen"])
    parser.add_argument("--items", type=int, default=300)
    parser.add_argument("--run-dir", default="runs/call-errors", help="where the world is generated")
    parser.add_argument("--examples", type=int, default=3, help="examples printed per category")
    parser.add_argument("--svamp", default="", help="an SVAMP-format JSON file to probe instead of --set")
    parser.add_argument("--by-form", action="store_true", help="exact calls per Form of the problems")
    args = parser.parse_args(argv)

    from transformers import AutoModelForCausalLM, AutoTokenizer

    from toolformer.lm.modeling import set_threads
    from toolformer.smallworld.config import load_smallworld
    from toolformer.smallworld.generator import ensure_world, world_paths
    from toolformer.smallworld.probe import call_items, greedy_numbers

    cfg = load_smallworld(args.config, [f"run_dir={args.run_dir}"])
    set_threads(cfg.pipeline.model.threads)
    if args.svamp:
        items = svamp_items(args.svamp, args.items)
    else:
        ensure_world(cfg)
        items = call_items(world_paths(cfg), args.items, cfg.seed)[args.set]
    model = AutoModelForCausalLM.from_pretrained(args.model).eval()
    tok = AutoTokenizer.from_pretrained(args.model)
    prompts = [f"{it['prompt']} [Calculator(" for it in items]
    written = [w.split(")")[0] for w in greedy_numbers(model, tok, prompts, max_new_tokens=30)]
    counts: Counter = Counter()
    examples = defaultdict(list)
    forms: dict[str, Counter] = defaultdict(Counter)
    for it, w in zip(items, written):
        k = classify(w, it["argument"], it["prompt"])
        counts[k] += 1
        forms[it.get("form", "")][k == "exact"] += 1
        examples[k].append(f"{it['prompt'][-90:]} -> {w.strip()} (right: {it['argument']})")
    print(f"{args.model}, {args.svamp or args.set}: {len(items)} greedy calls")
    for k, n in counts.most_common():
        print(f"{n:5d}  {k}")
        for e in examples[k][: args.examples]:
            print(f"         {e}")
    if args.by_form:
        for form, c in sorted(forms.items(), key=lambda kv: (kv[1][True] / sum(kv[1].values()), kv[0])):
            print(f"  {form or '(no form)'}: {c[True]}/{sum(c.values())} exact")
    return 0


def svamp_items(path: str, limit: int) -> list[dict]:
    """Call-probe items of an SVAMP-format file: the demo's prompt and the argument of ``Equation``."""
    import json
    from pathlib import Path

    from toolformer.smallworld.probe import math_prompt

    try:
        problems = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise SystemExit(f"{path}: cannot read an SVAMP JSON list: {exc}") from exc
    items = []
    for n, p in enumerate(problems[:limit]):
        try:
            a, op, b = str(p["Equation"]).strip("( )").split()
            prompt = math_prompt(p)
        except (KeyError, TypeError, ValueError) as exc:
            raise SystemExit(f"{path}: item {n}: needs Body, Question and a one-step Equation ({exc!r})") from exc
        items.append({"prompt": prompt, "argument": f"{a} {op} {b}", "form": p.get("Form", "")})
    return items


if __name__ == "__main__":
    sys.exit(main())
