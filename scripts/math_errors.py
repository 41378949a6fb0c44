"""Why the tuned model's arithmetic answers are wrong, from the predictions the evaluate stage wrote:

    python scripts/math_errors.py runs/demo --row toolformer --set math_unseen

Each item of the set counts once: right (the answer); no call; a call whose result is the answer but a wrong
answer after it; else by its first Calculator call against the numbers the problem states: the problem's two
numbers with the wrong operation or order, one of them and another number (the same one twice, a miscopied
one), none of them. One-step problems (two numbers) only.
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
KINDS = ("right", "no call", "right call, wrong answer", "operation or order wrong", "one operand wrong",
         "no operand from the problem")


def kind(item: dict) -> str:
    """The category of one prediction record (``prompt``, ``calls``, ``correct``, ``gold``)."""
    if item["correct"]:
        return "right"
    calls = [c for c in item.get("calls") or [] if c.get("tool") == "Calculator"]
    m = CALL.match(calls[0]["input"]) if calls else None
    if m is None:
        return "no call"
    if any(str(c.get("result")) == str(item["gold"]) for c in calls):
        return "right call, wrong answer"
    stated = [n.replace(",", "") for n in NUMBER.findall(item["prompt"])]
    a, b = m.group(1), m.group(3)
    if sorted([a, b]) == sorted(stated[:2]):
        return "operation or order wrong"
    if a in stated or b in stated:
        return "one operand wrong"
    return "no operand from the problem"


def count(path: Path) -> Counter:
    """Items of the predictions file ``path`` per kind."""
    kinds = Counter()
    with path.open(encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            try:
                kinds[kind(json.loads(line))] += 1
            except (json.JSONDecodeError, KeyError, TypeError) as e:
                raise ValueError(f"{path}:{lineno}: not a prediction record ({e})") from e
    return kinds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dir")
    parser.add_argument("--row", default="toolformer")
    parser.add_argument("--set", dest="split", default="math_unseen")
    args = parser.parse_args(argv)
    path = Path(args.run_dir) / "eval" / "predictions" / args.row / f"{args.split}.jsonl"
    if not path.exists():
        print(f"math_errors: {path} not found (toolformer evaluate writes it)", file=sys.stderr)
        return 2
    try:
        kinds = count(path)
    except ValueError as e:
        print(f"math_errors: {e}", file=sys.stderr)
        return 2
    total = sum(kinds.values())
    print(f"{args.row} {args.split}: {total} items; " + ", ".join(f"{k} {kinds[k]}" for k in KINDS))
    return 0


if __name__ == "__main__":
    sys.exit(main())
