"""Which gold calculations the base model needs a tool for: the gold Calculator calls whose result the model does
not write itself.

At each gold call's position the model reads the document up to the result (its start token first, as the
pipeline reads a document) and continues greedily; when its continuation does not begin with the number the
document writes there, the model gets that calculation wrong and a call is worth keeping there. Recall over these
calls says whether the filter keeps calls where the model needs them (a call before ``100/2= 50`` that the model
computes anyway lowers the loss little, and is rightly left out).

``python -m toolformer.published.lab needed RUN_DIR [--model M]`` prints the counts; the demo adds them to
``results.json`` → ``gold`` → ``Calculator`` → ``needed``."""

from __future__ import annotations

import re
from pathlib import Path

from toolformer.published.gold import GOLD_SOURCES, chain_records, gold_documents
from toolformer.rundir.folder import GOLD_CALLS, read_documents

_NUMBER = re.compile(r"-?\$?\d[\d,]*(?:\.\d+)?")
TOOL = "Calculator"


def written_number(text: str, at: int) -> str | None:
    """The number the document writes at character ``at`` (``$`` and thousands commas as written); None if none."""
    m = _NUMBER.match(text, at)
    return m.group(0) if m else None


def continues_with(continuation: str, number: str) -> bool:
    """Whether ``continuation`` begins with ``number`` as a whole number (``50`` is not ``500`` nor ``50.5``), spaces
    aside."""
    rest = continuation.lstrip()
    return rest.startswith(number) and not re.match(r"[.,]?\d", rest[len(number):])


def model_misses(documents: dict[str, dict], model_dir: str, batch_size: int = 16) -> dict[tuple[str, int], bool]:
    """Per gold Calculator call ``(doc_id, char_start)`` of ``documents``: True when the model's greedy continuation
    of the text before it does not write the document's number there."""
    import torch

    from toolformer.config.schema import ModelConfig
    from toolformer.lm.modeling import document_start, load

    model, tok = load(ModelConfig(path=model_dir, dtype="float32", device="cpu"))
    start = document_start(tok)
    asks = []
    for doc_id, doc in gold_documents(TOOL, documents).items():
        for g in doc[GOLD_CALLS]:
            number = written_number(doc["text"], g["char_start"]) if g["tool"] == TOOL else None
            if number is not None:
                ids = start + tok(doc["text"][: g["char_start"]], add_special_tokens=False)["input_ids"]
                asks.append(((doc_id, g["char_start"]), ids, number))
    pad = tok.pad_token_id if tok.pad_token_id is not None else 0
    out: dict[tuple[str, int], bool] = {}
    for i in range(0, len(asks), batch_size):
        part = asks[i: i + batch_size]
        width = max(len(ids) for _k, ids, _n in part)
        new = max(len(tok(n, add_special_tokens=False)["input_ids"]) for _k, _ids, n in part) + 2
        x = torch.tensor([[pad] * (width - len(ids)) + ids for _k, ids, _n in part])  # (B, T), padded on the left
        mask = torch.tensor([[0] * (width - len(ids)) + [1] * len(ids) for _k, ids, _n in part])
        with torch.no_grad():
            y = model.generate(input_ids=x, attention_mask=mask, max_new_tokens=new, do_sample=False,
                               pad_token_id=pad)  # (B, T + new)
        for (key, _ids, number), row in zip(part, y[:, width:].tolist()):
            out[key] = not continues_with(tok.decode(row, skip_special_tokens=True), number)
    return out


def needed_recall(run_dir: str | Path, model_dir: str) -> dict:
    """The gold Calculator calls the model at ``model_dir`` gets wrong (:func:`model_misses`), and the share of them
    with a right kept call (the filter's and the chain's): ``{"gold", "needed", "needed_with_right_kept",
    "recall_right"}``, overall and per source (``by_source``)."""
    from toolformer.inspect.gold import match_gold
    from toolformer.inspect.view import read_stage

    run_dir = Path(run_dir)
    documents = read_documents(run_dir)
    misses = model_misses(documents, model_dir)
    calls = [r for r in read_stage(run_dir, "filter").records + chain_records(run_dir) if r["tool"] == TOOL]
    out: dict = {}
    for name, prefix in {"all": "", **GOLD_SOURCES[TOOL][0]}.items():
        docs = {d: doc | {GOLD_CALLS: [g for g in doc[GOLD_CALLS] if misses.get((d, g["char_start"]))]}
                for d, doc in gold_documents(TOOL, documents).items() if d.startswith(prefix)}
        needed = sum(len(doc[GOLD_CALLS]) for doc in docs.values())
        judged = match_gold([r for r in calls if r["doc_id"] in docs], docs) if needed else None
        right = judged["per_tool"][TOOL]["gold_with_right_kept"] if judged and TOOL in judged["per_tool"] else 0
        counts = {"gold": sum(k[0] in docs for k in misses), "needed": needed, "needed_with_right_kept": right,
                  "recall_right": right / needed if needed else None}
        if name == "all":
            out.update(counts, by_source={})
        elif counts["gold"]:
            out["by_source"][name] = counts
    return out
