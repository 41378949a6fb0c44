"""Documents cut to size (:mod:`toolformer.corpus.reader` reads them): a document longer than
``corpus.max_doc_chars`` characters into pieces ``<id>#p<k>`` (:func:`pieces`), one longer than the model's
window into windows of tokens ``<id>#w<k>`` (:func:`split_windows`), and documents into the sample stage's
shard groups, a piece ending its group (:func:`shard_groups`). Each part keeps its document's date and the
gold calls that start in it, their ``char_start`` counted from the part's start."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from toolformer.rundir.folder import GOLD_CALLS


def split_windows(docs: Iterable[dict], tokenizer, max_tokens: int) -> list[dict]:
    """Split documents longer than ``max_tokens`` tokens into consecutive windows
    at token boundaries; each window keeps the document's date and the gold
    calls that start in it (if the document has gold calls)."""
    out = []
    for doc in docs:
        enc = tokenizer(doc["text"], add_special_tokens=False, return_offsets_mapping=True)
        offsets = enc["offset_mapping"]
        if len(offsets) <= max_tokens:
            out.append(doc)
            continue
        for k, start in enumerate(range(0, len(offsets), max_tokens)):
            chunk = offsets[start : start + max_tokens]
            a = chunk[0][0] if k else 0
            b = offsets[start + max_tokens][0] if start + max_tokens < len(offsets) else len(doc["text"])
            out.append(_part(doc, f"{doc['doc_id']}#w{k}", a, b))
    return out


PIECE = "piece"  # a piece's number k in its document (:func:`pieces`); never written out


def pieces(doc: dict, max_chars: int) -> Iterator[dict]:
    """``doc`` itself when it has at most ``max_chars`` characters (or ``max_chars`` is 0), else its consecutive
    pieces ``<id>#p<k>`` of at most ``max_chars`` characters, each cut before the last whitespace of its second
    half when there is one; each keeps the date and the gold calls that start in it."""
    text = doc["text"]
    if not max_chars or len(text) <= max_chars:
        yield doc
        return
    start, k = 0, 0
    while start < len(text):
        end = len(text)
        if end - start > max_chars:
            end = start + max_chars
            end = next((i for i in range(end, start + max_chars // 2, -1) if text[i].isspace()), end)
        yield _part(doc, f"{doc['doc_id']}#p{k}", start, end) | {PIECE: k}
        start, k = end, k + 1


def _part(doc: dict, doc_id: str, a: int, b: int) -> dict:
    """The characters ``a:b`` of ``doc`` as a document ``doc_id``: its date, and its gold calls that start there."""
    part = {"doc_id": doc_id, "text": doc["text"][a:b], "date": doc["date"]}
    if GOLD_CALLS in doc:
        part[GOLD_CALLS] = [g | {"char_start": g["char_start"] - a} for g in doc[GOLD_CALLS]
                            if a <= g["char_start"] < b]
    return part


def shard_groups(docs: Iterable[dict], size: int) -> Iterator[list[dict]]:
    """``docs`` in groups of ``size`` (the sample stage's shards), a piece of a long document (:func:`pieces`)
    ending its group, so a shard holds at most one piece however many pieces a document has. Without pieces,
    the groups of :func:`toolformer.rundir.folder.chunked`."""
    group: list[dict] = []
    for doc in docs:
        group.append(doc)
        if len(group) == size or PIECE in doc:
            yield group
            group = []
    if group:
        yield group
