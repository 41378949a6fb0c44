"""Precision and recall against the gold calls of one tool's kept calls at other tau_f, from a finished filter
stage (no model runs):

    python -m toolformer.smallworld.lab.gold_by_tau runs/demo --tool Calculator --tau 1.0 1.25 1.5

One line per tau_f; the run's documents must carry gold calls (the small world's do). A tau_f below the run's needs
the filter rerun at it: the filter computes L(e(c, ε)) only where L(ε) − L⁺ reaches its own tau_f.
"""

from __future__ import annotations

import argparse
import sys

from toolformer.inspect.sweep import gold_by_tau
from toolformer.rundir.folder import fmt_pct


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dir")
    parser.add_argument("--tool", default="Calculator")
    parser.add_argument("--tau", type=float, nargs="+", default=[0.5, 0.75, 1.0, 1.25])
    args = parser.parse_args(argv)
    try:
        rows = gold_by_tau(args.run_dir, args.tool, args.tau)
    except (FileNotFoundError, ValueError) as e:
        print(f"gold_by_tau: {e}", file=sys.stderr)
        return 2
    for r in rows:
        precision = "–" if r["precision"] is None else fmt_pct(r["precision"])
        print(f"{args.tool} tau_f {r['tau']:g}: kept {r['kept']:,} ({r['kept_right']:,} right), "
              f"precision {precision}, recall {fmt_pct(r['recall'])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
