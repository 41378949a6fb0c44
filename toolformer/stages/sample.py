"""Stage ``sample``: candidate API calls at positions of the corpus.

Per document (or window) and tool: the tool's pre-filter (optional), then the
paper's sampler (score every position with P(x), keep p_i > tau_s, top k,
sample m calls per kept position) and/or the rule-based proposers. Writes the
scored documents once (``documents.jsonl`` and its index) and candidate
records (:class:`toolformer.corpus.records.SampleRecord`). An MCP server's tool
(``tools.mcp_servers``) borrows a built-in rule proposer and its pre-filter,
or is sampled with the few-shot prompt its config gives; its server is started
once, to check the tool, and stopped before sampling. ``sample.model`` samples
with other weights than ``model.path`` (a second round of self-training: the
round-1 model, with ``sample.prompt: none``, no few-shot prompt).

The corpus is read as a stream, ``shard_size`` documents per shard (a piece
of a document over ``corpus.max_doc_chars`` ends its shard); under
``accelerate launch`` each process takes every N-th group
(:mod:`toolformer.rundir.parallel`). A shard leaves its windows and counts
beside it; the main process merges them when every shard is written.
"""

from __future__ import annotations

import hashlib
import json
from collections import defaultdict
from typing import Any, NamedTuple

import torch
from tqdm.auto import tqdm

from toolformer.config.schema import PipelineConfig
from toolformer.corpus.reader import iter_corpus
from toolformer.corpus.records import SampleRecord
from toolformer.corpus.windows import pieces, shard_groups, split_windows
from toolformer.lm.modeling import document_start, load, model_window, set_threads, with_weights
from toolformer.lm.textpos import tokenize_text
from toolformer.rundir.files import atomic_write_text, dumps, iter_jsonl, read_json
from toolformer.rundir.folder import document_row, fmt_pct, write_documents
from toolformer.rundir.parallel import ranks
from toolformer.rundir.sharding import run_sharded
from toolformer.stages import StageResult, model_inputs, stage_options, start
from toolformer.stages.proposers import RULE_TOOLS, passes_prefilter, propose
from toolformer.tools import REGISTRY, Tool, build_tools, close_tools, known_tools, render_prompt
from toolformer.tools.base import side_effects_allowed
from toolformer.tools.calls import get_style

METHODS = ("sampler", "rules", "both")


class ToolSettings(NamedTuple):
    """How the sample stage proposes one tool's calls, its per-tool overrides applied."""

    tau: float
    """tau_s: a position is kept when p(call start) there exceeds it (``sample.tau_sample``)."""
    top_k: int
    """k: at most this many positions per document (``sample.top_k``)."""
    num_calls: int
    """m: calls sampled at each kept position (``sample.num_calls``)."""
    method: str
    """``sampler``, ``rules`` or ``both`` (``sample.method``)."""
    rules: str
    """The rule proposer and pre-filter the tool uses: its own, or the one an MCP tool borrows."""


def tool_settings(cfg: PipelineConfig, tool: str, built: Tool | None = None) -> ToolSettings:
    """The :class:`ToolSettings` of one tool, per-tool overrides applied; ``rules`` names the rule proposer
    and pre-filter the tool uses (its own, or the one an MCP tool borrows; ``built`` is the tool)."""
    s = cfg.sample
    o = s.per_tool.get(tool)
    tau = o.tau_sample if o and o.tau_sample is not None else s.tau_sample
    k = o.top_k if o and o.top_k is not None else s.top_k
    m = o.num_calls if o and o.num_calls is not None else s.num_calls
    method = s.method.get(tool, "sampler")
    if method not in METHODS:
        raise ValueError(f"sample.method.{tool}: {method!r} is not one of {', '.join(METHODS)}")
    rules = (built.proposer if built is not None else "") or tool
    if method != "sampler" and rules not in RULE_TOOLS:
        raise ValueError(f"sample.method.{tool}: no rule-based proposer for {rules} (have: {', '.join(RULE_TOOLS)}; "
                         "an MCP tool borrows one with tools.mcp_servers[i].proposers)")
    if method != "rules" and built is not None and not built.prompt and cfg.sample.prompt != "none":
        raise ValueError(f"sample.method.{tool}: the paper's sampler needs a few-shot prompt, and {tool} has none "
                         "(an MCP tool's: tools.mcp_servers[i].prompts)")
    return ToolSettings(tau, k, m, method, rules)


def check_tools(cfg: PipelineConfig) -> list[str]:
    """Enabled tools, refusing unknown ones and built-in ones with side effects unless allowed (an MCP tool
    with side effects is refused when it is built: its annotations come from its server)."""
    known = known_tools(cfg.tools)
    for name in cfg.tools.enabled:
        if name not in known:
            raise ValueError(f"tools.enabled: unknown tool {name!r} (known: {', '.join(known)})")
        if name in REGISTRY and not REGISTRY[name].read_only \
                and not side_effects_allowed(cfg.tools.allow_side_effects, name):
            raise ValueError(f"tools.enabled: {name} is not read-only (it has side effects); annotation refuses it "
                             f"unless tools.allow_side_effects=true or lists {name}")
    return list(cfg.tools.enabled)


def _seed(cfg: PipelineConfig, *parts) -> int:
    digest = hashlib.sha256(repr((cfg.seed, *parts)).encode()).digest()
    return int.from_bytes(digest[:8], "little") & (2**63 - 1)


def window_tokens(cfg: PipelineConfig, tokenizer, window: int, uses_sampler: bool, prompts: list[str]) -> int:
    """Longest document piece: room for the longest prompt preamble, a copy of the text
    and a sampled call when the sampler runs with few-shot prompts; room for a call otherwise."""
    if cfg.corpus.window_tokens:
        return cfg.corpus.window_tokens
    if not uses_sampler:
        return max(16, window - 32)  # room for a call as the filter's prefix
    if cfg.sample.prompt == "none":  # [BOS] + the text + a sampled call
        return max(16, window - cfg.sample.max_new_tokens - 8)
    prompt = max(len(tokenizer(p, add_special_tokens=False)["input_ids"]) for p in prompts)
    room = (window - prompt - cfg.sample.max_new_tokens - 8) // 2
    if room < 16:
        raise ValueError(f"model window of {window} tokens is too small for the few-shot prompts ({prompt} tokens)")
    return room


def run_stage(cfg: PipelineConfig, force: bool = False, **options: Any) -> StageResult:
    """Propose candidate calls (see the module docstring); the stage takes no ``options``."""
    stage_options("sample", options)
    # The corpus by its fingerprint too: a corpus rewritten under the same path is sampled again.
    run = start(cfg, "sample", force, inputs={**model_inputs(cfg, "sample"), "corpus.path": cfg.corpus.path})
    if run.skipped:
        return run.result()
    set_threads(cfg.model.threads)
    tools = check_tools(cfg)
    built = build_tools(cfg.tools, tools)  # MCP servers start: allow-lists, annotations and schemas checked
    close_tools(built)  # sampling calls no tool
    settings = {t: tool_settings(cfg, t, built[t]) for t in tools}
    uses_sampler = any(s.method in ("sampler", "both") for s in settings.values())
    model, tok = load(with_weights(cfg.model, cfg.sample.model), cfg.calls)
    max_tokens = window_tokens(cfg, tok, model_window(model, cfg.model), uses_sampler,
                               [built[t].prompt for t in tools])
    samplers = make_samplers(cfg, settings, built, model, tok) if uses_sampler else {}
    rejected: list[dict] = []
    seen = [0]  # documents read

    def documents():
        for doc in iter_corpus(cfg.corpus, rejected):
            seen[0] += 1
            yield from pieces(doc, cfg.corpus.max_doc_chars)  # a huge document: a piece per shard

    def process(g: int, group: list[dict]) -> list[SampleRecord]:
        """One group of corpus documents: its windows and counts beside the shard, then its candidates."""
        docs = split_windows(group, tok, max_tokens)
        records, counts = annotate_group(cfg, tok, settings, samplers, docs)
        atomic_write_text(run.stage.part_path(g, DOCS_PART), "".join(dumps(document_row(d)) + "\n" for d in docs))
        atomic_write_text(run.stage.part_path(g, COUNTS_PART), json.dumps({"windows": len(docs), "per_tool": counts}))
        return records

    with tqdm(desc="sample", unit="doc", disable=not ranks().main) as bar:
        run_sharded(run.stage, shard_groups(documents(), cfg.shard_size), process, bar)
    if not seen[0]:  # every process read the whole stream: all stop here alike
        raise ValueError(f"{cfg.corpus.path}: no usable documents ({len(rejected)} rejected)")
    if run.all_done():
        finish(cfg, run, tools, seen[0], rejected)
    return run.release()


DOCS_PART = ".documents.jsonl"  # a shard's documents (windows); documents.jsonl is made from them at the end
COUNTS_PART = ".counts.json"  # a shard's windows and per-tool counts


def finish(cfg: PipelineConfig, run, tools: list[str], n_documents: int, rejected: list[dict]) -> None:
    """Main process, every shard written: documents.jsonl (+ index) from the shards' parts, counts, manifest."""
    stage = run.stage
    write_documents(cfg.run_dir, (rec for part in stage.parts(DOCS_PART) for _, rec in iter_jsonl(part)))
    per_tool = {t: {"documents": 0, "positions": 0, "candidates": 0} for t in tools}
    windows = 0
    for part in stage.parts(COUNTS_PART):
        counts = read_json(part, stage.rebuild)
        windows += counts["windows"]
        for t, c in counts["per_tool"].items():
            for k, v in c.items():
                per_tool[t][k] += v
    stage.write_rejected(rejected)
    counts = {"documents": n_documents, "windows": windows, "rejected": len(rejected), "per_tool": per_tool}
    stage.finish(run.hash, cfg.seed, counts, model=cfg.sample.model or cfg.model.path, processes=ranks().world)
    total = sum(v["candidates"] for v in per_tool.values())
    parts = ", ".join(f"{t} {v['candidates']:,} at {v['positions']:,} positions" for t, v in per_tool.items())
    print(f"sample: {total:,} candidates in {windows:,} documents ({parts}); "
          f"{len(rejected):,} records rejected ({fmt_pct(len(rejected), len(rejected) + n_documents)})")


ANY_TOOL = ""  # make_samplers' key of the one sampler without a prompt (sample.prompt: none)


def make_samplers(cfg: PipelineConfig, settings: dict[str, ToolSettings], tools: dict[str, Tool], model, tok) -> dict:
    """A :class:`~toolformer.lm.sampler.Sampler` (the tool's few-shot prompt P(x)) per tool that samples; with
    sample.prompt none, one sampler without a prompt for them all, under the key ``ANY_TOOL``."""
    from toolformer.lm.sampler import Sampler

    style = get_style(cfg.calls.style)
    sampling = [t for t, s in settings.items() if s.method in ("sampler", "both")]
    if cfg.sample.prompt == "none":
        return {ANY_TOOL: Sampler(model, tok, style, None, document_start(tok))} if sampling else {}
    start = document_start(tok)
    return {t: Sampler(model, tok, style, render_prompt(tools[t], "{text}", style), start) for t in sampling}


def annotate_group(cfg: PipelineConfig, tok, settings: dict[str, ToolSettings], samplers: dict,
                   group: list[dict]) -> tuple[list[SampleRecord], dict[str, dict]]:
    """Candidate records of one shard's documents (per tool, its pre-filter, then
    rules and/or the sampler; the same call from both counts once), and per
    tool the documents passing its pre-filter, the positions and candidates."""
    tokenized = [tokenize_text(tok, d["text"]) for d in group]
    per_doc: dict[int, list[SampleRecord]] = defaultdict(list)
    counts = {t: {"documents": 0, "positions": 0, "candidates": 0} for t in settings}
    free: dict[str, tuple[tuple[float, int, int], list[int]]] = {}  # tool -> (tau, k, m), its documents
    for tool, s in settings.items():
        tau, k, m, method, rules = s.tau, s.top_k, s.num_calls, s.method, s.rules
        keep = [j for j, d in enumerate(group)
                if not cfg.sample.prefilter or passes_prefilter(rules, d, tokenized[j])]
        counts[tool]["documents"] = len(keep)
        if method in ("rules", "both"):
            for j in keep:
                for p in propose(rules, group[j]["text"], tokenized[j], cfg.sample.max_rule_candidates):
                    per_doc[j].append(_record(group[j], tool, p.input, p.position, tokenized[j], None, "rules"))
        if method in ("sampler", "both") and keep:
            if ANY_TOOL in samplers:
                free[tool] = ((tau, k, m), keep)
            else:
                _sample_calls(cfg, samplers[tool], tool, (tau, k, m), group, tokenized, keep, per_doc)
    if free:
        _sample_any(cfg, samplers[ANY_TOOL], free, group, tokenized, per_doc)
    records = []
    for j in range(len(group)):
        seen = set()
        for r in per_doc[j]:
            key = (r["tool"], r["position"], r["input"])
            if key not in seen:  # the same call from the sampler and a rule counts once
                seen.add(key)
                records.append(r)
        for tool in settings:
            counts[tool]["positions"] += len({r["position"] for r in per_doc[j] if r["tool"] == tool})
    for r in records:
        counts[r["tool"]]["candidates"] += 1
    return records, counts


def _sample_calls(cfg: PipelineConfig, sampler, tool: str, tau_k_m: tuple[float, int, int], group: list[dict],
                  tokenized: list, keep: list[int], per_doc: dict[int, list[SampleRecord]]) -> None:
    """The paper's sampler for the documents ``keep`` of ``group``: p_i > tau_s,
    the top k positions, m calls sampled at each; records appended to ``per_doc``."""
    tau, k, m = tau_k_m
    sub = [(group[j]["text"], tokenized[j]) for j in keep]
    scores = sampler.score_positions(sub, cfg.sample.batch_tokens)
    positions = [top_positions(ps, tau, k) for ps in scores]
    gen = torch.Generator().manual_seed(_seed(cfg, tool, group[0]["doc_id"]))
    sampled = sampler.sample_calls(sub, positions, m, cfg.sample.max_new_tokens, cfg.sample.temperature, tool, gen,
                                   cfg.sample.batch_tokens)
    for j, calls, ps in zip(keep, sampled, scores):
        for i, tool_input in calls:
            per_doc[j].append(_record(group[j], tool, tool_input, i, tokenized[j], ps[i], "sampler"))


def top_positions(scores: list[float], tau: float, k: int) -> list[int]:
    """The paper's kept positions: p_i > tau_s, the k highest, in text order."""
    return sorted(sorted((i for i, p in enumerate(scores) if p > tau), key=lambda i: -scores[i])[:k])


def _sample_any(cfg: PipelineConfig, sampler, tools: dict[str, tuple[tuple[float, int, int], list[int]]],
                group: list[dict], tokenized: list, per_doc: dict[int, list[SampleRecord]]) -> None:
    """The sampler without a prompt: p_i scored once per document for every tool; each tool keeps its own top-k
    positions (its tau_s and k); at each kept position the largest m among the tools keeping it is sampled, and a
    sampled call is a candidate of the tool it names when that tool kept the position."""
    docs = sorted({j for _, keep in tools.values() for j in keep})
    scores = sampler.score_positions([(group[j]["text"], tokenized[j]) for j in docs], cfg.sample.batch_tokens)
    wanted: list[dict[int, set[str]]] = []  # per document: position -> tools that kept it
    plan = []
    for j, ps in zip(docs, scores):
        at: dict[int, set[str]] = defaultdict(set)
        for tool, ((tau, k, _), keep) in tools.items():
            if j in keep:
                for i in top_positions(ps, tau, k):
                    at[i].add(tool)
        wanted.append(at)
        plan.append([(i, max(tools[t][0][2] for t in at[i])) for i in sorted(at)])
    gen = torch.Generator().manual_seed(_seed(cfg, "any tool", group[0]["doc_id"]))
    sampled = sampler.sample_any([(group[j]["text"], tokenized[j]) for j in docs], plan, cfg.sample.max_new_tokens,
                                 cfg.sample.temperature, set(tools), gen, cfg.sample.batch_tokens)
    for j, calls, ps, at in zip(docs, sampled, scores, wanted):
        for i, tool, tool_input in calls:
            if tool in at[i]:
                per_doc[j].append(_record(group[j], tool, tool_input, i, tokenized[j], ps[i], "sampler"))


def _record(doc: dict, tool: str, tool_input: str, position: int, tt, p_i: float | None,
            source: str) -> SampleRecord:
    return SampleRecord(doc_id=doc["doc_id"], tool=tool, input=tool_input, position=position,
                        char_start=tt.char_starts[position], p_i=None if p_i is None else round(p_i, 6), source=source)

