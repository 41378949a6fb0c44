"""The filter's question asked with the call inline instead of as a prefix.

The product's filter puts the call z before the whole document (the paper's prefix placement). A model tuned on
calls reads them inline, at their position, as it writes them: ``x_<i  [Calculator(48 / 2) → 24]  x_i …``. This
recomputes, for a run's scored candidates, L(ε), L(e(c, ε)) and L(e(c, r)) of the next ``horizon`` tokens with
the call inline (its text and the filter's separator inserted at the candidate's character position), with any
model as the judge, and says what τ_f would keep against the gold.

``python -m toolformer.published.lab inline RUN_DIR [--model M]`` (a lab measurement: the text before and after
the call are tokenized apart, so a token across the position is split there in all three variants alike)."""

from __future__ import annotations

from pathlib import Path


def _loss(model, ids: list[int], start: int, weights: list[float]) -> float:
    """-Σ_t w_t log p(ids[start + t] | ids[:start + t]) over the targets that exist."""
    import torch

    x = torch.tensor([ids])  # (1, T)
    with torch.no_grad():
        logp = torch.log_softmax(model(x).logits[0].float(), -1)  # (T, V)
    return -sum(w * logp[start + t - 1, ids[start + t]].item()
                for t, w in enumerate(weights) if start + t < len(ids))


def inline_records(records: list[dict], documents: dict[str, dict], model_dir: str, horizon: int = 5,
                   separator: str = " ") -> list[dict]:
    """The scored filter ``records`` with their losses recomputed inline by ``model_dir`` (``loss_none``,
    ``loss_no_result``, ``loss_with_result``, ``loss_minus``, ``loss_plus``; ``kept`` at the record's τ_f). The
    text around a position and L(ε) there are computed once for all the calls proposed at it."""
    from toolformer.config.schema import ModelConfig
    from toolformer.lm.losses import is_kept, loss_minus, loss_weights
    from toolformer.lm.modeling import document_start, load

    model, tok = load(ModelConfig(path=model_dir, dtype="float32", device="cpu"))
    start, weights = document_start(tok), loss_weights(horizon)
    at: dict[tuple[str, int], tuple[list[int], list[int], float]] = {}  # (doc, char) -> before, after, L(ε)
    out = []
    for r in records:
        key = (r["doc_id"], r["char_start"])
        if key not in at:
            text = documents[r["doc_id"]]["text"]
            before = start + tok(text[: r["char_start"]], add_special_tokens=False)["input_ids"]
            after = tok(text[r["char_start"]:], add_special_tokens=False)["input_ids"][: horizon]
            at[key] = before, after, round(_loss(model, before + after, len(before), weights), 6)
        before, after, l_none = at[key]
        losses = {"loss_none": l_none}
        for name, call in (("loss_no_result", r["call_text_no_result"]), ("loss_with_result", r["call_text"])):
            inserted = tok(call + separator, add_special_tokens=False)["input_ids"]
            losses[name] = round(_loss(model, before + inserted + after, len(before) + len(inserted), weights), 6)
        lm, lp = loss_minus(l_none, losses["loss_no_result"]), losses["loss_with_result"]
        out.append(r | losses | {"loss_minus": lm, "loss_plus": lp, "kept": is_kept(lm, lp, r["tau_filter"])})
    return out


def compare(run_dir: str | Path, model_dir: str) -> list[dict]:
    """Per tool: scored, kept and kept-right calls against the gold with the prefix (the run's records) and with
    the call inline (:func:`inline_records`)."""
    from toolformer.inspect.gold import match_gold
    from toolformer.inspect.view import read_stage
    from toolformer.rundir.folder import read_documents

    documents = read_documents(Path(run_dir))
    prefix = [r for r in read_stage(Path(run_dir), "filter").records if r.get("loss_plus") is not None]
    rows = []
    for placement, records in (("prefix", prefix), ("inline", inline_records(prefix, documents, model_dir))):
        judged = match_gold(records, documents) or {"per_tool": {}}
        for tool in sorted({r["tool"] for r in records}):
            c = judged["per_tool"].get(tool, {})
            rows.append({"placement": placement, "tool": tool, "scored": sum(r["tool"] == tool for r in records),
                         "kept": sum(r["tool"] == tool and r["kept"] for r in records),
                         "right": c.get("kept_right"), "gold": c.get("gold"), "model": model_dir})
    return rows
