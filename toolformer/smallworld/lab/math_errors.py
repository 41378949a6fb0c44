"""Why the tuned model's arithmetic answers are wrong, from the predictions the evaluate stage wrote:

    python -m toolformer.smallworld.lab.math_errors runs/demo --row toolformer --set math_unseen [--by-form]

Each item of the set counts once: right (the answer); no call; a call opened right after an operator
(``6080 + [Calculator(…``: the answer then reads as a sum, whatever the call returns); a call whose result is
the answer but a wrong answer after it; else by its first Calculator call against the numbers the problem
states: the problem's two numbers with the wrong operation or order, one of them and another number (the same
one twice, a miscopied one), none of them (the last three are meant for one-step problems). ``--by-form``
adds a line per form of the small world's evaluation set (``RUN_DIR/world/eval_<set>.json``, its ``Form``
field), fewest right first.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import Counter
from pathlib import Path

CALL = re.compile(r"\s*(-?[\d.]+)\s*([-+*/x×])\s*(-?[\d.]+)\s*$")
NUMBER = re.compile(r"\d[\d,]*")
KINDS = ("right", "no call", "call after an operator", "right call, wrong answer", "operation or order wrong",
         "one operand wrong", "no operand from the problem")
AFTER_OPERATOR = re.compile(r"\d\s*[-+*/x×]\s*\[[A-Za-z_]")  # "6080 + [Calculator(": a call where an operand goes


def kind(item: dict) -> str:
    """The category of one prediction record (``prompt``, ``calls``, ``correct``, ``gold``)."""
    if item["correct"]:
        return "right"
    calls = [c for c in item.get("calls") or [] if c.get("tool") == "Calculator"]
    m = CALL.match(calls[0]["input"]) if calls else None
    if m is None:
        return "no call"
    if AFTER_OPERATOR.search(item.get("output") or ""):
        return "call after an operator"
    if any(str(c.get("result")) == str(item["gold"]) for c in calls):
        return "right call, wrong answer"
    stated = [n.replace(",", "") for n in NUMBER.findall(item["prompt"])]
    a, b = m.group(1), m.group(3)
    if sorted([a, b]) == sorted(stated[:2]):
        return "operation or order wrong"
    if a in stated or b in stated:
        return "one operand wrong"
    return "no operand from the problem"


def kinds_by_id(path: Path) -> dict[str, str]:
    """The kind of each item of the predictions file ``path``, by its ``id`` (its line number when it has none)."""
    kinds = {}
    with path.open(encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            try:
                record = json.loads(line)
                kinds[str(record.get("id", lineno))] = kind(record)
            except (json.JSONDecodeError, KeyError, TypeError, AttributeError) as e:
                raise ValueError(f"{path}:{lineno}: not a prediction record ({e})") from e
    return kinds


def forms_of(path: Path) -> dict[str, str]:
    """The form of each item of a small-world evaluation file (a JSON list with ``Form``), by its index, the id
    the evaluate stage gives an item without one."""
    try:
        items = json.loads(path.read_text(encoding="utf-8"))
        return {str(item.get("ID", i)): item["Form"] for i, item in enumerate(items)}
    except (OSError, json.JSONDecodeError, KeyError, TypeError, AttributeError) as e:
        raise ValueError(f"{path}: not a small-world evaluation file with a Form per item ({e})") from e


def by_form(kinds: dict[str, str], forms: dict[str, str]) -> list[str]:
    """One line per form: right of all, then the wrong items' kinds; fewest right first."""
    per_form: dict[str, Counter] = {}
    for item_id, k in kinds.items():
        per_form.setdefault(forms.get(item_id, "(no form)"), Counter())[k] += 1
    lines = []
    for form, c in sorted(per_form.items(), key=lambda fc: (fc[1]["right"] / sum(fc[1].values()), fc[0])):
        wrong = ", ".join(f"{k} {c[k]}" for k in KINDS[1:] if c[k])
        lines.append(f"  {form}: {c['right']}/{sum(c.values())} right" + (f"; {wrong}" if wrong else ""))
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dir")
    parser.add_argument("--row", default="toolformer")
    parser.add_argument("--set", dest="split", default="math_unseen")
    parser.add_argument("--by-form", action="store_true", help="a line per form of the world's evaluation set")
    args = parser.parse_args(argv)
    path = Path(args.run_dir) / "eval" / "predictions" / args.row / f"{args.split}.jsonl"
    if not path.exists():
        print(f"math_errors: {path} not found (toolformer evaluate writes it)", file=sys.stderr)
        return 2
    try:
        per_item = kinds_by_id(path)
        forms = forms_of(Path(args.run_dir) / "world" / f"eval_{args.split}.json") if args.by_form else None
    except ValueError as e:
        print(f"math_errors: {e}", file=sys.stderr)
        return 2
    kinds = Counter(per_item.values())
    print(f"{args.row} {args.split}: {len(per_item)} items; " + ", ".join(f"{k} {kinds[k]}" for k in KINDS))
    if forms is not None:
        print("\n".join(by_form(per_item, forms)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
