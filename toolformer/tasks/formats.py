"""Loaders for the published evaluation files, read as they are distributed.

========= ===================================================================
format    files (source)
========= ===================================================================
asdiv     ``ASDiv.xml`` (the ASDiv release): ``<Problem ID>`` with ``<Body>``,
          ``<Question>`` and ``<Answer>`` such as ``9 (apples)``, ``-(1/3)``,
          ``5:45``, ``3:30 p.m.``, ``5; 15; 20``; answers without a number
          (``Yes``, a name) are skipped
svamp     ``SVAMP.json`` (the SVAMP release): a JSON list of ``{"ID", "Body",
          "Question", "Answer"}``
mawps     MWPToolkit's MAWPS files: ``MAWPS.json`` and ``trainset/validset/
          testset.json`` (``{"id", "original_text", "ans"}``),
          ``mawps_single.json`` (``{"iIndex", "sQuestion", "lSolutions"}``),
          ``mawps_fold*_*.orig.jsonl`` (the item under ``"original"``)
webqs     WebQuestions ``test.json`` (``{"utterance", "targetValue": "(list
          (description X))"}``), layouts with ``{"qId", "qText", "answers"}``
          or ``{"question", "answers"}``; ``qId`` is the item id
triviaqa  the official ``unfiltered``/``rc`` JSON (``{"Data": [{"Question",
          "QuestionId", "Answer": {"Value", "Aliases"}}]}``), llm-foundry's JSONL
          (``{"context": "Question: …\\nAnswer:", "answer", "aliases"}``) and
          ``{"question", "answer", "aliases"}`` JSONL
gsm8k     GSM8K ``{"question", "answer"}``: the gold is the number after the
          solution's ``####`` (a record without one is skipped)
lama      LAMA (``data.zip`` of the LAMA release): T-REx ``P*.jsonl``
          (``evidences[].masked_sentence``), Google-RE ``*_test.jsonl`` and
          SQuAD ``test.jsonl`` (``masked_sentences``), answer ``obj_label``
========= ===================================================================

LAMA items follow the paper: the prompt is the first of the item's masked sentences that ends with ``[MASK]``
(spaces, closing brackets and punctuation aside), cut before it; items with no such sentence are skipped.

A JSON Lines file is split at ``\\n`` only (a U+0085 or U+2028 inside a string is text). A record that cannot be
used (invalid JSON, a missing field, an answer that is not a number or has one of over 50 digits, a lone surrogate
``"\\ud800"``) never stops a load: it is skipped with its id and reason (:attr:`TaskData.skipped`). A file that
cannot be read at all (XML that declares an entity), or that leaves no item, is a :class:`TaskFormatError`.
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path

from defusedxml import ElementTree as SafeET

from toolformer.config.text import decode_utf8, lone_surrogate, parse_json
from toolformer.tasks.metrics import gold_problem, strip_units


class TaskFormatError(ValueError):
    """A task file that cannot be read; the message names the file and the line or item."""


class SkipItem(Exception):
    """One record that cannot be used: ``reason`` (a short kind, counted) and ``detail``."""

    def __init__(self, reason: str, detail: str = ""):
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason, self.detail = reason, detail


@dataclass
class TaskItem:
    id: str
    question: str
    answers: list[str]  # the gold answer first, then aliases
    date: str | None = None  # the item's date, for the Calendar tool


@dataclass
class TaskData:
    items: list[TaskItem]
    skipped: list[dict] = field(default_factory=list)
    """Records of the file left out: ``{"id", "where", "reason", "detail"}``."""
    total: int = 0
    """Records in the file (items + skipped)."""

    def reasons(self) -> dict[str, int]:
        """How many records were skipped for each reason."""
        return dict(Counter(s["reason"] for s in self.skipped).most_common())


# -- reading files -------------------------------------------------------------
@dataclass
class Record:
    where: str  # file and line or item, for messages
    index: int
    value: object = None
    error: SkipItem | None = None


def _json_lines(path: Path, text: str) -> Iterator[Record]:
    for n, line in enumerate(text.split("\n"), 1):
        if not line.strip():
            continue
        where = f"{path}: line {n}"
        try:
            yield Record(where, n - 1, parse_json(line, long_ints_as_text=True))
        except json.JSONDecodeError as e:
            yield Record(where, n - 1, error=SkipItem("invalid JSON", e.msg))


def read_records(path: Path, raw: bytes | None = None) -> list[Record]:
    """The records of a JSON list, an object holding one (TriviaQA's ``Data``) or JSON Lines; of ``raw`` if given."""
    raw = path.read_bytes() if raw is None else raw
    text = decode_utf8(raw, path, "{where}: not UTF-8 (byte {offset})", error=TaskFormatError)
    text = text.replace("\r\n", "\n").replace("\r", "\n")  # the newlines of a file read as text
    head = text.lstrip()[:1]
    if head == "[" or head == "{":
        try:
            data = parse_json(text, long_ints_as_text=True)
        except json.JSONDecodeError as e:
            if head == "[":
                raise TaskFormatError(f"{path}: line {e.lineno}: invalid JSON: {e.msg}") from None
            data = None  # JSON Lines
        if isinstance(data, dict) and isinstance(data.get("Data"), list):
            data = data["Data"]
        if isinstance(data, list):
            return [Record(f"{path}: item {i}", i, r) for i, r in enumerate(data)]
    return list(_json_lines(path, text))


def _get(r: dict, *keys: str):
    for k in keys:
        if k in r and r[k] is not None:
            return r[k]
    raise SkipItem("missing field", " or ".join(repr(k) for k in keys))


def _text(value, key: str) -> str:
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise SkipItem("bad field", f"{key}: expected text or a number, got {value!r}"[:200])
    return (format(Decimal(repr(value)), "f") if isinstance(value, float) else str(value)).strip()  # 1e+20: digits


def _join(body: str, question: str) -> str:
    body = body.strip()
    if body and body[-1] not in ".?!":
        body += "."
    return f"{body} {question.strip()}".strip()


def _numeric(value, key: str) -> str:
    text = _text(value, key)
    if why := gold_problem(text):
        raise SkipItem(why[0], f"{key}: {why[1]}")
    return text


def _first(value, key: str):
    """The first element of a list answer (``lSolutions``, ``[[54.0]]``)."""
    while isinstance(value, list):
        if not value:
            raise SkipItem("no answer", f"{key} is empty")
        value = value[0]
    return value


def _item_id(r: dict, index: int, *keys: str) -> str:
    for k in (*keys, "id", "ID", "iIndex", "uuid", "question_id", "QuestionId", "qId"):
        if r.get(k) is not None:
            return str(r[k])
    return str(index)


# -- formats -------------------------------------------------------------------
def load_asdiv(path: Path, raw: bytes | None = None) -> TaskData:
    try:  # defusedxml: a document that declares an entity is refused, no entity is ever expanded
        root = SafeET.fromstring(path.read_bytes() if raw is None else raw)
    except SafeET.ParseError as e:
        raise TaskFormatError(f"{path}: line {e.position[0]}, column {e.position[1]}: invalid XML") from None
    except (SafeET.EntitiesForbidden, SafeET.ExternalReferenceForbidden) as e:
        raise TaskFormatError(f"{path}: declares an XML entity ({e}): not read, entities are never expanded") from None
    items, skipped, total = [], [], 0
    for i, p in enumerate(root.iter("Problem")):
        total += 1
        pid = p.get("ID") or str(i)
        where = f"{path}: Problem {pid}"
        try:
            parts = {}
            for tag in ("Body", "Question", "Answer"):
                el = p.find(tag)
                if el is None or el.text is None:
                    raise SkipItem("missing field", f"<{tag}>")
                parts[tag] = el.text.strip()
            answer = strip_units(parts["Answer"])  # `9 (apples)`: the unit is not the answer
            if why := gold_problem(answer):
                raise SkipItem(*why)
            items.append(TaskItem(pid, _join(parts["Body"], parts["Question"]), [answer]))
        except SkipItem as e:
            skipped.append({"id": pid, "where": where, "reason": e.reason, "detail": e.detail})
    if not total:
        raise TaskFormatError(f"{path}: no <Problem> elements")
    return TaskData(items, skipped, total)


def svamp_item(r: dict, index: int) -> TaskItem:
    body = _text(_get(r, "Body"), "Body")
    question = _text(_get(r, "Question"), "Question")
    return TaskItem(_item_id(r, index), _join(body, question), [_numeric(_get(r, "Answer"), "Answer")])


def mawps_item(r: dict, index: int) -> TaskItem:
    inner = r.get("original")
    if isinstance(inner, dict):  # mawps_fold*.orig.jsonl: the MAWPS record under "original"
        merged = {**inner, "id": r.get("id", inner.get("iIndex"))}
        if "lSolutions" not in inner and r.get("answer") is not None:
            merged["lSolutions"] = r["answer"]
        r = merged
    question = _text(_get(r, "original_text", "sQuestion", "text"), "sQuestion")
    answer = _first(_get(r, "ans", "lSolutions", "answer"), "lSolutions")
    return TaskItem(_item_id(r, index), " ".join(question.split()), [_numeric(answer, "lSolutions")])


GSM8K_FINAL = "####"


def gsm8k_answer(solution: str) -> str:
    """The final answer of a GSM8K solution: the number after its last ``####``."""
    _head, mark, tail = solution.rpartition(GSM8K_FINAL)
    if why := gold_problem(tail.strip().replace(",", "")) if mark else ("no ####", ""):
        raise SkipItem(*why)
    return tail.strip().replace(",", "")


def gsm8k_item(r: dict, index: int) -> TaskItem:
    answer = gsm8k_answer(_text(_get(r, "answer"), "answer"))
    return TaskItem(_item_id(r, index), " ".join(_text(_get(r, "question"), "question").split()), [answer])


_DESCRIPTION = re.compile(r'\(description\s+(?:"((?:[^"\\]|\\.)*)"|([^()\s]+))\)')


def parse_target_value(value: str) -> list[str]:
    """``(list (description "Jazmyn Bieber") (description Canada))`` -> the answers."""
    return [q.replace('\\"', '"') if q else bare for q, bare in _DESCRIPTION.findall(value)]


def webqs_item(r: dict, index: int) -> TaskItem:
    question = _text(_get(r, "qText", "utterance", "question"), "qText")
    if r.get("answers") is not None:
        answers = r["answers"]
        if isinstance(answers, str) or not isinstance(answers, list):
            raise SkipItem("bad field", f"answers: expected a list, got {answers!r}"[:200])
        answers = [_text(a, "answers") for a in answers]
    else:
        answers = parse_target_value(_text(_get(r, "targetValue"), "targetValue"))
    if not answers:
        raise SkipItem("no answer", "answers is empty")
    return TaskItem(_item_id(r, index, "qId"), question, answers)


_CONTEXT = re.compile(r"^\s*Question:\s*(?P<q>.*?)\s*(?:\n\s*)?Answer:\s*$", re.S)


def triviaqa_item(r: dict, index: int) -> TaskItem:
    if "context" in r and not any(k in r for k in ("question", "Question")):  # llm-foundry's layout
        context = _text(_get(r, "context"), "context")
        m = _CONTEXT.match(context)
        question = m["q"] if m else context
    else:
        question = _text(_get(r, "question", "Question"), "question")
    answer = _get(r, "answer", "Answer")
    aliases = r.get("aliases") or []
    if isinstance(answer, dict):  # official / Hugging Face: {"Value"/"value", "Aliases"/"aliases", ...}
        aliases = list(answer.get("Aliases") or answer.get("aliases") or []) + list(aliases)
        answer = _get(answer, "Value", "value")
    if not isinstance(aliases, list):
        raise SkipItem("bad field", f"aliases: expected a list, got {aliases!r}"[:200])
    answers = [_text(answer, "answer")] + [_text(a, "aliases") for a in aliases]
    answers = list(dict.fromkeys(a for a in answers if a))
    if not answers:
        raise SkipItem("no answer", "answer is empty")
    date = r.get("date")
    return TaskItem(_item_id(r, index, "QuestionId", "question_id"), question, answers,
                    str(date) if date else None)


MASK = "[MASK]"


def _closes(tail: str) -> bool:
    """Whether ``tail`` is only spaces, closing brackets and punctuation (``).``, `` ) .``, ``:``)."""
    return all(c.isspace() or unicodedata.category(c) in ("Po", "Pe", "Pf") for c in tail)


def lama_prompt(sentence: str) -> str | None:
    """The text before ``[MASK]`` when it is the sentence's last word (and its only mask), else None;
    spaces, closing brackets and punctuation may follow it."""
    head, mask, tail = sentence.rpartition(MASK)
    if not mask or MASK in head or not _closes(tail) or not head.strip():
        return None
    return head.rstrip()


def lama_item(r: dict, index: int) -> TaskItem:
    if isinstance(r.get("evidences"), list) and "masked_sentences" not in r:  # T-REx
        sentences = [e.get("masked_sentence") for e in r["evidences"] if isinstance(e, dict)]
    else:  # Google-RE, SQuAD, ConceptNet
        sentences = _get(r, "masked_sentences")
        if isinstance(sentences, str):
            sentences = [sentences]
    if not isinstance(sentences, list):
        raise SkipItem("bad field", f"masked_sentences: expected a list, got {sentences!r}"[:200])
    answer = _text(_get(r, "obj_label"), "obj_label")
    prompt = next((p for p in (lama_prompt(s) for s in sentences if isinstance(s, str)) if p), None)
    if prompt is None:
        raise SkipItem("[MASK] is not the last word", f"in none of {len(sentences)} sentence(s)")
    return TaskItem(_item_id(r, index, "uuid"), prompt, [answer])


ITEM_LOADERS: dict[str, Callable[[dict, int], TaskItem]] = {
    "svamp": svamp_item, "mawps": mawps_item, "webqs": webqs_item, "triviaqa": triviaqa_item, "lama": lama_item,
    "gsm8k": gsm8k_item,
}


def load_records(path: Path, make: Callable[[dict, int], TaskItem], raw: bytes | None = None) -> TaskData:
    items, skipped = [], []
    records = read_records(path, raw)
    for rec in records:
        try:
            if rec.error is not None:
                raise rec.error
            if not isinstance(rec.value, dict):
                raise SkipItem("not a JSON object", type(rec.value).__name__)
            if lone_surrogate(rec.value):
                raise SkipItem("not text", "a lone surrogate (a \\ud800-\\udfff escape not in a pair)")
            items.append(make(rec.value, rec.index))
        except SkipItem as e:
            rid = _item_id(rec.value, rec.index) if isinstance(rec.value, dict) else str(rec.index)
            skipped.append({"id": rid, "where": rec.where, "reason": e.reason, "detail": e.detail})
    return TaskData(items, skipped, len(records))


FORMATS: dict[str, Callable[..., TaskData]] = {
    "asdiv": load_asdiv,
    **{name: lambda path, raw=None, make=make: load_records(path, make, raw) for name, make in ITEM_LOADERS.items()},
}
FORMATS["webquestions"] = FORMATS["webqs"]
KINDS = {"asdiv": "math", "svamp": "math", "mawps": "math", "webqs": "qa", "webquestions": "qa",
         "triviaqa": "qa", "lama": "qa", "gsm8k": "math"}


def _format_of(keys: set[str], r: dict) -> str | None:
    if isinstance(r.get("original"), dict) or keys & {"original_text", "sQuestion", "lSolutions"}:
        return "mawps"
    if {"question", "answer"} <= keys and GSM8K_FINAL in str(r.get("answer")):
        return "gsm8k"
    if {"Body", "Question"} <= keys:
        return "svamp"
    if keys & {"masked_sentences", "evidences"}:
        return "lama"
    if keys & {"qText", "utterance", "targetValue"} or ("question" in keys and "answers" in keys):
        return "webqs"
    if keys & {"question", "Question", "context"} and keys & {"answer", "Answer"}:
        return "triviaqa"
    return None


def detect_format(path: Path) -> str:
    """The format of a file: XML is ASDiv, else the keys of its first record."""
    if path.suffix.lower() == ".xml":
        return "asdiv"
    records = [(r.where, r.value) for r in read_records(path) if isinstance(r.value, dict)]
    if not records:
        raise TaskFormatError(f"{path}: no JSON object records")
    where, first = records[0]
    fmt = _format_of(set(first), first)
    if fmt is None:
        raise TaskFormatError(f"{where}: cannot tell the format from keys {sorted(first)}; set the task's format")
    return fmt


def load_task(path: str | Path, fmt: str = "auto", max_items: int = 0,
              raw: bytes | None = None) -> tuple[str, TaskData]:
    """(format, items) of a task file, of ``raw`` (its bytes, read once by the caller) when given; ``max_items``
    > 0 keeps the first that many."""
    path = Path(path)
    if raw is None and not path.is_file():
        raise FileNotFoundError(f"{path}: task file not found")
    if fmt == "auto":
        fmt = detect_format(path)
    if fmt not in FORMATS:
        raise ValueError(f"{path}: unknown task format {fmt!r} (known: auto, {', '.join(FORMATS)})")
    data = FORMATS[fmt](path, raw)
    if not data.items:
        why = "; ".join(f"{s['where']}: {s['reason']}" for s in data.skipped[:3])
        raise TaskFormatError(f"{path}: no usable items as {fmt} ({len(data.skipped)} skipped{': ' if why else ''}"
                              f"{why})")
    if max_items > 0:
        data.items = data.items[:max_items]
    return fmt, data
