"""Measurements behind docs/published-world.md ("Where it stands"), as commands:

``python -m toolformer.published.lab copy MODEL [MODEL ...]``
    In-context copying: the loss per token of held-out sentences (RUN_DIR/world/heldout.jsonl, ``--world``) the
    first time and said again right after. A model that copies from its context has a much lower second loss;
    the filter needs that (a call's result is in the context before the text that states it).
``python -m toolformer.published.lab margins RUN_DIR``
    The filter's candidates ranked by L⁻ − L⁺, and the share of the top ones that are right against the gold
    calls (GSM8K's annotations and MAWPS's and ASDiv's formulas for Calculator, T-REx objects for QA): whether
    the base model's losses tell a right result from a wrong one at all; and per tool the candidate closest to
    its tau_f (how far a loss must move for a kept decision to change).
``python -m toolformer.published.lab starts MODEL TOKEN [TOKEN ...]``
    The loss per token of held-out sentences read after each start token: which token the model was pre-trained
    to read a document after.
``python -m toolformer.published.lab gold RUN_DIR``
    The gold report of any run of the world's corpus (``results.json`` → ``gold``, ``gold_by_tau``).
``python -m toolformer.published.lab per-position RUN_DIR [--limits N ...]``
    Fewer rule candidates per position (``sample.max_rule_candidates``), replayed on the run's filter records.
``python -m toolformer.published.lab inline RUN_DIR [--model M]``
    The filter's losses with the call inline instead of as a prefix, judged by M, against the gold
    (:mod:`.placement`).
``python -m toolformer.published.lab needed RUN_DIR [--model M]``
    The gold calculations the base model (``--model``, default the run's ``model.path``) gets wrong when it
    continues the text itself, and the share of them with a right kept call (:mod:`.needed`).
``python -m toolformer.published.lab cost RUN_DIR [--bins B] [--per-bin N]``
    The filter's seconds and tokens per candidate against the call's position in its document (:mod:`.cost`).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from toolformer.published.gold import GOLD_SOURCES, gold_documents


def copy_probe(model_dir: str, texts: list[str], max_tokens: int = 100) -> tuple[float, float]:
    """(mean loss per token of each text, of the same text said again right after it)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir).eval()
    newline = tok("\n", add_special_tokens=False)["input_ids"]
    first = second = 0.0
    for text in texts:
        ids = tok(text, add_special_tokens=False)["input_ids"][:max_tokens]
        x = torch.tensor([[tok.bos_token_id, *ids, *newline, *ids]])  # (1, T)
        with torch.no_grad():
            logp = torch.log_softmax(model(x).logits[0, :-1].float(), -1)  # (T-1, V)
        nll = -logp.gather(1, x[0, 1:, None])[:, 0]  # (T-1,)
        first += nll[: len(ids)].mean().item()
        second += nll[-len(ids):].mean().item()
    return first / len(texts), second / len(texts)


def start_losses(model_dir: str, texts: list[str], starts: list[str], max_tokens: int = 100) -> dict[str, float]:
    """Per start token (a token of the model's vocabulary): the mean loss per token of ``texts``, each read after
    it. Which token a model was pre-trained to read a document after shows as the lowest."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir).eval()
    out = {}
    for start in starts:
        first = tok.convert_tokens_to_ids(start)
        total = count = 0.0
        for text in texts:
            x = torch.tensor([[first, *tok(text, add_special_tokens=False)["input_ids"][:max_tokens]]])  # (1, T)
            with torch.no_grad():
                logp = torch.log_softmax(model(x).logits[0, :-1].float(), -1)  # (T-1, V)
            total -= logp.gather(1, x[0, 1:, None]).sum().item()
            count += x.shape[1] - 1
        out[start] = total / count
    return out


def _filter_records(run_dir: str) -> list[dict]:
    """The run's filter records, read and checked as every stage reads them."""
    from toolformer.inspect.view import read_stage

    return read_stage(Path(run_dir), "filter").records


def margins(run_dir: str, fractions: tuple[float, ...] = (1.0, 0.1, 0.01, 0.001)) -> list[dict]:
    """Per tool with gold and per top fraction of its candidates by L⁻ − L⁺: calls, the smallest margin among
    them, right ones against gold, precision and recall."""
    from toolformer.inspect.gold import match_gold
    from toolformer.rundir.folder import read_documents

    records = _filter_records(run_dir)
    documents = read_documents(run_dir)
    rows = []
    for tool in GOLD_SOURCES:
        docs = gold_documents(tool, documents)
        scored = sorted((r for r in records if r["tool"] == tool and r["doc_id"] in docs
                         and r.get("loss_plus") is not None), key=lambda r: r["loss_minus"] - r["loss_plus"],
                        reverse=True)
        for frac in fractions if scored else ():
            top = scored[: max(1, int(len(scored) * frac))]
            judged = match_gold([r | {"kept": True} for r in top], docs)
            c = judged["per_tool"][tool] if judged else {"kept_right": 0, "precision": 0.0, "recall_right": 0.0,
                                                         "gold": 0}
            rows.append({"tool": tool, "top": frac, "calls": len(top),
                         "margin_at_least": round(top[-1]["loss_minus"] - top[-1]["loss_plus"], 3),
                         "right": c["kept_right"], "precision": c["precision"], "recall": c["recall_right"],
                         "gold": c["gold"]})
    return rows


def closest_to_tau(run_dir: str) -> dict[str, float]:
    """Per tool: the smallest |L⁻ − L⁺ − tau_f| of its scored candidates. Another CPU kernel or batch moves a loss
    in its last digits (1e-5 to 1e-4 nats); a kept decision can change only where this is as small."""
    out: dict[str, float] = {}
    for r in _filter_records(run_dir):
        if r.get("loss_plus") is not None:
            gap = abs(r["loss_minus"] - r["loss_plus"] - r["tau_filter"])
            out[r["tool"]] = min(out.get(r["tool"], gap), gap)
    return out


def per_position(run_dir: str, limits: tuple[int, ...] = (6, 12, 18, 24)) -> list[dict]:
    """The rule proposers' ``sample.max_rule_candidates`` replayed on a run's filter records: per tool and limit N,
    what the filter would have scored and kept had only the first N candidates of each position (in the
    proposer's order) been proposed, against the gold. Each candidate's losses do not depend on the others', so
    this is what a run with the lower limit keeps (the chain stage's rounds aside)."""
    from toolformer.inspect.gold import match_gold
    from toolformer.rundir.folder import read_documents

    records = _filter_records(run_dir)
    documents = read_documents(run_dir)
    rows = []
    for tool in GOLD_SOURCES:
        docs = gold_documents(tool, documents)
        mine = [r for r in records if r["tool"] == tool and r["doc_id"] in docs]
        for limit in limits if mine else ():
            seen: dict[tuple[str, int], int] = {}
            subset = []
            for r in mine:
                at = (r["doc_id"], r["position"])
                seen[at] = seen.get(at, 0) + 1
                if seen[at] <= limit:
                    subset.append(r)
            judged = match_gold(subset, docs)
            c = judged["per_tool"].get(tool) if judged else None
            if c is not None:
                rows.append({"tool": tool, "per_position": limit, "candidates": len(subset),
                             "scored": sum(r.get("loss_plus") is not None for r in subset), "kept": c["kept"],
                             "right": c["kept_right"], "precision": c["precision"], "recall": c["recall_right"],
                             "gold": c["gold"]})
    return rows


def _run_model(run_dir: str) -> str:
    """The run's ``model.path``, from the config it saved (RUN_DIR/config.yaml)."""
    from toolformer.config.load import read_yaml_config

    return str(read_yaml_config(Path(run_dir) / "config.yaml")["model"]["path"])


def _heldout_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--world", default="runs/published/world", help="the world folder whose heldout.jsonl is read")
    p.add_argument("--texts", type=int, default=60, help="how many of its sentences")


def _heldout(args) -> list[str]:
    from toolformer.rundir.files import read_jsonl

    return [d["text"] for d in read_jsonl(Path(args.world) / "heldout.jsonl")][: args.texts]


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m toolformer.published.lab")
    sub = p.add_subparsers(dest="what", required=True)
    c = sub.add_parser("copy")
    c.add_argument("models", nargs="+")
    _heldout_args(c)
    m = sub.add_parser("margins")
    m.add_argument("run_dir")
    st = sub.add_parser("starts")
    st.add_argument("model")
    st.add_argument("tokens", nargs="+")
    _heldout_args(st)
    g = sub.add_parser("gold")
    g.add_argument("run_dir")
    lim = sub.add_parser("per-position")
    lim.add_argument("run_dir")
    lim.add_argument("--limits", type=int, nargs="+", default=[6, 12, 18, 24])
    il = sub.add_parser("inline")
    il.add_argument("run_dir")
    il.add_argument("--model", default="", help="the judge (default: the run's model.path)")
    n = sub.add_parser("needed")
    n.add_argument("run_dir")
    n.add_argument("--model", default="", help="the model to ask (default: the run's model.path)")
    co = sub.add_parser("cost")
    co.add_argument("run_dir")
    co.add_argument("--bins", type=int, default=4, help="groups of calls by position (quantiles)")
    co.add_argument("--per-bin", type=int, default=40, help="calls timed in each group")
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.what == "starts":
        for start, loss in start_losses(args.model, _heldout(args), args.tokens).items():
            print(f"{args.model}: after {start} a held-out sentence costs {loss:.3f} nats per token")
        return 0
    if args.what == "gold":
        from toolformer.published.gold import gold_report

        print(json.dumps(gold_report(args.run_dir), indent=1))
        return 0
    if args.what == "inline":
        from toolformer.published.placement import compare

        for row in compare(args.run_dir, args.model or _run_model(args.run_dir)):
            print(json.dumps(row))
        return 0
    if args.what == "needed":
        from toolformer.published.needed import needed_recall

        model = args.model or _run_model(args.run_dir)
        print(json.dumps(needed_recall(args.run_dir, model), indent=1))
        return 0
    if args.what == "cost":
        from toolformer.published.cost import filter_cost, print_cost

        print_cost(filter_cost(args.run_dir, args.bins, args.per_bin))
        return 0
    if args.what == "copy":
        texts = _heldout(args)
        for model in args.models:
            a, b = copy_probe(model, texts)
            print(f"{model}: loss per token of a held-out sentence {a:.2f}, the same sentence said again {b:.2f}")
        return 0
    rows = per_position(args.run_dir, tuple(args.limits)) if args.what == "per-position" else margins(args.run_dir)
    for row in rows:
        print(json.dumps(row))
    if args.what == "margins":
        print(json.dumps({"closest_to_tau": closest_to_tau(args.run_dir)}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
