"""Stage ``chain``: more rounds of sample → execute → filter, one call at a time.

The paper proposes and filters every call of a document against the plain
text, so no call can use another call's result. With ``chain.rounds`` R > 1,
round r (2..R) takes every document with a call kept in the rounds before it,
puts those calls inline as build does (x* = x_<i, e(c, r), x_≥i; one call per
position, the largest L⁻ − L⁺) and runs the same proposers or sampler, the
same tool execution and the same filter on that text, at the positions after
its first call where no call was kept yet:

* a candidate may take an earlier call's result as its input: the rule
  proposer reads the result as an earlier number of the text, the sampler
  sees it in its context;
* the filter judges it with the earlier calls in the text, as the tuned
  model will read it (the call z still goes before the whole text: L⁻, L⁺
  and tau_f as in the filter stage).

A record's ``char_start`` is mapped back to the original document (its
``position`` stays the token index in the text it was scored on), so build
inserts the kept calls of every round into the original text together.

Writes ``RUN_DIR/chain/round-<r>/``: filter records in shards and the round's
manifest (a round whose manifest matches is skipped; an interrupted one
resumes after its last complete shard), then ``RUN_DIR/chain/manifest.json``
with the counts of every round. With R = 1 it writes only the manifest.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from toolformer.config.load import config_hash
from toolformer.config.schema import PipelineConfig
from toolformer.lm.modeling import DTYPES, load, set_threads, with_weights
from toolformer.records import ExecuteRecord, SampleRecord
from toolformer.run.folder import Stage, chunked, fmt_pct, read_documents, run_sharded
from toolformer.run.parallel import Ranks
from toolformer.stages import StageResult, model_inputs, stage_options, start
from toolformer.stages.build import best_per_position, check_positions, read_kept, round_name
from toolformer.stages.filter import CandidateScorer, count_record
from toolformer.stages.sample import annotate_group, check_tools, make_samplers, tool_settings
from toolformer.tools import build_tools, close_tools
from toolformer.tools.sandbox import build_sandbox


def inline(doc: dict, calls: list[dict], separator: str) -> dict:
    """``doc`` with ``calls`` (kept filter records) inline, as build inserts them, and ``spans``: for each call
    (start, end) of ``call_text + separator`` in the new text, in order."""
    text, spans, last, pos = [], [], 0, 0
    for c in sorted(calls, key=lambda c: int(c["char_start"])):
        at = int(c["char_start"])
        text.append(doc["text"][last:at])
        pos += at - last
        piece = c["call_text"] + separator
        text.append(piece)
        spans.append((pos, pos + len(piece)))
        pos += len(piece)
        last = at
    text.append(doc["text"][last:])
    return {"doc_id": doc["doc_id"], "text": "".join(text), "date": doc.get("date"), "spans": spans}


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


class Round:
    """One round: propose on the documents with calls inline, execute, filter, map offsets back."""

    def __init__(self, cfg: PipelineConfig, tok, settings: dict, samplers: dict, sandbox, model):
        self.cfg, self.tok, self.settings, self.samplers, self.sandbox = cfg, tok, settings, samplers, sandbox
        self.model = model

    def process(self, docs: list[dict], taken: dict[str, set[int]]) -> list[dict]:
        proposed, _ = annotate_group(self.cfg, self.tok, self.settings, self.samplers, docs)
        by_id = {d["doc_id"]: d for d in docs}
        records: list[SampleRecord] = []
        where: list[int] = []  # each record's char_start in the original text
        for r in proposed:
            orig = _free(by_id[r["doc_id"]], r["char_start"], taken[r["doc_id"]])
            if orig is not None:
                records.append(r)
                where.append(orig)
        outcomes = self.sandbox.run_many([(r["tool"], r["input"], by_id[r["doc_id"]]["date"]) for r in records])
        executed = [ExecuteRecord(**r, result=o.result, error=o.error) for r, o in zip(records, outcomes)]
        scored = CandidateScorer(self.cfg, self.model, self.tok, by_id).score(executed)
        return [{**r, "char_start": orig} for r, orig in zip(scored, where)]


def run_round(cfg: PipelineConfig, r: int, h: str, force: bool, kept: list[dict], docs: dict[str, dict],
              make_round) -> dict:
    """Round ``r`` into its folder (skipped when complete for ``h``, resumed when interrupted); its counts."""
    stage = Stage(Path(cfg.run_dir) / "chain", round_name(r), command="chain")
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
    with tqdm(total=len(order), desc=f"chain round {r}", unit="doc") as bar:
        run_sharded(stage, chunked(order, cfg.shard_size),
                    lambda g, ids: rnd.process([inline(docs[d], by_doc[d], cfg.calls.separator) for d in ids], taken),
                    bar, rank=Ranks.single())
    per_tool = {t: {"candidates": 0, "scored": 0, "kept": 0, "read_ahead": 0} for t in cfg.tools.enabled}
    for rec in stage.records():
        count_record(per_tool[rec["tool"]], rec)
    counts = {"documents": len(order), "per_tool": per_tool}
    stage.finish(h, cfg.seed, counts, model=cfg.filter.model or cfg.model.path)
    return counts


def run_stage(cfg: PipelineConfig, force: bool = False, **options: Any) -> StageResult:
    """Run the further rounds of sampling, execution and filtering (see the module docstring); the stage takes no
    ``options``."""
    stage_options("chain", options)
    run = start(cfg, "chain", force, inputs=model_inputs(cfg, "sample", "filter"))
    if run.skipped:
        return run.result()
    rounds: dict[str, dict] = {}
    if cfg.chain.rounds > 1:
        filt = Stage(cfg.run_dir, "filter")
        filt.require(" (the chain stage starts from the calls it kept)")
        set_threads(cfg.model.threads)
        tools = check_tools(cfg)
        built = build_tools(cfg.tools, tools)
        close_tools(built)
        settings = {t: tool_settings(cfg, t, built[t]) for t in tools}
        model, tok = load(with_weights(cfg.model, cfg.filter.model), cfg.calls)
        sampling = any(s[3] != "rules" for s in settings.values())
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
                h = config_hash({"chain": run.hash, "round": r})
                counts = run_round(cfg, r, h, force, kept, docs,
                                   lambda: Round(cfg, tok, settings, samplers, sandbox, model))
                rounds[str(r)] = counts
                kept += read_kept(Path(cfg.run_dir) / "chain" / round_name(r))
                total = sum(c["candidates"] for c in counts["per_tool"].values())
                n_kept = sum(c["kept"] for c in counts["per_tool"].values())
                print(f"chain: round {r}: kept {n_kept:,} of {total:,} calls ({fmt_pct(n_kept, total)}) proposed "
                      f"after the calls kept before, in {counts['documents']:,} documents")
        finally:
            sandbox.close()
    run.stage.finish(run.hash, cfg.seed, {"rounds": rounds}, chain_rounds=cfg.chain.rounds)
    return run.result()
