"""Stage ``evaluate``: the paper's comparison of models and decoding modes.

Rows (models or modes) by columns (evaluation sets):

* ``base``: ``model.path``, tools disabled (it never learned calls);
* ``toolformer_disabled``: the tuned model (``finetune.output_dir`` or
  ``RUN_DIR/model``) with p(call-start) = 0;
* ``toolformer``: the tuned model, calling tools by the top-k rule;
* every ``evaluate.extra_models`` entry (e.g. a control tuned without calls,
  or the tuned model with its own ``max_calls``: chained calls).

A row whose model folder has a ``toolformer.json`` runs with the tools, tool
data and call style it records (``evaluate.tools_from: model``; ``config``
uses this config's for every row); an enabled tool whose data is missing
stops the stage before any work, naming the file. Decoding follows this
config's ``evaluate`` section (a task's own ``max_new_tokens`` and an extra
row's own ``max_calls`` go over it). ``results.json`` says per row which
tools and data were used (``tool_setup``) and its ``max_calls``.

Each (row, task) writes its per-item predictions to
``OUT/predictions/<row>/<task>.jsonl``; ``OUT/results.json`` holds accuracy
and call rate per cell (fractions in [0, 1]), the calls made and the
malformed ones by kind (unknown tool, unparsable input, closed without the
result marker, unclosed) with their rate per 100 calls, the mean over math
and QA tasks, and held-out perplexity; ``OUT/results.md`` is the table.
``evaluate.constrained`` decodes the rows with tools with constrained calls
(:mod:`toolformer.lm.constrain`). ``OUT`` is
``evaluate.output_dir`` or ``RUN_DIR/eval``; the manifest goes to
``RUN_DIR/evaluate``.
"""

from __future__ import annotations

import gc
import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
from tqdm.auto import tqdm

from toolformer.config.evaluation import TaskConfig
from toolformer.config.schema import PipelineConfig
from toolformer.lm.generate import Generation, generate_with_tools, load_model_folder
from toolformer.lm.modelfolder import check_tool_data, setup_line, tool_setup, with_folder_tools
from toolformer.lm.modeling import _check_local, document_start, model_window, set_threads
from toolformer.lm.rows import IGNORE_INDEX, row_nlls
from toolformer.lm.textpos import marker_token_ids
from toolformer.rundir.files import atomic_write_text, dumps, iter_jsonl
from toolformer.rundir.folder import versions
from toolformer.stages import StageResult, stage_options, start
from toolformer.stages.evalreport import (
    results_markdown,
    summary_line,
)
from toolformer.tasks import TaskData, TaskFormatError, default_max_words, gold_numbers, load_task
from toolformer.tasks.score import (
    call_counts,
    file_counts,
    holds_call,
    merge_call_counts,
    score_counts,
    score_output,
)
from toolformer.tools.calls import get_style
from toolformer.tools.sandbox import Sandbox, build_sandbox

PPL_TOKENS = 16384  # token budget of one perplexity forward
PPL_LOGIT_BYTES = 1 << 30  # float32 logits of one perplexity forward: Gemma's 262,144 rows take 1,024 tokens


def ppl_token_budget(model) -> int:
    """Tokens of one perplexity forward: :data:`PPL_TOKENS`, fewer where the logits would pass
    :data:`PPL_LOGIT_BYTES` (at least one row is always taken)."""
    from toolformer.lm.modeling import logit_token_budget

    return logit_token_budget(model, PPL_TOKENS, PPL_LOGIT_BYTES)


@dataclass
class EvalVariant:
    name: str
    path: str
    tools: bool
    tuned: bool = False
    max_calls: int = 0  # 0: evaluate.max_calls
    top_k_trigger: int = 0  # 0: evaluate.top_k_trigger

    @property
    def variant(self) -> bool:
        """A decoding variant of its model (its own max_calls or trigger): no perplexity of its own."""
        return bool(self.max_calls or self.top_k_trigger)


def tuned_model_path(cfg: PipelineConfig) -> str:
    return cfg.finetune.output_dir or str(Path(cfg.run_dir) / "model")


def plan_rows(cfg: PipelineConfig) -> tuple[list[EvalVariant], dict[str, str]]:
    """The rows to run and the rows skipped (name -> reason). A missing model
    folder is an error, except the tuned rows when ``require_tuned`` is false."""
    ev = cfg.evaluate
    tuned = tuned_model_path(cfg)
    builtin = {"base": EvalVariant("base", cfg.model.path, False),
               "toolformer_disabled": EvalVariant("toolformer_disabled", tuned, False, True),
               "toolformer": EvalVariant("toolformer", tuned, True, True)}
    rows = [builtin[r] for r in ev.rows] + [EvalVariant(m.name, m.path, m.tools, max_calls=m.max_calls,
                                                        top_k_trigger=m.top_k_trigger)
                                            for m in ev.extra_models]
    kept, skipped = [], {}
    for row in rows:
        if not row.path:
            raise ValueError(f"evaluate: row {row.name!r}: no model path configured (model.path)")
        if row.tuned and not Path(row.path).is_dir():
            msg = f"tuned model folder {row.path} does not exist (run the finetune stage first)"
            if ev.require_tuned:
                raise FileNotFoundError(f"evaluate: row {row.name!r}: {msg}; or set evaluate.require_tuned=false")
            skipped[row.name] = msg
            continue
        _check_local(row.path, f"evaluate: row {row.name!r}: model")  # a hub id passes
        kept.append(row)
    return kept, skipped


def row_configs(cfg: PipelineConfig, rows: list[EvalVariant]) -> dict[str, tuple[PipelineConfig, dict | None]]:
    """Per row: (the config it runs with, which tools and data it uses when it
    calls tools). Tool data is checked here, before any work."""
    out = {}
    for row in rows:
        from_folder = cfg.evaluate.tools_from == "model" and Path(row.path).is_dir()
        row_cfg, spec, trust = (with_folder_tools(cfg, row.path, cfg.evaluate.trust_folder_tools) if from_folder
                                else (cfg, None, None))
        if row.tools:
            if trust is not None:
                trust.enforce(row_cfg.tools)
                if trust.note():
                    print(f"evaluate: row {row.name!r}: {trust.note()}")
            for note in check_tool_data(row_cfg.tools, row.path, spec):
                print(f"evaluate: row {row.name!r}: {note}")
        out[row.name] = (row_cfg, tool_setup(row_cfg, row.path, spec, trust=trust) if row.tools else None)
    return out


def load_tasks(cfg: PipelineConfig) -> list[tuple[TaskConfig, str, TaskData]]:
    out = []
    for tc in cfg.evaluate.tasks:
        fmt, data = load_task(tc.path, tc.format, tc.max_items)
        if tc.kind == "math":  # a QA-format file scored as math: its answers must be numbers
            bad = [i for i in data.items if not gold_numbers(i.answers[0])]
            data.skipped += [{"id": i.id, "where": f"{tc.path}: item {i.id}", "reason": "answer is not a number",
                              "detail": repr(i.answers[0])} for i in bad]
            data.items = [i for i in data.items if gold_numbers(i.answers[0])]
            if not data.items:
                raise TaskFormatError(f"{tc.path}: no item has a number as its answer (task {tc.name!r} is math)")
        out.append((tc, fmt, data))
    return out


def read_texts(path: str, max_docs: int = 0) -> list[str]:
    """The ``text`` of every JSONL line of the held-out perplexity set."""
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"{p}: perplexity file not found (evaluate.perplexity_path)")
    texts = []
    for n, rec in iter_jsonl(p):
        if not isinstance(rec.get("text"), str):
            raise ValueError(f"{p}:{n}: expected an object with a string `text`")
        texts.append(rec["text"])
        if max_docs and len(texts) >= max_docs:
            break
    if not texts:
        raise ValueError(f"{p}: no texts")
    return texts


@torch.no_grad()
def perplexity(model, tok, texts: list[str], window: int, desc: str = "perplexity",
               without: list[int] | tuple[int, ...] = ()) -> tuple[float, int, float]:
    """exp(mean NLL per token) over ``texts``, each after its document start (BOS, else EOS) cut into
    non-overlapping windows; returns (perplexity, tokens scored, perplexity
    with the tokens ``without`` disallowed: the distribution a model decodes
    from with tools disabled, the call-start tokens taken out and the rest
    renormalised)."""
    device = next(model.parameters()).device
    chunks = []
    for t in texts:
        ids = document_start(tok) + tok.encode(t, add_special_tokens=False)
        chunks += [ids[s : s + window] for s in range(0, len(ids), window) if len(ids[s : s + window]) > 1]
    chunks.sort(key=len)
    pad = tok.pad_token_id if tok.pad_token_id is not None else 0
    budget = ppl_token_budget(model)
    nll, nll_without, count, i = 0.0, 0.0, 0, 0
    bar = tqdm(total=len(chunks), desc=desc, unit="seq", leave=False)
    while i < len(chunks):
        j = i + 1  # chunks are sorted by length: grow the batch while it fits the token budget
        while j < len(chunks) and (j + 1 - i) * len(chunks[j]) <= budget:
            j += 1
        group = chunks[i:j]
        width = max(len(c) for c in group)
        rows = torch.tensor([c + [IGNORE_INDEX] * (width - len(c)) for c in group])  # (B, T) padded right
        group_nll, group_without, group_tokens = row_nlls(model, rows, pad, device, without)  # (B,) each
        nll += float(group_nll.sum())
        nll_without += float(group_without.sum())
        count += int(group_tokens.sum())
        i += len(group)
        bar.update(len(group))
    bar.close()
    return math.exp(nll / count), count, math.exp(nll_without / count)


def evaluate_task(model, tok, row: EvalVariant, tc: TaskConfig, fmt: str, data: TaskData, sandbox, cfg) -> list[dict]:
    """Generate for every item of a task (batched, similar lengths together) and score it."""
    ev, style = cfg.evaluate, get_style(cfg.calls.style)
    items = data.items
    prompts = [tc.prompt.replace("{question}", it.question) for it in items]
    order = sorted(range(len(items)), key=lambda i: len(prompts[i]))
    gens: dict[int, Generation] = {}  # item index -> its generation
    max_words = word_window(tc, fmt)
    bar = tqdm(total=len(items), desc=f"evaluate {row.name} {tc.name}", unit="item")
    for s in range(0, len(order), ev.batch_size):
        idx = order[s : s + ev.batch_size]
        out = generate_with_tools(
            model, tok, [prompts[i] for i in idx], sandbox, style,
            max_new_tokens=tc.max_new_tokens or ev.max_new_tokens, top_k_trigger=row.top_k_trigger or ev.top_k_trigger,
            max_calls=row.max_calls or ev.max_calls, disabled=not row.tools,
            dates=[items[i].date for i in idx], tools=set(sandbox.tools) if sandbox else None,
            batch_size=ev.batch_size, window=model_window(model, cfg.model), constrained=ev.constrained,
            max_input_chars=cfg.tools.max_input_chars,
        )
        gens.update(zip(idx, out))
        bar.update(len(idx))
    bar.close()
    records = []
    for i, (it, prompt) in enumerate(zip(items, prompts)):
        g = gens[i]
        scored = score_output(it, g.text, tc.kind, max_words, tc.decimals, style)
        records.append({"id": it.id, "prompt": prompt, "output": g.text, "output_without_calls": g.text_without_calls,
                        "calls": g.calls, **{k: v for k, v in scored.items() if k != "id"}})
    return records


def word_window(tc: TaskConfig, fmt: str) -> int:
    """QA: the words of the output searched for the answer (the task's, or the paper's for the format)."""
    return tc.max_words or default_max_words(fmt)


def task_summary(tc: TaskConfig, fmt: str, data: TaskData) -> dict:
    """A task's entry in results.json: the file, the prompt, and what was scored and skipped."""
    fc = file_counts(data, tc.kind, word_window(tc, fmt))
    return {"path": tc.path, "format": fmt, "kind": tc.kind, "n": len(data.items), "left_out": fc["skipped"],
            "in_file": fc["in_file"], "skip_reasons": fc["skip_reasons"],
            "golds_longer_than_window": fc.get("golds_longer_than_window"), "prompt": tc.prompt,
            "max_words": word_window(tc, fmt) if tc.kind == "qa" else None,
            "max_new_tokens": tc.max_new_tokens or None}


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _load_row_model(cfg: PipelineConfig, path: str):
    return load_model_folder(cfg, path)


def run_stage(cfg: PipelineConfig, force: bool = False, **options: Any) -> StageResult:
    """Evaluate every row on every task (see the module docstring); the stage takes no ``options``."""
    stage_options("evaluate", options)
    ev = cfg.evaluate
    if not ev.tasks and not ev.perplexity_path:
        raise ValueError("evaluate.tasks: no evaluation sets configured (and no evaluate.perplexity_path)")
    rows, skipped = plan_rows(cfg)  # fail on a missing model or tool data before any work
    configs = row_configs(cfg, rows)
    tasks = load_tasks(cfg)
    texts = read_texts(ev.perplexity_path, ev.perplexity_max_docs) if ev.perplexity_path else None
    # Rerun when a model or an evaluation set was rewritten in place (a new fine-tune, a regenerated world).
    inputs = {f"model:{r.name}": r.path for r in rows} | {f"task:{tc.name}": tc.path for tc, _, _ in tasks}
    if ev.perplexity_path:
        inputs["perplexity"] = ev.perplexity_path
    run = start(cfg, "evaluate", force, inputs=inputs)
    if run.skipped:
        return run.result()
    out_dir = Path(ev.output_dir or Path(cfg.run_dir) / "eval")
    for name, why in skipped.items():
        print(f"evaluate: row {name!r} skipped: {why}")
    for tc, _, data in tasks:
        atomic_write_text(out_dir / "rejected" / f"{tc.name}.jsonl", "".join(dumps(r) + "\n" for r in data.skipped))
        if data.skipped:
            why = ", ".join(f"{n:,} {reason}" for reason, n in data.reasons().items())
            print(f"evaluate: task {tc.name!r}: {len(data.skipped):,} of {data.total:,} records skipped ({why}; "
                  f"{out_dir / 'rejected' / (tc.name + '.jsonl')})")
    for name, (_, setup) in configs.items():
        if setup is not None:
            print(f"evaluate: row {name!r}: {setup_line(setup)}")
    set_threads(cfg.model.threads)

    sandboxes: dict[str, Sandbox] = {}  # one per set of tool settings and call style
    try:
        results = evaluate_rows(cfg, rows, tasks, texts, configs, out_dir, sandboxes)
    finally:
        for sandbox in sandboxes.values():
            sandbox.close()  # stops the MCP servers
    summary = {
        "rows": results,
        "models": {r.name: r.path for r in rows},
        "skipped_rows": skipped,
        "tasks": {tc.name: task_summary(tc, fmt, d) for tc, fmt, d in tasks},
        "perplexity": {"path": ev.perplexity_path, "documents": len(texts)} if texts else None,
        "decoding": {"top_k_trigger": ev.top_k_trigger, "max_calls": ev.max_calls,
                     "max_new_tokens": ev.max_new_tokens, "call_style": cfg.calls.style,
                     "constrained": ev.constrained},
        "seed": cfg.seed, "config_hash": run.hash, "versions": versions(),
    }
    atomic_write_text(out_dir / "results.json", json.dumps(summary, indent=2, ensure_ascii=False) + "\n")
    atomic_write_text(out_dir / "results.md", results_markdown(summary))
    counts = {"rows": len(rows), "tasks": len(tasks), "skipped_rows": sorted(skipped),
              "per_row": {r: {"items": sum(c["n"] for c in v["tasks"].values()),
                              "correct": sum(c["correct"] for c in v["tasks"].values()),
                              "with_calls": sum(c["with_calls"] for c in v["tasks"].values())}
                          for r, v in results.items()}}
    run.stage.finish(run.hash, cfg.seed, counts, output_dir=str(out_dir), results=str(out_dir / "results.json"))
    print(summary_line(summary, out_dir))
    return run.result(summary)


def _release_memory() -> None:
    """Return the memory of models no longer referenced (before loading the next)."""
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def _row_cells(model, tok, row: EvalVariant, tasks, sandbox, cfg: PipelineConfig, out_dir: Path) -> dict:
    """Accuracy and call rate of one row on every task; per-item predictions written."""
    cells = {}
    for tc, fmt, data in tasks:
        records = evaluate_task(model, tok, row, tc, fmt, data, sandbox, cfg)
        atomic_write_text(out_dir / "predictions" / row.name / f"{tc.name}.jsonl",
                          "".join(dumps(r) + "\n" for r in records))
        counts = score_counts(records)
        style = get_style(cfg.calls.style)
        n, with_calls = counts["scored"], sum(holds_call(r["output"], style) for r in records)
        cells[tc.name] = {"accuracy": counts["accuracy"], "call_rate": with_calls / n, "n": n,
                          "correct": counts["correct"], "with_calls": with_calls,
                          "malformed_calls": counts["malformed_calls"],
                          **call_counts(records, style)}
    return cells


def evaluate_rows(cfg: PipelineConfig, rows: list[EvalVariant], tasks, texts: list[str] | None, configs: dict,
                  out_dir: Path, sandboxes: dict[str, Sandbox]) -> dict[str, dict]:
    """Every row on every task (a model folder loaded once for the rows that share it), and the perplexity of
    each model folder once (not for the toolformer row: it is the disabled row's model). ``configs``: per row,
    the config it runs with and its tool setup (:func:`row_configs`). ``sandboxes``: the sandboxes built, by
    tool settings and call style (the caller closes them)."""
    results: dict[str, dict] = {}
    ppl_by_path: dict[str, tuple[float, int, float]] = {}
    kinds = {tc.name: tc.kind for tc, _, _ in tasks}
    path = model = tok = None
    for row in rows:
        row_cfg, setup = configs[row.name]
        if row.path != path:
            model = tok = None
            _release_memory()
            model, tok = _load_row_model(row_cfg, row.path)
            path = row.path
        sandbox = None
        if row.tools:
            key = json.dumps([asdict(row_cfg.tools), row_cfg.calls.style], sort_keys=True, default=str)
            if key not in sandboxes:
                sandboxes[key] = build_sandbox(row_cfg)
            sandbox = sandboxes[key]
        cells = _row_cells(model, tok, row, tasks, sandbox, row_cfg, out_dir)
        ppl: tuple[float | None, int | None, float | None] = (None, None, None)
        if texts is not None and row.name != "toolformer" and not row.variant:  # not a decoding variant
            if row.path not in ppl_by_path:
                # Every row scored as it decodes with tools disabled: no call can start (the same tokens taken
                # out for the base and control models, which were never taught to call; none where the
                # vocabulary lacks the marker, a base model before the special style's markers were added).
                ppl_by_path[row.path] = perplexity(model, tok, texts, model_window(model, cfg.model),
                                                   desc=f"perplexity {row.name}",
                                                   without=marker_token_ids(tok, get_style(cfg.calls.style).start,
                                                                            required=False))
            ppl = ppl_by_path[row.path]
        n_items = sum(c["n"] for c in cells.values())
        n_calls = sum(c["with_calls"] for c in cells.values())
        results[row.name] = {
            "model": row.path, "tools": row.tools, "tool_setup": setup, "tasks": cells,
            "max_calls": (row.max_calls or cfg.evaluate.max_calls) if row.tools else 0,
            "top_k_trigger": (row.top_k_trigger or cfg.evaluate.top_k_trigger) if row.tools else 0,
            "arithmetic": _mean([c["accuracy"] for t, c in cells.items() if kinds[t] == "math"]),
            "qa": _mean([c["accuracy"] for t, c in cells.items() if kinds[t] == "qa"]),
            "perplexity": ppl[2], "perplexity_calls_allowed": ppl[0], "perplexity_tokens": ppl[1],
            "call_rate": n_calls / n_items if n_items else None, **merge_call_counts(list(cells.values())),
        }
    model = tok = None
    _release_memory()
    return results
