"""QA: answers a question from a local knowledge store of facts.

The paper used a retrieval-augmented neural QA model; this tool is the
deterministic, offline counterpart: BM25 retrieval over the facts
(subject, relation, object and an optional sentence), then extraction of the
object of the best fact whose subject the question names. The knowledge file is read as WikiSearch reads its
collection (:func:`toolformer.tools.wikisearch.read_data`: a regular file, capped in size, opened once).
"""

from __future__ import annotations

import threading
from pathlib import Path

from toolformer.tools.base import TEXT_PATTERN, Tool, ToolError, prepare_data, uninterrupted
from toolformer.tools.wikisearch import BM25Index, index_cache, read_data, tokenize_words

# Function words dropped from a question before retrieval: they match every
# fact's sentence and say nothing of the relation asked for. Question words
# (what, where, when, who, which, how) stay: they do.
STOPWORDS = frozenset([
    "a", "an", "the", "of", "is", "are", "was", "were", "be", "been", "do", "does", "did", "you", "know", "me",
    "tell", "can", "could", "it", "its", "this", "that", "and", "or", "as", "by", "for", "to", "at", "on", "in",
])


def query_words(question: str) -> list[str]:
    """The words of ``question`` that retrieval scores (all of them if every word is a function word)."""
    words = tokenize_words(question)
    return [w for w in words if w not in STOPWORDS] or words


class QA(Tool):
    name = "QA"
    description = (
        "Answers a factual question from a local knowledge store: retrieves the facts "
        "that best match the question and returns the object of the best fact whose "
        "subject is named in the question, as a short answer."
    )
    input_description = "a question in natural language"
    example = "Where does the Danube end?"
    input_pattern = TEXT_PATTERN
    prompt = (
        "Your task is to add calls to a Question Answering API to a piece of text. A call "
        "asks a question whose answer the text states next. Write a call as "
        "\"[QA(question)]\". Examples:\n"
        "Input: Nairobi is the capital of Kenya.\n"
        "Output: Nairobi is the capital of [QA(Nairobi is the capital of which country?)] Kenya.\n"
        "Input: The composer was born in Salzburg in 1756.\n"
        "Output: The composer was born in [QA(Where was Mozart born?)] Salzburg in 1756.\n"
        "Input: The Rhine rises in the Swiss Alps.\n"
        "Output: The Rhine rises in the [QA(Where does the Rhine rise?)] Swiss Alps.\n"
        "Input: {text}\n"
        "Output:"
    )

    def __init__(self, knowledge: str | Path, candidates: int = 10):
        self.path = Path(knowledge)
        self.candidates = candidates
        self._facts: list[dict] | None = None
        self._index: BM25Index | None = None
        self._loading = threading.Lock()  # one load at a time: concurrent first calls wait for it

    def _load(self) -> None:
        with self._loading, uninterrupted():  # the read is capped; a call given up on still leaves it loaded
            if self._index is None:
                self._facts, stamp = read_data(self.path, ("subject", "relation", "object"), "tools.knowledge")
                texts = [f"{f['subject']} {f['relation']} {f.get('text', '')}" for f in self._facts]
                self._index = BM25Index(texts, index_cache(self.path), stamp, f"QA's knowledge {self.path}")

    def prepare(self) -> None:
        prepare_data(self._load)

    def run(self, tool_input: str, date: str | None = None) -> str:
        question = tool_input.strip()
        if not question:
            raise ToolError("empty", "empty question", "a question, e.g. [QA(Where does the Danube end?)]")
        self._load()
        assert self._index is not None and self._facts is not None  # set by _load
        words = set(tokenize_words(question))
        for i, _score in self._index.search(" ".join(query_words(question)), self.candidates):
            fact = self._facts[i]
            names = [fact["subject"], *fact.get("aliases", [])]
            # Extraction: the question must name the fact's subject.
            if any(set(tokenize_words(n)) <= words for n in names if tokenize_words(n)):
                return str(fact["object"])
        raise ToolError("not_found", f"no fact answers {question!r}")
