"""``toolformer tasks``, ``score`` and ``lm-eval``: evaluation files checked and written as lm-eval tasks, any
system's outputs scored with the paper's metrics, lm-evaluation-harness with the ``toolformer`` model."""

from __future__ import annotations

import json
import sys
from pathlib import Path


def cmd_tasks(args) -> int:
    from toolformer.tasks.score import check_report

    if args.tasks_command == "lmeval":
        return cmd_tasks_lmeval(args)
    report = check_report(Path(args.file), args.format)
    if args.json:
        print(json.dumps(report, indent=2, ensure_ascii=False))
        return 0
    print(f"{report['file']}: format {report['format']} ({report['kind']}); {report['in_file']:,} records in the "
          f"file, {report['loaded']:,} items loaded, {report['skipped']:,} skipped")
    for reason, n in report["skip_reasons"].items():
        print(f"  skipped {n:,}: {reason}")
        for ex in report["examples"][reason]:
            print(f"    {ex['where']} (id {ex['id']}){': ' + ex['detail'] if ex['detail'] else ''}")
    if report["first_item"]:
        first = report["first_item"]
        print(f"  first item: id {first['id']}: {first['question'][:120]!r} -> {first['answers'][:3]}")
    return 0


def cmd_tasks_lmeval(args) -> int:
    """``tasks lmeval FILE --name NAME --out DIR``: an lm-evaluation-harness task of a task file."""
    from toolformer.integrations.lmeval_tasks import write_task

    done = write_task(args.file, args.out, args.name, args.format, args.kind, args.prompt, args.max_words,
                      args.decimals, args.max_items, args.max_new_tokens, args.call_style, args.force)
    dropped = f", {done['not_numbers']:,} without a number left out" if done["not_numbers"] else ""
    print(f"tasks lmeval: {done['task']}: {done['items']:,} items ({done['format']}, {done['kind']}; "
          f"{done['skipped']:,} records skipped{dropped}) in {done['folder']}; run: toolformer lm-eval run --model "
          f"toolformer --model_args pretrained=MODEL --tasks {done['task']} --include_path {done['folder']}")
    return 0


def cmd_lm_eval(args) -> int:
    """``lm-eval ARGS``: lm-evaluation-harness's own command line, with the model ``toolformer`` registered."""
    from toolformer.integrations.lmeval import run_cli

    return run_cli(args.args)


def cmd_score(args) -> int:
    from toolformer.rundir.files import atomic_write_text, dumps
    from toolformer.rundir.folder import fmt_pct
    from toolformer.tasks import KINDS, load_task
    from toolformer.tasks.score import read_predictions, score_file
    from toolformer.tools.calls import get_style

    preds = Path(args.predictions)
    if not preds.is_file():
        raise FileNotFoundError(f"{preds}: predictions file not found (--predictions)")
    out = Path(args.out) if args.out else preds.with_name(preds.name.removesuffix(".jsonl") + ".scores.jsonl")
    if out.resolve() in (preds.resolve(), Path(args.file).resolve()):
        raise ValueError(f"--out {out}: would overwrite an input; choose another file")
    fmt, data = load_task(args.file, args.format)
    outputs, problems = read_predictions(preds)
    for problem in problems[:5]:
        print(f"score: {problem}", file=sys.stderr)
    records, counts = score_file(data, outputs, args.kind or KINDS[fmt], fmt, args.max_words, args.decimals,
                                 get_style(args.call_style))
    atomic_write_text(out, "".join(dumps(r) + "\n" for r in records))
    counts = {"file": args.file, "format": fmt, "predictions": str(preds), "unusable_lines": len(problems),
              "results": str(out), **counts}
    if args.json:
        print(json.dumps(counts, indent=2, ensure_ascii=False))
    else:
        acc = fmt_pct(counts["accuracy"]) if counts["accuracy"] is not None else "n/a"
        print(f"score: {counts['correct']:,} of {counts['scored']:,} correct ({acc}); {counts['in_file']:,} records "
              f"in the file, {counts['skipped']:,} skipped; {counts['without_output']:,} items without an output, "
              f"{counts['malformed_calls']:,} malformed calls; per item: {out}")
    return 0
