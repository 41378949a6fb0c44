"""Searching evaluation prompts in training texts.

Texts are compared normalised (:func:`normalise`: lowercase, accents folded, every run of characters other than
letters and digits one space), so a prompt that differs from a training text only in case, spacing or punctuation
is still found. :func:`hits` finds every training text that holds an evaluation prompt; :func:`longest_shared`
gives the longest run of words an evaluation prompt shares with any training text (what is left after the leaks
are removed: common phrases)."""

from __future__ import annotations

import bisect
import re
import unicodedata
from collections.abc import Sequence

_NON_WORD = re.compile(r"[^0-9a-z]+")
_SEP = "\x00"


def normalise(text: str) -> str:
    folded = unicodedata.normalize("NFKD", text.lower())
    folded = "".join(c for c in folded if not unicodedata.combining(c))
    return " ".join(_NON_WORD.sub(" ", folded).split())


class Haystack:
    """The normalised training texts joined into one string, with where each starts."""

    def __init__(self, texts: Sequence[str]):
        parts, starts, at = [], [], 0
        for t in texts:
            starts.append(at)
            n = f" {normalise(t)} "
            parts.append(n + _SEP)
            at += len(n) + 1
        self.text = "".join(parts)
        self.starts = starts

    def find_all(self, needle: str) -> list[int]:
        """Indices of the texts that hold the normalised ``needle`` (whole words)."""
        key = f" {needle} "
        found, at = [], self.text.find(key)
        while at >= 0:
            found.append(bisect.bisect_right(self.starts, at) - 1)
            at = self.text.find(key, at + 1)
        return found


def hits(prompts: Sequence[str], texts: Sequence[str]) -> dict[int, list[int]]:
    """Prompt index → indices of the ``texts`` holding it (prompts whose normalised form is empty are skipped)."""
    hay = Haystack(texts)
    out: dict[int, list[int]] = {}
    for i, p in enumerate(prompts):
        n = normalise(p)
        if n:
            found = hay.find_all(n)
            if found:
                out[i] = sorted(set(found))
    return out


def longest_shared(prompts: Sequence[str], texts: Sequence[str], floor: int = 4) -> dict:
    """The longest word n-gram (n ≥ ``floor``) of any prompt found in any text: ``{"words", "ngram", "prompt"}``
    (``words`` 0 when none of ``floor`` words is shared)."""
    hay = Haystack(texts)
    grams: set[int] = set()
    for t in texts:
        w = normalise(t).split()
        grams.update(hash(tuple(w[k : k + floor])) for k in range(len(w) - floor + 1))
    best: dict = {"words": 0, "ngram": "", "prompt": ""}
    for p in prompts:
        w = normalise(p).split()
        run, longest = 0, 0
        for k in range(len(w) - floor + 1):
            run = run + 1 if hash(tuple(w[k : k + floor])) in grams else 0
            if run > longest:
                longest = run
        n = longest + floor - 1 if longest else 0
        while n > best["words"] and n >= floor:  # the runs of floor-grams bound it; check the text itself
            found = next((g for g in (" ".join(w[s : s + n]) for s in range(len(w) - n + 1))
                          if hay.text.find(f" {g} ") >= 0), None)
            if found is not None:
                best = {"words": n, "ngram": found, "prompt": p}
                break
            n -= 1
    return best
