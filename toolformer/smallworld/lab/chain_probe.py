"""Where a base model copies the second step of a two-step problem from a call before the text.

For generated two-step problems of the demo's world (``c1 = a op b``, then ``c = c1 op d``), the copy probe
(:func:`toolformer.smallworld.probe.copy_probe`: the weighted loss at the answer with the correct call before the
whole text, with none, with a wrong result) of each call at its answer, in several phrasings of the worked answer.
``kept`` is the share of items whose call the filter would keep at tau_f 0.5.

    python -m toolformer.smallworld.lab.chain_probe [--model data/world-base] [--items 120]
"""

from __future__ import annotations

import argparse
import random


def _second(joiner: str, inline: bool):
    """The second step's probe: the worked answer up to ``joiner``, the first call inline or not."""
    return (lambda it, call: f"{it.prompt()} The answer is {call + ' ' if inline else ''}{it.c1} {it.form.second} "
                             f"{it.d}{joiner}", lambda it: f"{it.c}.", 1)


PHRASINGS = {
    # name: (text before the answer, the answer and after, which step is probed)
    "first step, after 'The answer is'": (lambda it, call: f"{it.prompt()} The answer is ",
                                          lambda it: f"{it.c1} {it.form.second} {it.d}, which is {it.c}.", 0),
    "second step, after '= '": _second(" = ", False),
    "second step, after '= ', first call inline (a chain round)": _second(" = ", True),
    "second step, after ', which is ' (the world's worked answer)": _second(", which is ", False),
    "second step, after ', which is ', first call inline (a chain round)": _second(", which is ", True),
    "second step, after ' makes ', first call inline": _second(" makes ", True),
    "second step, after '. So the answer is ', first call inline": _second(". So the answer is ", True),
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="data/world-base", help="base model folder (default: the shipped one)")
    ap.add_argument("--config", default="configs/demo.yaml", help="the world's config (default: the demo's)")
    ap.add_argument("--items", type=int, default=120)
    args = ap.parse_args()

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from toolformer.rundir.folder import fmt_pct
    from toolformer.smallworld.arithmetic import split_forms
    from toolformer.smallworld.config import load_smallworld
    from toolformer.smallworld.corpora import Writer
    from toolformer.smallworld.entities import build_world, split_questions
    from toolformer.smallworld.probe import copy_probe
    from toolformer.tools.calls import get_style

    torch.set_num_threads(1)
    wc = load_smallworld(args.config).world
    world = build_world(random.Random(wc.seed), wc.towns, wc.rivers, wc.ranges, wc.seas, wc.people, wc.events)
    split = split_forms(wc.seed, wc.heldout_forms_per_op, wc.heldout_vocabulary, wc.extra_train_forms,
                        wc.scene_forms)
    questions = {k: tr for k, (tr, _) in split_questions(wc.seed, wc.heldout_questions).items()}
    writer = Writer(world, random.Random(f"{wc.seed}-chain-probe"), [], split, questions)
    items = [writer.twostep() for _ in range(args.items)]
    style = get_style("plain")
    model = AutoModelForCausalLM.from_pretrained(args.model).eval()
    tok = AutoTokenizer.from_pretrained(args.model)
    print(f"{args.items} two-step items, model {args.model}; loss at the answer: none / correct call; kept at 0.5")
    for name, (head, tail, step) in PHRASINGS.items():
        rows = []
        for it in items:
            call = style.render("Calculator", it.calls[0], it.c1)
            before = head(it, call)
            result = (it.c1, it.c)[step]
            rows.append({"text": before + tail(it), "char_start": len(before), "tool": "Calculator",
                         "input": it.calls[step], "result": result, "wrong": str(int(result) + 1)})
        r = copy_probe(model, tok, rows)
        print(f"{name}: {r['loss_none']:.2f} / {r['loss_correct']:.2f}; kept {fmt_pct(r['kept_tau_0.5'], digits=0)} "
              f"at 0.5, {fmt_pct(r['kept_tau_1.0'], digits=0)} at 1.0, of {r['items']}")


if __name__ == "__main__":
    main()
