"""Stage ``filter``: keep calls whose result helps predict the next tokens.

For each executed candidate at position i of text x, with z put before the
whole text (a prefix, not inline):

    L(ε), L(e(c, ε)), L(e(c, r))      weighted losses of x_i..x_{i+4}
    L⁻ = min(L(ε), L(e(c, ε))),  L⁺ = L(e(c, r))
    kept  ⇔  L⁻ − L⁺ ≥ tau_f  (and, with filter.lookahead drop, the input reads nothing ahead)

L⁻ ≤ L(ε), so a candidate with L(ε) − L⁺ < tau_f is rejected whatever L(e(c, ε)) is: L(ε) and L⁺ are
computed first and L(e(c, ε)) only for the others; their records hold ``loss_no_result`` null and
``loss_minus`` = L(ε), an upper bound.

Sequence = start + tokens(z + prefix_separator) + tokens(text), start being BOS (else EOS:
:func:`toolformer.lm.modeling.document_start`, so x_0 has real logits to come from); the text is
tokenized once so every variant scores the same target tokens. The losses come
from ``model.path`` (the paper's M), or from ``filter.model`` when set.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from toolformer.config.schema import PipelineConfig
from toolformer.corpus.records import ExecuteRecord, FilterRecord
from toolformer.lm.losses import is_kept, loss_minus
from toolformer.lm.modeling import DTYPES, document_start, load, model_window, set_threads, with_weights
from toolformer.lm.scoring import LossRequest, LossScorer
from toolformer.lm.textpos import tokenize_text
from toolformer.rundir.folder import DocumentStore, StageFolder, fmt_pct
from toolformer.rundir.parallel import ranks
from toolformer.stages import StageResult, model_inputs, per_upstream_shard, stage_options, start
from toolformer.tools.calls import get_style
from toolformer.tools.lookahead import reads_ahead


def tau_for(cfg: PipelineConfig, tool: str) -> float:
    return cfg.filter.per_tool_tau.get(tool, cfg.filter.tau_filter)


class CandidateScorer:
    """Turns executed records into filter records (losses and ``kept``)."""

    def __init__(self, cfg: PipelineConfig, model, tokenizer, docs, all_losses: bool = False,
                 tau: float | None = None):
        """``all_losses``: L(e(c, ε)) for every candidate, not only where it can change the verdict (preflight's
        margins, the benchmark); ``tau``: one tau_f for every tool instead of the filter's (chain.tau_filter)."""
        self.cfg, self.tok, self.docs = cfg, tokenizer, docs
        self.all_losses, self.tau_override = all_losses, tau
        self.style = get_style(cfg.calls.style)
        self.bos = tuple(document_start(tokenizer))
        self.scorer = LossScorer(model, tokenizer.pad_token_id or 0, model_window(model, cfg.model),
                                 cfg.filter.horizon, cfg.filter.batch_tokens, share_rows=cfg.filter.share)
        self._texts: dict[str, list[int]] = {}

    def text_ids(self, doc_id: str) -> list[int]:
        if doc_id not in self._texts:
            if len(self._texts) > 4096:
                self._texts.clear()  # documents of earlier shards: memory stays bounded
            self._texts[doc_id] = tokenize_text(self.tok, self.docs[doc_id]["text"]).ids
        return self._texts[doc_id]

    def prefix(self, call_text: str | None) -> tuple[int, ...]:
        if call_text is None:
            return self.bos
        z = call_text + self.cfg.filter.prefix_separator
        return self.bos + tuple(self.tok(z, add_special_tokens=False)["input_ids"])

    def score(self, records: list[ExecuteRecord]) -> list[FilterRecord]:
        texts = {r["doc_id"]: self.text_ids(r["doc_id"]) for r in records}
        plan: list[tuple[LossRequest, LossRequest, LossRequest, str, str] | None] = []  # None: not scored
        for r in records:
            if r["error"] is not None or r["result"] is None:
                plan.append(None)
                continue
            with_result = self.style.render(r["tool"], r["input"], r["result"])
            no_result = self.style.render(r["tool"], r["input"], "")
            doc, pos = r["doc_id"], r["position"]
            plan.append((LossRequest(self.bos, doc, pos), LossRequest(self.prefix(with_result), doc, pos),
                         LossRequest(self.prefix(no_result), doc, pos), with_result, no_result))
        # L(ε) and L⁺ first; L(e(c, ε)) only where L(ε) − L⁺ alone does not reject the call
        losses = self.scorer.losses([q for p in plan if p for q in p[:2]], texts)
        open_ = [p[2] for r, p in zip(records, plan)
                 if p and (self.all_losses or self.may_keep(losses[p[0]], losses[p[1]], r["tool"]))]
        losses.update(self.scorer.losses(open_, texts))
        out: list[FilterRecord] = []
        for r, p in zip(records, plan):
            tau = self.tau(r["tool"])
            if p is None:
                out.append(FilterRecord(**r, call_text=None, call_text_no_result=None, loss_none=None,
                                        loss_no_result=None, loss_with_result=None, loss_minus=None,
                                        loss_plus=None, tau_filter=tau, read_ahead=[], kept=False))
                continue
            none, with_res, no_res, with_result, no_result = p
            l_none, l_with = round(losses[none], 6), round(losses[with_res], 6)
            l_no = round(losses[no_res], 6) if no_res in losses else None
            lm = l_none if l_no is None else loss_minus(l_none, l_no)  # L(ε) bounds L⁻ from above
            ahead = self.read_ahead(r)
            kept = l_no is not None and is_kept(lm, l_with, tau) and not (ahead and self.cfg.filter.lookahead == "drop")
            out.append(FilterRecord(**r, call_text=with_result, call_text_no_result=no_result,
                                    loss_none=l_none, loss_no_result=l_no, loss_with_result=l_with, loss_minus=lm,
                                    loss_plus=l_with, tau_filter=tau, read_ahead=ahead, kept=kept))
        return out

    def tau(self, tool: str) -> float:
        return tau_for(self.cfg, tool) if self.tau_override is None else self.tau_override

    def may_keep(self, l_none: float, l_plus: float, tool: str) -> bool:
        """Whether L(ε) − L⁺ reaches the tool's tau_f (rounded as the kept test rounds): if not, neither does
        L⁻ − L⁺."""
        return is_kept(round(l_none, 6), round(l_plus, 6), self.tau(tool))

    def read_ahead(self, r: ExecuteRecord) -> list[str]:
        """What the candidate's input reads ahead of its position (:mod:`toolformer.tools.lookahead`); [] with
        ``filter.lookahead: off``."""
        if self.cfg.filter.lookahead == "off":
            return []
        return reads_ahead(self.docs[r["doc_id"]]["text"], r["char_start"], r["input"])


def run_stage(cfg: PipelineConfig, force: bool = False, **options: Any) -> StageResult:
    """Keep the calls that lower the loss (see the module docstring); the stage takes no ``options``."""
    stage_options("filter", options)
    upstream = StageFolder(cfg.run_dir, "execute")
    upstream.require(" (toolformer execute)")
    run = start(cfg, "filter", force, inputs=model_inputs(cfg, "filter"))
    if run.skipped:
        return run.result()
    set_threads(cfg.model.threads)
    model, tok = load(with_weights(cfg.model, cfg.filter.model), cfg.calls)
    if cfg.filter.dtype != "auto":
        model = model.to(DTYPES[cfg.filter.dtype])
    docs = DocumentStore(cfg.run_dir)
    scorer = CandidateScorer(cfg, model, tok, docs)

    per_upstream_shard(run, upstream, lambda g, group: scorer.score(group), cfg.tools.enabled)
    docs.close()
    if run.all_done():
        finish(cfg, run)
    return run.release()


def finish(cfg: PipelineConfig, run) -> None:
    """Main process, every shard written: counts and manifest."""
    per_tool: dict[str, dict] = {t: {"candidates": 0, "scored": 0, "kept": 0, "read_ahead": 0}
                                 for t in cfg.tools.enabled}
    for r in run.stage.records():
        count_record(per_tool[r["tool"]], r)
    counts = {"per_tool": dict(per_tool)}
    run.stage.finish(run.hash, cfg.seed, counts, model=cfg.filter.model or cfg.model.path,
                     tau_filter={t: tau_for(cfg, t) for t in per_tool}, lookahead=cfg.filter.lookahead,
                     processes=ranks().world)
    total = sum(c["candidates"] for c in per_tool.values())
    kept = sum(c["kept"] for c in per_tool.values())
    parts = ", ".join(f"{t} {c['kept']:,}/{c['candidates']:,}" for t, c in per_tool.items())
    ahead = ", ".join(f"{t} {c['read_ahead']:,}" for t, c in per_tool.items() if c["read_ahead"])
    verb = {"drop": "dropped", "flag": "kept and flagged"}.get(cfg.filter.lookahead, "")
    print(f"filter: kept {kept:,} of {total:,} calls ({fmt_pct(kept, total)}; {parts})"
          + (f"; {verb} for reading ahead of their position: {ahead}" if ahead else ""))


def count_record(c: dict, r: Mapping[str, Any]) -> None:
    """Add filter record ``r`` to its tool's counts ``c``: candidates, scored, kept, and read_ahead (those that
    pass tau_f but hold a number or name the text states only later: dropped or flagged by filter.lookahead)."""
    c["candidates"] += 1
    c["scored"] += int(r["loss_plus"] is not None)
    c["kept"] += int(r["kept"])
    passes = r["loss_plus"] is not None and is_kept(r["loss_minus"], r["loss_plus"], r["tau_filter"])
    c["read_ahead"] += int(bool(r.get("read_ahead")) and passes)
