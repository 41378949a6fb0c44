"""Evaluation tasks as data: loaders for published formats and the paper's metrics.

A task file becomes a list of :class:`TaskItem` (question, gold answers). The
loaders read local copies of the published files:

========= ================================================================
format    file
========= ================================================================
asdiv     ``ASDiv.xml``: ``<Problem>`` with ``<Body>``, ``<Question>``,
          ``<Answer>`` such as ``9 (apples)``
svamp     ``SVAMP.json``: a JSON list of ``{"Body", "Question", "Answer"}``
mawps     a JSON list of ``{"original_text", "ans"}`` (answers may be strings)
webqs     WebQuestions (also ``webquestions``), JSON list or JSONL: ``qText`` or ``utterance``, and
          ``answers`` (a list) or ``targetValue`` (``(list (description X))``)
triviaqa  JSONL ``{"question", "answer", "aliases"}`` (``answer`` may also be
          the official ``{"value", "aliases"}`` object)
lama      JSONL ``{"masked_sentences", "obj_label"}``; items whose ``[MASK]``
          ends the sentence, the prompt being the text before it
========= ================================================================

Metrics (section 4.2 of the paper): math takes the first number of the
output, or the first number after ``=`` when there is one, and compares it to
the gold answer rounded to 2 decimals; QA counts an answer as correct if the
normalised gold answer or an alias appears in the first 20 words of the
output (5 for LAMA).
"""

from __future__ import annotations

import json
import re
import string
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

__all__ = [
    "FORMATS", "TaskData", "TaskFormatError", "TaskItem", "default_max_words", "detect_format",
    "extract_number", "load_task", "math_score", "normalize_answer", "qa_score",
]


class TaskFormatError(ValueError):
    """A task file that cannot be read; the message names the file and the line or item."""


@dataclass
class TaskItem:
    id: str
    question: str
    answers: list[str]  # the gold answer first, then aliases
    date: str | None = None  # the item's date, for the Calendar tool


@dataclass
class TaskData:
    items: list[TaskItem]
    skipped: list[str] = field(default_factory=list)  # why items of a valid file were left out


# -- metrics -------------------------------------------------------------------
# A number: thousands with commas (1,234.5) or plain digits; a minus only at a word start.
_NUMBER = re.compile(r"(?<![\d.,])-?(?:\d{1,3}(?:,\d{3})+(?![\d,])|\d+)(?:\.\d+)?")


def _to_float(match: str) -> float:
    return float(match.replace(",", ""))


def extract_number(text: str) -> float | None:
    """The first number after the first ``=`` if there is one, else the first number."""
    eq = text.find("=")
    if eq != -1:
        m = _NUMBER.search(text, eq + 1)
        if m:
            return _to_float(m.group())
    m = _NUMBER.search(text)
    return _to_float(m.group()) if m else None


def math_score(output: str, gold: str, decimals: int = 2) -> tuple[float | None, bool]:
    """(prediction, correct): the number read from ``output`` against ``gold`` at ``decimals``."""
    target = extract_number(gold)
    if target is None:
        raise ValueError(f"gold answer {gold!r} has no number")
    pred = extract_number(output)
    correct = pred is not None and abs(round(pred, decimals) - round(target, decimals)) < 0.5 * 10**-decimals
    return pred, correct


_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT = set(string.punctuation) | {"‘", "’", "“", "”", "–", "—", "…"}


def normalize_answer(text: str) -> str:
    """Lowercase, punctuation and articles removed, whitespace collapsed."""
    text = "".join(" " if ch in _PUNCT else ch for ch in text.lower())
    return " ".join(_ARTICLES.sub(" ", text).split())


def qa_score(output: str, answers: list[str], max_words: int = 20) -> tuple[str, bool]:
    """(prediction, correct): the first ``max_words`` words of ``output``, and
    whether a normalised answer appears in them as whole words."""
    head = " ".join(output.split()[:max_words])
    hay = f" {normalize_answer(head)} "
    correct = any(a and f" {a} " in hay for a in (normalize_answer(x) for x in answers))
    return head, correct


def default_max_words(fmt: str) -> int:
    """The paper's word window: 5 for LAMA, 20 for the other QA sets."""
    return 5 if fmt == "lama" else 20


# -- reading files -------------------------------------------------------------
def _records(path: Path) -> list[tuple[str, dict]]:
    """(where, record) from a JSON list or a JSONL file; ``where`` names file and line/item."""
    text = path.read_text(encoding="utf-8")
    if text.lstrip().startswith("["):
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise TaskFormatError(f"{path}: line {e.lineno}: invalid JSON: {e.msg}") from None
        out = [(f"{path}: item {i}", r) for i, r in enumerate(data)]
    else:
        out = []
        for n, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                out.append((f"{path}: line {n}", json.loads(line)))
            except json.JSONDecodeError as e:
                raise TaskFormatError(f"{path}: line {n}: invalid JSON: {e.msg}") from None
    for where, r in out:
        if not isinstance(r, dict):
            raise TaskFormatError(f"{where}: expected a JSON object, got {type(r).__name__}")
    return out


def _get(where: str, r: dict, *keys: str):
    for k in keys:
        if k in r and r[k] is not None:
            return r[k]
    raise TaskFormatError(f"{where}: missing key {' or '.join(repr(k) for k in keys)}")


def _text(where: str, value, key: str) -> str:
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise TaskFormatError(f"{where}: {key}: expected text or a number, got {value!r}")
    return str(value).strip()


def _join(body: str, question: str) -> str:
    body = body.strip()
    if body and body[-1] not in ".?!":
        body += "."
    return f"{body} {question.strip()}".strip()


def _numeric(where: str, value, key: str) -> str:
    text = _text(where, value, key)
    if extract_number(text) is None:
        raise TaskFormatError(f"{where}: {key}: {text!r} is not a number")
    return text


def _item_id(r: dict, where: str, i: int) -> str:
    for k in ("id", "ID", "iIndex", "uuid", "question_id", "QuestionId"):
        if r.get(k) is not None:
            return str(r[k])
    return str(i)


def load_asdiv(path: Path) -> TaskData:
    try:
        root = ET.parse(path).getroot()
    except ET.ParseError as e:
        line, col = e.position
        raise TaskFormatError(f"{path}: line {line}, column {col}: invalid XML") from None
    items, skipped = [], []
    for i, p in enumerate(root.iter("Problem")):
        where = f"{path}: Problem {p.get('ID') or i}"
        parts = {}
        for tag in ("Body", "Question", "Answer"):
            el = p.find(tag)
            if el is None or el.text is None:
                raise TaskFormatError(f"{where}: missing <{tag}>")
            parts[tag] = el.text.strip()
        if extract_number(parts["Answer"]) is None:
            skipped.append(f"{where}: answer {parts['Answer']!r} has no number")
            continue
        # `9 (apples)`: the number is the answer, the unit in brackets is not.
        answer = re.sub(r"\s*\(.*?\)", "", parts["Answer"]).strip() or parts["Answer"]
        items.append(TaskItem(p.get("ID") or str(i), _join(parts["Body"], parts["Question"]), [answer]))
    if not items and not skipped:
        raise TaskFormatError(f"{path}: no <Problem> elements")
    return TaskData(items, skipped)


def load_svamp(path: Path) -> TaskData:
    items = []
    for i, (where, r) in enumerate(_records(path)):
        body = _text(where, _get(where, r, "Body"), "Body")
        question = _text(where, _get(where, r, "Question"), "Question")
        answer = _numeric(where, _get(where, r, "Answer"), "Answer")
        items.append(TaskItem(_item_id(r, where, i), _join(body, question), [answer]))
    return TaskData(items)


def load_mawps(path: Path) -> TaskData:
    items = []
    for i, (where, r) in enumerate(_records(path)):
        question = _text(where, _get(where, r, "original_text", "sQuestion"), "original_text")
        ans = _get(where, r, "ans", "lSolutions")
        if isinstance(ans, list):
            ans = ans[0] if ans else None
        answer = _numeric(where, ans, "ans")
        items.append(TaskItem(_item_id(r, where, i), question, [answer]))
    return TaskData(items)


_DESCRIPTION = re.compile(r'\(description\s+(?:"((?:[^"\\]|\\.)*)"|([^()\s]+))\)')


def parse_target_value(value: str) -> list[str]:
    """``(list (description "Jazmyn Bieber") (description Canada))`` -> the answers."""
    return [q.replace('\\"', '"') if q else bare for q, bare in _DESCRIPTION.findall(value)]


def load_webqs(path: Path) -> TaskData:
    items = []
    for i, (where, r) in enumerate(_records(path)):
        question = _text(where, _get(where, r, "qText", "utterance", "question"), "qText")
        if r.get("answers") is not None:
            answers = r["answers"]
            if isinstance(answers, str) or not isinstance(answers, list):
                raise TaskFormatError(f"{where}: answers: expected a list, got {answers!r}")
            answers = [_text(where, a, "answers") for a in answers]
        else:
            target = _get(where, r, "answers", "targetValue")
            answers = parse_target_value(_text(where, target, "targetValue"))
        if not answers:
            raise TaskFormatError(f"{where}: no answers")
        items.append(TaskItem(_item_id(r, where, i), question, answers))
    return TaskData(items)


def load_triviaqa(path: Path) -> TaskData:
    items = []
    for i, (where, r) in enumerate(_records(path)):
        question = _text(where, _get(where, r, "question", "Question"), "question")
        answer = _get(where, r, "answer", "Answer")
        aliases = r.get("aliases") or []
        if isinstance(answer, dict):  # the official file: {"value", "aliases", ...}
            aliases = list(answer.get("aliases") or []) + list(aliases)
            answer = _get(where, answer, "value")
        if not isinstance(aliases, list):
            raise TaskFormatError(f"{where}: aliases: expected a list, got {aliases!r}")
        answers = [_text(where, answer, "answer")] + [_text(where, a, "aliases") for a in aliases]
        date = r.get("date")
        items.append(TaskItem(_item_id(r, where, i), question, answers, str(date) if date else None))
    return TaskData(items)


_MASK = "[MASK]"


def load_lama(path: Path) -> TaskData:
    items, skipped = [], []
    for i, (where, r) in enumerate(_records(path)):
        sentences = _get(where, r, "masked_sentences")
        if isinstance(sentences, str):
            sentences = [sentences]
        if not isinstance(sentences, list):
            raise TaskFormatError(f"{where}: masked_sentences: expected a list, got {sentences!r}")
        answer = _text(where, _get(where, r, "obj_label"), "obj_label")
        prompt = None
        for s in sentences:
            s = _text(where, s, "masked_sentences")
            head, mask, tail = s.rpartition(_MASK)
            # Only the mask as the last word counts: nothing but punctuation may follow it.
            if mask and _MASK not in head and not tail.strip(" .!?\"'"):
                prompt = head.rstrip()
                break
        if prompt is None:
            skipped.append(f"{where}: no sentence ends with {_MASK}")
            continue
        items.append(TaskItem(_item_id(r, where, i), prompt, [answer]))
    return TaskData(items, skipped)


FORMATS = {
    "asdiv": load_asdiv,
    "svamp": load_svamp,
    "mawps": load_mawps,
    "webqs": load_webqs,
    "triviaqa": load_triviaqa,
    "lama": load_lama,
}
FORMATS["webquestions"] = load_webqs


def detect_format(path: Path) -> str:
    """Guess the format from the file: XML is ASDiv, else the keys of the first record."""
    if path.suffix.lower() == ".xml":
        return "asdiv"
    records = _records(path)
    if not records:
        raise TaskFormatError(f"{path}: no records")
    keys = set(records[0][1])
    for fmt, needed in (("svamp", {"Body", "Question"}), ("mawps", {"original_text"}), ("lama", {"masked_sentences"}),
                        ("webqs", {"qText"}), ("webqs", {"utterance"}), ("triviaqa", {"question"})):
        if needed <= keys:
            return fmt
    raise TaskFormatError(f"{records[0][0]}: cannot tell the format from keys {sorted(keys)}; set the task's format")


def load_task(path: str | Path, fmt: str = "auto", max_items: int = 0) -> tuple[str, TaskData]:
    """(format, items) of a task file; ``max_items`` > 0 keeps the first that many."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: task file not found")
    if fmt == "auto":
        fmt = detect_format(path)
    if fmt not in FORMATS:
        raise ValueError(f"{path}: unknown task format {fmt!r} (known: auto, {', '.join(FORMATS)})")
    data = FORMATS[fmt](path)
    if not data.items:
        raise TaskFormatError(f"{path}: no usable items ({len(data.skipped)} skipped)")
    if max_items > 0:
        data.items = data.items[:max_items]
    return fmt, data
