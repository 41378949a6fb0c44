"""Word problems in phrasings the small world's generator never writes, as an SVAMP-style JSON file:

    python -m toolformer.smallworld.lab.novel_phrasings runs/novel.json [--per-form 12] [--seed 11] [--set a|b]
    toolformer run --config configs/demo.yaml run_dir=runs/novel "stages=[evaluate]" "evaluate.rows=[]" \\
        "evaluate.extra_models=[{name: tuned, path: runs/demo/model, tools: true}]" evaluate.perplexity_path= \\
        "evaluate.tasks=[{name: novel, path: runs/novel.json, format: svamp, kind: math,
                          prompt: '{question} The answer is'}]"

24 phrasings, 6 per operation, written for this check and used by no training text: other verbs, other sentence
orders, a question glued to the statement. They are a check of the small world's evidence, not a target: nothing
is chosen on them. Town names and object words are ones the seed-0 world's training text uses (none of its held-out
words). Numbers: + and - of four-digit numbers (the smaller subtracted), * of two two-digit numbers, / with a whole
quotient. The run folder of the evaluation is a new one, so the tuned model's run is not touched.

``--set b`` writes 24 other phrasings (forms ``novelb-*``), added later than set a, after set a had been used to
compare settings: set b is kept for a last check of a setting chosen on set a.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

TOWNS = ("Alwick", "Belstead", "Braedale", "Braemere", "Calgate", "Corbrook", "Doraby", "Dradale", "Eldford",
         "Falston", "Garby", "Halbrook", "Halmoor", "Hesby")
OBJECTS = ("bags", "barrels", "baskets", "bells", "boards", "books", "boxes", "candles", "combs", "crates", "cups",
           "eggs", "fish", "geese", "hats", "jars", "kettles", "lamps", "loaves", "maps")

PHRASINGS = {
    "+": ("{t} first counted {a} {o}. Later, {b} more {o} turned up. What is the count of {o} at {t} now?",
          "At {t} a crate of {a} {o} was joined by a crate of {b} {o}. Tell me how many {o} there are.",
          "Add {a} {o} from the north barn of {t} to {b} {o} from its south barn. What do you get?",
          "{t} holds {a} {o} in one shed and {b} {o} in another. Combined, how many {o}?",
          "A trader brought {a} {o} to {t}, and another trader brought {b} {o}. Count all the {o} brought.",
          "Put {a} {o} and {b} {o} into one cellar at {t}. How many {o} are in the cellar?"),
    "-": ("{t} started the week with {a} {o}; by Friday {b} were gone. How many {o} does {t} still hold?",
          "Out of {a} {o} at {t}, {b} broke. How many {o} are unbroken?",
          "{t} wants {a} {o} and has collected {b}. How many {o} are still to be collected?",
          "Of the {a} {o} stored at {t}, {b} were taken to market. Find the {o} that stayed.",
          "{t} had {a} {o} before the storm and {b} were lost. How many {o} survived?",
          "Take {b} {o} away from the {a} {o} at {t}. What remains?"),
    "*": ("{t} packs {b} {o} into every sack and fills {a} sacks. How many {o} is that?",
          "A stall at {t} sells {b} {o} each hour for {a} hours. Work out the number of {o} sold.",
          "There are {a} shelves at {t}, with {b} {o} on every shelf. How many {o} in total?",
          "{t} orders {a} boxes that hold {b} {o} apiece. How many {o} arrive?",
          "Each of the {a} wagons from {t} carries {b} {o}. How many {o} do the wagons carry?",
          "{b} {o} a week for {a} weeks: how many {o} does {t} make?"),
    "/": ("{t} spreads {a} {o} evenly over {b} carts. How many {o} go on one cart?",
          "If {a} {o} at {t} are split into {b} equal heaps, what does one heap hold?",
          "{b} workers at {t} share {a} {o} equally. How many {o} does each worker get?",
          "{t} needs to pack {a} {o} into crates of {b}. How many crates are filled?",
          "Split {a} {o} among {b} stalls at {t} so that every stall has the same. How many {o} per stall?",
          "A load of {a} {o} reached {t} in {b} equal trips. How many {o} came on each trip?"),
}
PHRASINGS_B = {
    "+": ("The {o} counted at {t} came to {a} before noon, {b} after noon. Give the full count of {o}.",
          "{a} {o} sat on the left shelf at {t}, {b} {o} on the right shelf. How many {o} sat on both shelves?",
          "From {t} come {a} {o} and another {b} {o}. What total do they make?",
          "{t} already owned {a} {o}, then a neighbour handed over {b} {o}. What number of {o} does {t} own now?",
          "Pile {b} {o} on top of {a} {o} at {t}. How big is the pile?",
          "A ledger at {t} lists {a} {o} in spring and {b} {o} in autumn. Over the year, how many {o}?"),
    "-": ("{t} kept {a} {o} until a buyer took {b}. How many {o} are left over?",
          "Of {a} {o}, {t} gave {b} to a neighbour. What number of {o} did {t} keep?",
          "{t} counted {a} {o} but {b} were cracked. How many good {o} are there?",
          "A cart left {t} with {a} {o} and dropped {b} on the road. How many {o} reached the market?",
          "From a heap of {a} {o} at {t}, {b} rolled away. How many {o} stayed in the heap?",
          "{t} has a stock of {o}. How many remain when {b} are removed from the {a} in it?"),
    "*": ("{t} stacks {a} crates with {b} {o} in each crate. Find how many {o} are stacked.",
          "{a} rows of {b} {o} stand behind the inn of {t}. How many {o} stand there?",
          "A baker at {t} uses {b} {o} per batch and bakes {a} batches. How many {o} are used?",
          "Every one of {a} children at {t} brought {b} {o}. Count the {o} the children brought.",
          "{t} ordered {a} lots of {b} {o}. What do the lots come to?",
          "For {a} days, {t} sent out {b} {o} daily. How many {o} were sent out?"),
    "/": ("{a} {o} are handed out equally to {b} houses at {t}. How many {o} does each house receive?",
          "{t} divides {a} {o} into {b} equal boxes. What is in one box?",
          "{b} carts at {t} are loaded evenly with {a} {o}. How many {o} does one cart get?",
          "{a} {o} were packed {b} to a bag at {t}. How many bags were packed?",
          "Share {a} {o} fairly between {b} friends at {t}. How many {o} does one friend get?",
          "{t} made {a} {o} over {b} days at a steady rate. How many {o} per day?"),
}
SETS = {"a": ("novel", PHRASINGS), "b": ("novelb", PHRASINGS_B)}
NAMES = {"+": "add", "-": "sub", "*": "mul", "/": "div"}
TYPES = {"+": "Addition", "-": "Subtraction", "*": "Multiplication", "/": "Common-Division"}


def numbers(op: str, rng: random.Random) -> tuple[int, int, int]:
    if op == "+":
        a, b = rng.randint(1000, 9999), rng.randint(1000, 9999)
        return a, b, a + b
    if op == "-":
        a = rng.randint(1000, 9999)
        b = rng.randint(100, a - 1)
        return a, b, a - b
    if op == "*":
        a, b = rng.randint(10, 99), rng.randint(10, 99)
        return a, b, a * b
    b, q = rng.randint(10, 99), rng.randint(10, 999)
    return b * q, b, q


def split(text: str) -> tuple[str, str]:
    """Body and question: at the last sentence end, else at ``:`` or the last comma."""
    for sep in (". ", ": ", ", "):
        body, found, question = text.rpartition(sep)
        if found:
            return body + found.strip(), question
    raise ValueError(f"no place to split the question off: {text!r}")


def items(per_form: int, seed: int, which: str = "a") -> list[dict]:
    rng = random.Random(seed)
    out = []
    prefix, table = SETS[which]
    for op, phrasings in table.items():
        for k, phrasing in enumerate(phrasings):
            for _ in range(per_form):
                a, b, answer = numbers(op, rng)
                body, question = split(phrasing.format(t=rng.choice(TOWNS), o=rng.choice(OBJECTS), a=a, b=b))
                out.append({"Body": body, "Question": question, "Equation": f"( {a} {op} {b} )", "Answer": answer,
                            "Type": TYPES[op], "Form": f"{prefix}-{NAMES[op]}-{k}"})
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--per-form", type=int, default=12)
    ap.add_argument("--seed", type=int, default=11)
    ap.add_argument("--set", default="a", choices=sorted(SETS), help="which 24 phrasings (default a)")
    a = ap.parse_args(argv)
    if a.per_form < 1:
        sys.exit(f"novel_phrasings: --per-form {a.per_form}: must be at least 1")
    made = items(a.per_form, a.seed, a.set)
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(made, indent=1) + "\n", encoding="utf-8")
    print(f"novel_phrasings: {len(made)} problems in {len(made) // a.per_form} phrasings → {a.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
