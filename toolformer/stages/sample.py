"""Stage ``sample``: candidate API calls at positions of the corpus.

Per document (or window) and tool: the tool's pre-filter (optional), then the
paper's sampler (score every position with P(x), keep p_i > tau_s, top k,
sample m calls per kept position) and/or the rule-based proposers. Writes the
scored documents once (``documents.jsonl``) and candidate records
``{doc_id, tool, input, position, char_start, p_i, source}``.
"""

from __future__ import annotations

import hashlib
from collections import defaultdict

import torch
from tqdm.auto import tqdm

from toolformer.config.schema import PipelineConfig
from toolformer.corpus import read_corpus, split_windows
from toolformer.lm.modeling import bos_ids, load, model_window, set_threads
from toolformer.lm.textpos import tokenize_text
from toolformer.records import SampleRecord
from toolformer.run.folder import fmt_pct, run_sharded, write_documents
from toolformer.stages import StageResult, start
from toolformer.stages.proposers import RULE_TOOLS, passes_prefilter, propose
from toolformer.tools import REGISTRY, build_tool, render_prompt
from toolformer.tools.calls import get_style

METHODS = ("sampler", "rules", "both")


def tool_settings(cfg: PipelineConfig, tool: str) -> tuple[float, int, int, str]:
    """(tau_s, k, m, method) for one tool, per-tool overrides applied."""
    s = cfg.sample
    o = s.per_tool.get(tool)
    tau = o.tau_sample if o and o.tau_sample is not None else s.tau_sample
    k = o.top_k if o and o.top_k is not None else s.top_k
    m = o.num_calls if o and o.num_calls is not None else s.num_calls
    method = s.method.get(tool, "sampler")
    if method not in METHODS:
        raise ValueError(f"sample.method.{tool}: {method!r} is not one of {', '.join(METHODS)}")
    if method != "sampler" and tool not in RULE_TOOLS:
        raise ValueError(f"sample.method.{tool}: no rule-based proposer for {tool} (have: {', '.join(RULE_TOOLS)})")
    return tau, k, m, method


def check_tools(cfg: PipelineConfig) -> list[str]:
    """Enabled tools, refusing those with side effects unless allowed."""
    for name in cfg.tools.enabled:
        if name not in REGISTRY:
            raise ValueError(f"tools.enabled: unknown tool {name!r} (known: {', '.join(sorted(REGISTRY))})")
        if not REGISTRY[name].read_only and not cfg.tools.allow_side_effects:
            raise ValueError(f"tools.enabled: {name} is not read-only (it has side effects); annotation refuses it "
                             "unless tools.allow_side_effects=true")
    return list(cfg.tools.enabled)


def _seed(cfg: PipelineConfig, *parts) -> int:
    digest = hashlib.sha256(repr((cfg.seed, *parts)).encode()).digest()
    return int.from_bytes(digest[:8], "little") & (2**63 - 1)


def window_tokens(cfg: PipelineConfig, tokenizer, window: int, uses_sampler: bool) -> int:
    """Longest document piece: room for the longest prompt preamble, a copy of the text
    and a sampled call when the sampler runs; room for a call prefix otherwise."""
    if cfg.corpus.window_tokens:
        return cfg.corpus.window_tokens
    if not uses_sampler:
        return max(16, window - 32)  # room for a call as the filter's prefix
    prompt = max(len(tokenizer(REGISTRY[t].prompt, add_special_tokens=False)["input_ids"]) for t in cfg.tools.enabled)
    room = (window - prompt - cfg.sample.max_new_tokens - 8) // 2
    if room < 16:
        raise ValueError(f"model window of {window} tokens is too small for the few-shot prompts ({prompt} tokens)")
    return room


def run_stage(cfg: PipelineConfig, force: bool = False) -> StageResult:
    run = start(cfg, "sample", force)
    if run.skipped:
        return run.result()
    set_threads(cfg.model.threads)
    tools = check_tools(cfg)
    settings = {t: tool_settings(cfg, t) for t in tools}
    uses_sampler = any(m in ("sampler", "both") for *_, m in settings.values())
    model, tok = load(cfg.model, cfg.calls)
    window = model_window(model, cfg.model)
    corpus = read_corpus(cfg.corpus)
    if not corpus.documents:
        raise ValueError(f"{cfg.corpus.path}: no usable documents ({len(corpus.rejected)} rejected)")
    docs = split_windows(corpus.documents, tok, window_tokens(cfg, tok, window, uses_sampler))
    write_documents(cfg.run_dir, docs)
    run.stage.write_rejected(corpus.rejected)
    samplers = make_samplers(cfg, settings, model, tok) if uses_sampler else {}

    def process(group: list[dict]) -> list[dict]:
        return annotate_group(cfg, tok, settings, samplers, group)

    with tqdm(total=len(docs), desc="sample", unit="doc") as bar:
        run_sharded(run.stage, docs, cfg.shard_size, run.first_shard, process, bar)
    per_tool = count_per_tool(cfg, run.stage, docs, tok, tools)
    counts = {"documents": len(corpus.documents), "windows": len(docs), "rejected": len(corpus.rejected),
              "per_tool": per_tool}
    run.stage.finish(run.hash, cfg.seed, counts, model=cfg.model.path)
    total = sum(v["candidates"] for v in per_tool.values())
    parts = ", ".join(f"{t} {v['candidates']:,} at {v['positions']:,} positions" for t, v in per_tool.items())
    n_rejected = len(corpus.rejected)
    print(f"sample: {total:,} candidates in {len(docs):,} documents ({parts}); "
          f"{n_rejected:,} records rejected ({fmt_pct(n_rejected, n_rejected + len(corpus.documents))})")
    return run.result()


def make_samplers(cfg: PipelineConfig, settings: dict[str, tuple], model, tok) -> dict:
    """A :class:`~toolformer.lm.sampler.Sampler` (the tool's few-shot prompt P(x)) per tool that samples."""
    from toolformer.lm.sampler import Sampler

    style = get_style(cfg.calls.style)
    samplers = {}
    for t, (*_, method) in settings.items():
        if method in ("sampler", "both"):
            prompt = render_prompt(build_tool(t, cfg.tools), "{text}", style)
            samplers[t] = Sampler(model, tok, style, prompt, bos_ids(tok))
    return samplers


def annotate_group(cfg: PipelineConfig, tok, settings: dict[str, tuple], samplers: dict,
                   group: list[dict]) -> list[dict]:
    """Candidate records of one shard's documents: per tool, its pre-filter, then
    rules and/or the sampler; the same call from both counts once."""
    tokenized = [tokenize_text(tok, d["text"]) for d in group]
    per_doc: dict[int, list[dict]] = defaultdict(list)
    for tool, (tau, k, m, method) in settings.items():
        keep = [j for j, d in enumerate(group)
                if not cfg.sample.prefilter or passes_prefilter(tool, d, tokenized[j])]
        if method in ("rules", "both"):
            for j in keep:
                for p in propose(tool, group[j]["text"], tokenized[j], cfg.sample.max_rule_candidates):
                    per_doc[j].append(_record(group[j], tool, p.input, p.position, tokenized[j], None, "rules"))
        if method in ("sampler", "both") and keep:
            _sample_calls(cfg, samplers[tool], tool, (tau, k, m), group, tokenized, keep, per_doc)
    records = []
    for j in range(len(group)):
        seen = set()
        for r in per_doc[j]:
            key = (r["tool"], r["position"], r["input"])
            if key not in seen:  # the same call from the sampler and a rule counts once
                seen.add(key)
                records.append(r)
    return records


def _sample_calls(cfg: PipelineConfig, sampler, tool: str, tau_k_m: tuple[float, int, int], group: list[dict],
                  tokenized: list, keep: list[int], per_doc: dict[int, list[dict]]) -> None:
    """The paper's sampler for the documents ``keep`` of ``group``: p_i > tau_s,
    the top k positions, m calls sampled at each; records appended to ``per_doc``."""
    tau, k, m = tau_k_m
    sub = [(group[j]["text"], tokenized[j]) for j in keep]
    scores = sampler.score_positions(sub, cfg.sample.batch_tokens)
    positions = [sorted(sorted((i for i, p in enumerate(ps) if p > tau), key=lambda i: -ps[i])[:k])
                 for ps in scores]
    gen = torch.Generator().manual_seed(_seed(cfg, tool, group[0]["doc_id"]))
    sampled = sampler.sample_calls(sub, positions, m, cfg.sample.max_new_tokens, cfg.sample.temperature, tool, gen,
                                   cfg.sample.batch_tokens)
    for j, calls, ps in zip(keep, sampled, scores):
        for i, tool_input in calls:
            per_doc[j].append(_record(group[j], tool, tool_input, i, tokenized[j], ps[i], "sampler"))


def count_per_tool(cfg: PipelineConfig, stage, docs: list[dict], tok, tools: list[str]) -> dict[str, dict]:
    """Per tool: documents passing its pre-filter, candidate positions and
    candidates, counted from the stage's records (right also after a resume)."""
    per_tool = {t: {"documents": 0, "positions": 0, "candidates": 0} for t in tools}
    for d in docs:  # documents passing each pre-filter (cheap)
        tt = tokenize_text(tok, d["text"])
        for t in tools:
            per_tool[t]["documents"] += int(not cfg.sample.prefilter or passes_prefilter(t, d, tt))
    positions: dict[str, set] = defaultdict(set)
    for r in stage.records():
        per_tool[r["tool"]]["candidates"] += 1
        positions[r["tool"]].add((r["doc_id"], r["position"]))
    for t in tools:
        per_tool[t]["positions"] = len(positions[t])
    return per_tool


def _record(doc: dict, tool: str, tool_input: str, position: int, tt, p_i: float | None,
            source: str) -> SampleRecord:
    return SampleRecord(doc_id=doc["doc_id"], tool=tool, input=tool_input, position=position,
                        char_start=tt.char_starts[position], p_i=None if p_i is None else round(p_i, 6), source=source)

