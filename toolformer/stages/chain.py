"""Stage ``chain``: more rounds of sample → execute → filter, one call at a time.

The paper proposes and filters every call of a document against the plain
text, so no call can use another call's result. With ``chain.rounds`` R > 1,
round r (2..R) takes every document with a call kept in the rounds before it,
puts those calls inline as build does (x* = x_<i, e(c, r), x_≥i; one call per
position, the largest L⁻ − L⁺) and runs the same proposers or sampler on that
text, at the positions after its first call where no call was kept yet. Of
those candidates it executes and filters only the chained ones: an input that
uses the result of a call inline before the candidate's position (a number or
a name of that result as a whole token span of the input: result `1800` in
`1800 + 192`, not in `18000` or `1800.5`; names case-insensitive). Any other
candidate has an input round 1 could propose at that position of the plain
text; it is dropped before execution and counted (``not_chained``). A chained
candidate whose result the text does not state within ``STATED_WITHIN`` (40)
characters after its position is dropped after execution (``not_stated``):
the filter weighs the next five tokens, and such a result cannot lower their
loss by tau_f.

* the rule proposer reads an earlier call's result as an earlier number of
  the text, the sampler sees it in its context;
* the filter judges a chained candidate with the earlier calls in the text, as
  the tuned model will read it (the call z still goes before the whole text:
  L⁻ and L⁺ as in the filter stage; tau_f is ``chain.tau_filter`` when set, for
  every tool, else the filter's).

A record's ``char_start`` is mapped back to the original document (its
``position`` stays the token index in the text it was scored on), so build
inserts the kept calls of every round into the original text together.

Writes ``RUN_DIR/chain/round-<r>/``: filter records in shards, beside each a
``part-<n>.counts.json`` (its seconds, ``not_chained`` and ``not_stated``), and the round's
manifest (a round whose manifest matches is skipped; an interrupted one
resumes after its last complete shard), then ``RUN_DIR/chain/manifest.json``
with the counts of every round: per tool ``candidates`` (the chained ones),
``scored``, ``kept``, ``read_ahead``, ``not_chained``, ``not_stated`` and ``kept_per_1000``;
per round ``seconds`` and ``candidates_per_s`` (scored candidates a second).
With R = 1 it writes only the manifest.
"""

from __future__ import annotations

import functools
import json
import re
import time
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from toolformer.config.load import config_hash
from toolformer.config.schema import PipelineConfig
from toolformer.corpus.records import ExecuteRecord, SampleRecord
from toolformer.lm.modeling import DTYPES, load, set_threads, with_weights
from toolformer.rundir.files import atomic_write_text, read_json
from toolformer.rundir.folder import StageFolder, fmt_pct, read_documents
from toolformer.rundir.parallel import Ranks
from toolformer.rundir.sharding import chunked, run_sharded
from toolformer.stages import StageResult, model_inputs, stage_options, start
from toolformer.stages.build import best_per_position, check_positions, read_kept, round_name
from toolformer.stages.filter import CandidateScorer, count_record
from toolformer.stages.sample import annotate_group, check_tools, make_samplers, tool_settings
from toolformer.tools import build_tools, close_tools
from toolformer.tools.lookahead import WORD, WORD_EDGE, numbers
from toolformer.tools.sandbox import build_sandbox


def inline(doc: dict, calls: list[dict], separator: str) -> dict:
    """``doc`` with ``calls`` (kept filter records) inline, as build inserts them, with ``spans``: for each call
    (start, end) of ``call_text + separator`` in the new text, in order, and ``results``: for each call its span
    and its result (start, end, result)."""
    text, spans, results, last, pos = [], [], [], 0, 0
    for c in sorted(calls, key=lambda c: int(c["char_start"])):
        at = int(c["char_start"])
        text.append(doc["text"][last:at])
        pos += at - last
        piece = c["call_text"] + separator
        text.append(piece)
        spans.append((pos, pos + len(piece)))
        results.append((pos, pos + len(piece), str(c.get("result") or "")))
        pos += len(piece)
        last = at
    text.append(doc["text"][last:])
    return {"doc_id": doc["doc_id"], "text": "".join(text), "date": doc.get("date"), "spans": spans,
            "results": results}


@functools.lru_cache(maxsize=8192)
def result_parts(result: str) -> tuple[frozenset[str], re.Pattern | None]:
    """What a later input may take from ``result``: its numbers, and a pattern (case-insensitive, whole words) of
    its names: the result itself, each run of capitalised words and each capitalised word (a lone word at a sentence
    start is no name: `The`)."""
    words = list(WORD.finditer(result))
    names = {result.strip().strip(".,;:!?\"'()")} if words else set()
    caps = [m for m in words if m.group(0)[0].isupper()]
    runs: list[list[re.Match]] = []
    for m in caps:  # runs of capitalised words with only spaces between them
        if runs and not result[runs[-1][-1].end():m.start()].strip():
            runs[-1].append(m)
        else:
            runs.append([m])
    opening = {m.start() for m in caps if result[: m.start()].rstrip()[-1:] in ("", ".", "!", "?")}
    names |= {result[run[0].start():run[-1].end()] for run in runs if len(run) > 1 or run[0].start() not in opening}
    names |= {m.group(0) for m in caps if m.start() not in opening}
    names.discard("")
    alts = "|".join(re.escape(n) for n in sorted(names, key=len, reverse=True))
    pattern = re.compile(rf"(?<!{WORD_EDGE})(?:{alts})(?!{WORD_EDGE})", re.IGNORECASE) if alts else None
    return frozenset(numbers(result)), pattern


def uses_result(call_input: str, result: str) -> bool:
    """Whether ``call_input`` holds a number or a name of ``result`` as a whole token span: result `1800` in
    `1800 + 192`, not in `18000` or `1800.5`; names case-insensitive."""
    result_numbers, names = result_parts(result)
    return bool(result_numbers & numbers(call_input)) or (names is not None and names.search(call_input) is not None)


def chained(doc: dict, char: int, call_input: str) -> bool:
    """Whether a candidate at ``char`` of ``doc`` (from :func:`inline`) uses the result of a call inline before
    it: only such a call can gain from the earlier calls (round 1 could propose any other on the plain text)."""
    return any(end <= char and uses_result(call_input, result) for _, end, result in doc["results"])


def states_result(text: str, char: int, result: str) -> bool:
    """Whether ``text`` states a number or a name of ``result`` within ``STATED_WITHIN`` characters from ``char``."""
    return uses_result(text[char:char + STATED_WITHIN], result)


def original_offset(spans: list[tuple[int, int]], char: int) -> int | None:
    """The offset in the original text of ``char`` of the text with calls inline; None inside a call."""
    shift = 0
    for s, e in spans:
        if s <= char < e:
            return None
        if e <= char:
            shift += e - s
    return char - shift


def _free(doc: dict, char: int, taken: set[int]) -> int | None:
    """The original offset of a candidate at ``char`` when a chained call may go there: after the end of the
    document's first inline call, outside every call, where no call is kept yet; else None."""
    orig = original_offset(doc["spans"], char)
    return orig if orig is not None and char >= doc["spans"][0][1] and orig not in taken else None


COUNTS_PART = ".counts.json"  # beside each shard of a round: its seconds and the candidates dropped unscored
TOOL_COUNTS = ("candidates", "scored", "kept", "read_ahead", "not_chained", "not_stated")
# A chained call is scored only when the text states its result within this many characters after its position:
# the filter weighs the next five tokens, and a result the text does not go on to state cannot lower their loss by
# tau_f.
STATED_WITHIN = 40


class Round:
    """One round: propose on the documents with calls inline, keep the chained candidates, execute, filter, map
    offsets back."""

    def __init__(self, cfg: PipelineConfig, tok, settings: dict, samplers: dict, sandbox, model):
        self.cfg, self.tok, self.settings, self.samplers, self.sandbox = cfg, tok, settings, samplers, sandbox
        self.model = model

    def process(self, docs: list[dict], taken: dict[str, set[int]]) -> tuple[list[dict], dict[str, dict[str, int]]]:
        """Filter records of the chained candidates of ``docs``, and per tool how many candidates at a free
        position were dropped because their input uses no earlier result (``not_chained``) or because the text
        does not state their result within ``STATED_WITHIN`` characters (``not_stated``, after execution)."""
        proposed, _ = annotate_group(self.cfg, self.tok, self.settings, self.samplers, docs)
        by_id = {d["doc_id"]: d for d in docs}
        records: list[SampleRecord] = []
        where: list[int] = []  # each record's char_start in the original text
        not_chained, not_stated = dict.fromkeys(self.settings, 0), dict.fromkeys(self.settings, 0)
        for r in proposed:
            doc = by_id[r["doc_id"]]
            orig = _free(doc, r["char_start"], taken[r["doc_id"]])
            if orig is None:
                continue
            if not chained(doc, r["char_start"], r["input"]):
                not_chained[r["tool"]] += 1
                continue
            records.append(r)
            where.append(orig)
        outcomes = self.sandbox.run_many([(r["tool"], r["input"], by_id[r["doc_id"]]["date"]) for r in records])
        executed, at = [], []
        for r, o, orig in zip(records, outcomes, where):
            if o.result is None or not states_result(by_id[r["doc_id"]]["text"], r["char_start"], o.result):
                not_stated[r["tool"]] += 1
                continue
            executed.append(ExecuteRecord(**r, result=o.result, error=o.error))
            at.append(orig)
        scored = CandidateScorer(self.cfg, self.model, self.tok, by_id, tau=self.cfg.chain.tau_filter).score(executed)
        return [{**r, "char_start": orig} for r, orig in zip(scored, at)], {"not_chained": not_chained,
                                                                           "not_stated": not_stated}


def round_counts(cfg: PipelineConfig, stage: StageFolder, documents: int) -> dict:
    """A finished round's counts: per tool ``candidates`` (the chained ones, executed and filtered), ``scored``,
    ``kept``, ``read_ahead``, ``not_chained``, ``not_stated`` and ``kept_per_1000`` (kept per 1,000 candidates);
    for the round its ``seconds`` (of proposing, executing and scoring its shards, over every run that wrote one)
    and ``candidates_per_s`` (scored candidates per second)."""
    per_tool: dict[str, dict[str, Any]] = {t: dict.fromkeys(TOOL_COUNTS, 0) for t in cfg.tools.enabled}
    for rec in stage.records():
        count_record(per_tool[rec["tool"]], rec)
    seconds = 0.0
    for part in stage.parts(COUNTS_PART):
        info = read_json(part, stage.rebuild)
        seconds += float(info["seconds"])
        for key in ("not_chained", "not_stated"):
            for tool, n in info.get(key, {}).items():
                per_tool.setdefault(tool, dict.fromkeys(TOOL_COUNTS, 0))[key] += int(n)
    for c in per_tool.values():
        c["kept_per_1000"] = round(1000 * c["kept"] / c["candidates"], 2) if c["candidates"] else None
    scored, seconds = sum(c["scored"] for c in per_tool.values()), round(seconds, 3)
    return {"documents": documents, "seconds": seconds,
            "candidates_per_s": round(scored / seconds, 2) if seconds > 0 else None, "per_tool": per_tool}


def run_round(cfg: PipelineConfig, r: int, h: str, force: bool, kept: list[dict], docs: dict[str, dict],
              make_round) -> dict:
    """Round ``r`` into its folder (skipped when complete for ``h``, resumed when interrupted); its counts."""
    stage = StageFolder(Path(cfg.run_dir) / "chain", round_name(r), command="chain")
    if not force and stage.is_complete(h):
        print(f"chain: round {r} already complete ({stage.dir}/manifest.json), skipped")
        stage.verify()  # its kept calls are read next
        manifest = stage.manifest()
        assert manifest is not None  # complete
        return manifest["counts"]
    first = stage.begin(h, force=force)
    if first:
        print(f"chain: round {r}: resuming after {first} complete shard(s) in {stage.dir}")
    winners, _ = best_per_position(check_positions(kept, docs)[0])
    by_doc: dict[str, list[dict]] = {}
    for c in winners:
        by_doc.setdefault(str(c["doc_id"]), []).append(c)
    order = [d for d in docs if d in by_doc]  # corpus order
    taken = {d: {int(c["char_start"]) for c in cs} for d, cs in by_doc.items()}
    rnd = make_round()

    def shard(g: int, ids: list[str]) -> list[dict]:
        t0 = time.perf_counter()
        records, dropped = rnd.process([inline(docs[d], by_doc[d], cfg.calls.separator) for d in ids], taken)
        info = {"seconds": time.perf_counter() - t0, **dropped}
        atomic_write_text(stage.part_path(g, COUNTS_PART), json.dumps(info))
        return records

    with tqdm(total=len(order), desc=f"chain round {r}", unit="doc") as bar:
        run_sharded(stage, chunked(order, cfg.shard_size), shard, bar, rank=Ranks.single())
    counts = round_counts(cfg, stage, len(order))
    stage.finish(h, cfg.seed, counts, model=cfg.filter.model or cfg.model.path)
    return counts


def round_line(r: int, counts: dict) -> str:
    """The line the stage prints for a round."""
    per_tool = counts["per_tool"]
    total = sum(c["candidates"] for c in per_tool.values())
    n_kept = sum(c["kept"] for c in per_tool.values())
    rate = counts.get("candidates_per_s")
    tools = "; ".join(f"{t} {c['kept']:,} of {c['candidates']:,} ({_per_1000(c)} per 1,000), "
                      f"{c.get('not_chained', 0):,} not chained, {c.get('not_stated', 0):,} result not stated"
                      for t, c in per_tool.items())
    timing = "" if counts.get("seconds") is None else (
        f" in {counts['seconds']:,.1f} s ({'–' if rate is None else f'{rate:,.1f}'} scored candidates/s)")
    return (f"chain: round {r}: kept {n_kept:,} of {total:,} calls ({fmt_pct(n_kept, total)}) that use an earlier "
            f"call's result, in {counts['documents']:,} documents{timing}: {tools}")


def _per_1000(c: dict) -> str:
    k = c.get("kept_per_1000")
    return "–" if k is None else f"{k:g}"


def run_stage(cfg: PipelineConfig, force: bool = False, **options: Any) -> StageResult:
    """Run the further rounds of sampling, execution and filtering (see the module docstring); the stage takes no
    ``options``."""
    stage_options("chain", options)
    run = start(cfg, "chain", force, inputs=model_inputs(cfg, "sample", "filter"))
    if run.skipped:
        return run.result()
    rounds: dict[str, dict] = {}
    if cfg.chain.rounds > 1:
        filt = StageFolder(cfg.run_dir, "filter")
        filt.require(" (the chain stage starts from the calls it kept)")
        set_threads(cfg.model.threads)
        tools = check_tools(cfg)
        built = build_tools(cfg.tools, tools)
        close_tools(built)
        settings = {t: tool_settings(cfg, t, built[t]) for t in tools}
        model, tok = load(with_weights(cfg.model, cfg.filter.model), cfg.calls)
        sampling = any(s.method != "rules" for s in settings.values())
        if sampling and (cfg.sample.model != cfg.filter.model or cfg.filter.dtype != "auto"):
            sampler_model = load(with_weights(cfg.model, cfg.sample.model), cfg.calls)[0]
        else:
            sampler_model = model
        samplers = make_samplers(cfg, settings, built, sampler_model, tok)
        if cfg.filter.dtype != "auto":  # the filter's dtype, as in the filter stage; the sampler keeps model.dtype
            model = model.to(DTYPES[cfg.filter.dtype])
        docs = {str(k): d for k, d in read_documents(cfg.run_dir).items()}
        kept = read_kept(filt.dir)
        sandbox = build_sandbox(cfg, cache=cfg.execute.cache)
        try:
            for r in range(2, cfg.chain.rounds + 1):
                h = config_hash({"chain": run.hash, "round": r, "candidates": "chained",
                                 "stated_within": STATED_WITHIN})
                counts = run_round(cfg, r, h, force, kept, docs,
                                   lambda: Round(cfg, tok, settings, samplers, sandbox, model))
                rounds[str(r)] = counts
                kept += read_kept(Path(cfg.run_dir) / "chain" / round_name(r))
                print(round_line(r, counts))
        finally:
            sandbox.close()
    run.stage.finish(run.hash, cfg.seed, {"rounds": rounds}, chain_rounds=cfg.chain.rounds)
    return run.result()
