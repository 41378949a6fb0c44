"""Reading the published files into the world's records, with every record that cannot be used counted and kept
(``Rejected``: the file and line, the reason), never a traceback and never dropped unsaid.

- GSM8K: a problem's worked solution with its ``<<expr=result>>`` annotations removed, and each annotation as a
  gold Calculator call at the annotated result's text (:func:`parse_solution`).
- T-REx: each fact with its Wikipedia sentences, the ``[MASK]`` filled with the object; the relation's template
  from ``relations.jsonl`` (a fact of a relation missing there is rejected).
- MAWPS and ASDiv through the project's evaluation loaders (:mod:`toolformer.tasks.formats`), and each problem's
  published formula (MAWPS's ``equation``, ASDiv's ``<Formula>``) as a gold Calculator call of its answer when
  the formula's value is the answer's (:func:`formula_call`; else the reason it has none).

Each reader takes the file's bytes as the world's checksum check read them (``raw``; the file itself is read only
when none are given), and its path to name it. A record is rejected, never a traceback, for: invalid JSON or
UTF-8, a lone surrogate (``"\\ud800"``: no text), an answer with a number of more than
:data:`~toolformer.tasks.metrics.MAX_GOLD_DIGITS` digits, a GSM8K annotation that is not ``<<expr=number>>`` (a
nested one, ``<<2*<<3=3>>=6>>``, or a lone ``<<`` / ``>>``).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from defusedxml import ElementTree as SafeET

from toolformer.config.text import lone_surrogate
from toolformer.tasks.formats import GSM8K_FINAL, SkipItem, gsm8k_answer, lama_prompt, load_task, read_records
from toolformer.tasks.metrics import MAX_GOLD_DIGITS, digits
from toolformer.tools.base import ToolError
from toolformer.tools.calculator import INPUT_PATTERN, calculate

MASK = "[MASK]"
_ANNOTATION = re.compile(r"<<([^<>]*)>>")
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")
_UNKNOWN = re.compile(r"\s*[A-Za-z]\w*\s*")  # MAWPS's `X=...`, `miles=...`: the unknown alone on the left
_UNITS = re.compile(r"\s*\([^()]*[A-Za-z][^()]*\)")  # ASDiv's `6 (penny)*1 (cent/penny)`: units in brackets
_WHOLE = re.compile(r"(\d)\.0+\b(?!\.)")  # `22.0`: written 22
_REMAINDER = re.compile(r"=\s*\d+\s*r\s*\d")  # ASDiv's `47/6=7 r5`


@dataclass
class Rejected:
    """Records left out, each ``{"where": "file:line", "reason", "detail"}``."""

    records: list[dict] = field(default_factory=list)

    def add(self, where: str, reason: str, detail: str = "") -> None:
        self.records.append({"where": where, "reason": reason, "detail": detail[:300]})

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for r in self.records:
            out[r["reason"]] = out.get(r["reason"], 0) + 1
        return dict(sorted(out.items(), key=lambda kv: -kv[1]))


@dataclass
class Solution:
    text: str  # the solution without annotations and without its `#### N` line
    answer: str
    calls: list[dict]  # {"tool", "input", "result", "char_start"} in ``text``


def parse_solution(answer: str) -> Solution:
    """A GSM8K answer as text and gold calls; :class:`SkipItem` when it has no ``####``, an annotation that is
    not ``expression=number`` (nested, or a ``<<`` or ``>>`` of none), or a number of more than
    ``MAX_GOLD_DIGITS`` digits."""
    final = gsm8k_answer(answer)
    body = answer[: answer.rfind(GSM8K_FINAL)].rstrip()
    if digits(body) > MAX_GOLD_DIGITS:
        raise SkipItem("number too long", f"a number of {digits(body):,} digits (at most {MAX_GOLD_DIGITS})")
    text, calls, last = [], [], 0
    length = 0
    for m in _ANNOTATION.finditer(body):
        piece = body[last : m.start()]
        text.append(piece)
        length += len(piece)
        expr, eq, result = m.group(1).rpartition("=")
        result = result.strip()
        if not eq or not expr.strip() or not _NUMBER.fullmatch(result.replace(",", "")):
            raise SkipItem("annotation does not parse", f"<<{m.group(1)}>>")
        calls.append({"tool": "Calculator", "input": expr.strip(), "result": result.replace(",", ""),
                      "char_start": length})
        last = m.end()
    text.append(body[last:])
    for piece in text:
        if "<<" in piece or ">>" in piece:  # an annotation inside another, or one never opened or closed
            raise SkipItem("annotation does not parse", repr(piece.strip())[:200])
    return Solution("".join(text), final, calls)


def _json_lines(path: Path, rejected: Rejected, raw: bytes | None = None):
    """(where, record) of every JSON object line of ``raw`` (the bytes of ``path``, read here when not given); the
    others rejected."""
    raw = path.read_bytes() if raw is None else raw
    for n, line in enumerate(raw.split(b"\n"), 1):
        if not line.strip():
            continue
        where = f"{path}:{n}"
        try:
            rec = json.loads(line)
        except (ValueError, RecursionError) as e:
            rejected.add(where, "invalid JSON", str(e))
            continue
        if not isinstance(rec, dict):
            rejected.add(where, "not a JSON object", type(rec).__name__)
            continue
        if lone_surrogate(rec):
            rejected.add(where, "not text", "a lone surrogate (a \\ud800-\\udfff escape not in a pair)")
            continue
        yield where, rec


@dataclass
class Problem:
    id: str
    question: str
    answer: str
    where: str
    solution: Solution | None = None
    call: dict | None = None  # MAWPS, ASDiv: the gold call of the answer from the formula, without char_start
    no_call: SkipItem | None = None  # else why it has none


def read_gsm8k(path: Path, rejected: Rejected, raw: bytes | None = None) -> list[Problem]:
    out = []
    for where, rec in _json_lines(path, rejected, raw):
        try:
            q, a = rec.get("question"), rec.get("answer")
            if not isinstance(q, str) or not isinstance(a, str) or not q.strip():
                raise SkipItem("missing field", "question and answer must be strings")
            sol = parse_solution(a)
        except SkipItem as e:
            rejected.add(where, e.reason, e.detail)
            continue
        out.append(Problem(where.rsplit(":", 1)[1], " ".join(q.split()), sol.answer, where, sol))
    return out


def _calculated(expression: str) -> str | None:
    """What the Calculator returns for ``expression`` written in its input syntax, else None."""
    if not re.fullmatch(INPUT_PATTERN, expression):
        return None
    try:
        return calculate(expression)
    except ToolError:
        return None


def formula_call(formula: str, answer: str, fmt: str) -> dict:
    """The gold Calculator call of a MAWPS or ASDiv problem's answer from its published formula: the expression
    (MAWPS: ``X=expression``; ASDiv: of the steps ``a=b; c=d``, the last whose left side, units in brackets
    removed, the Calculator reads and whose value is the answer's) and its value, when it equals the answer as
    the Calculator writes both (two decimals). A :class:`SkipItem` naming why when there is none."""
    if not formula.strip():
        raise SkipItem("no formula")
    target = _calculated(answer)
    if target is None:
        raise SkipItem("answer not a number the Calculator reads", answer)
    if fmt == "mawps":
        unknown, eq, expression = formula.partition("=")
        if not eq or not _UNKNOWN.fullmatch(unknown) or re.search("[A-Za-z]", expression):
            raise SkipItem("an equation to solve", formula)
        steps = [expression]
    else:
        steps = [_UNITS.sub("", step.partition("=")[0]) for step in reversed(formula.split(";")) if "=" in step]
    tidy = (_WHOLE.sub(r"\1", " ".join(step.split())) for step in steps)
    values = [(e, v) for e in tidy if (v := _calculated(e)) is not None]
    for expression, value in values:
        if value == target:
            return {"tool": "Calculator", "input": expression, "result": value}
    if not values:
        raise SkipItem("formula not arithmetic the Calculator reads", formula)
    if _REMAINDER.search(formula):
        raise SkipItem("a division with a remainder", formula)
    raise SkipItem("formula's value differs from the answer", f"{formula} is {values[0][1]}, the answer {answer}")


def _formulas(path: Path, fmt: str, raw: bytes) -> dict[str, str]:
    """Each problem's published formula by its id: MAWPS's ``equation``, ASDiv's ``<Formula>`` (the loader has
    read the same bytes)."""
    if fmt == "asdiv":
        return {p.get("ID") or str(i): p.findtext("Formula") or ""
                for i, p in enumerate(SafeET.fromstring(raw).iter("Problem"))}
    return {str(r.value.get("id", r.index)): str(r.value.get("equation") or "") for r in read_records(path, raw)
            if isinstance(r.value, dict)}


def read_task(path: Path, fmt: str, rejected: Rejected, raw: bytes | None = None) -> list[Problem]:
    """A math file through the project's evaluation loader (MAWPS, ASDiv): its skipped records rejected; each
    problem with its gold call from the formula, or the reason it has none (:func:`formula_call`)."""
    raw = path.read_bytes() if raw is None else raw
    _fmt, data = load_task(path, fmt, raw=raw)
    for s in data.skipped:
        rejected.add(s["where"], s["reason"], s.get("detail", ""))
    formulas = _formulas(path, fmt, raw)
    out = []
    for item in data.items:
        p = Problem(item.id, item.question, item.answers[0], f"{path}: {item.id}")
        try:
            p.call = formula_call(formulas.get(item.id, ""), p.answer, fmt)
        except SkipItem as e:
            p.no_call = e
        out.append(p)
    return out


@dataclass
class Fact:
    uuid: str
    relation: str
    subject: str
    object: str
    sentences: list[str]  # the object filled in
    prompts: list[str]  # text before the object, for sentences that end on it
    masks: list[int]  # per sentence, where the object starts


def read_relations(path: Path, rejected: Rejected, raw: bytes | None = None) -> dict[str, dict]:
    out = {}
    for where, rec in _json_lines(path, rejected, raw):
        rel, template = rec.get("relation"), rec.get("template")
        if not isinstance(rel, str) or not isinstance(template, str) or "[X]" not in template or "[Y]" not in template:
            rejected.add(where, "bad relation", "relation and a template with [X] and [Y] needed")
            continue
        out[rel] = {"template": template, "label": str(rec.get("label") or rel)}
    return out


def _fact(rec: dict, where: str, relations: dict[str, dict], rejected: Rejected) -> Fact | None:
    fields = {k: rec.get(k) for k in ("uuid", "predicate_id", "sub_label", "obj_label")}
    bad = [k for k, v in fields.items() if not isinstance(v, str) or not v.strip()]
    evidences = rec.get("evidences")
    if bad or not isinstance(evidences, list):
        rejected.add(where, "missing field", ", ".join(bad) or "evidences")
        return None
    if fields["predicate_id"] not in relations:
        rejected.add(where, "relation missing from relations.jsonl", str(fields["predicate_id"]))
        return None
    obj = str(fields["obj_label"])
    sentences, prompts, masks = [], [], []
    for ev in evidences:
        masked = ev.get("masked_sentence") if isinstance(ev, dict) else None
        if not isinstance(masked, str) or masked.count(MASK) != 1:
            continue  # a sentence that does not name the object once: not this fact's evidence text
        text = " ".join(masked.replace(MASK, obj).split())
        if text in sentences:
            continue
        sentences.append(text)
        masks.append(" ".join(masked.split()).index(MASK))
        prompt = lama_prompt(masked)
        if prompt:
            prompts.append(" ".join(prompt.split()))
    if not sentences:
        rejected.add(where, "no sentence with one [MASK]", f"{len(evidences)} evidence(s)")
        return None
    return Fact(str(fields["uuid"]), str(fields["predicate_id"]), str(fields["sub_label"]), obj, sentences, prompts,
                masks)


def read_trex(folder: Path, relations: dict[str, dict], files: list[str], rejected: Rejected,
              raw: dict[str, bytes] | None = None) -> list[Fact]:
    """The facts of ``files`` (names in ``folder``; their bytes in ``raw`` by name when given)."""
    out, seen = [], set()
    for name in files:
        for where, rec in _json_lines(folder / name, rejected, None if raw is None else raw[name]):
            fact = _fact(rec, where, relations, rejected)
            if fact is None:
                continue
            if fact.uuid in seen:
                rejected.add(where, "duplicate uuid", fact.uuid)
                continue
            seen.add(fact.uuid)
            out.append(fact)
    return out


def render(template: str, subject: str, obj: str) -> str:
    """A relation's template with the subject and object: ``[X] was born in [Y] .`` → ``X was born in Y.``"""
    text = template.replace("[X]", subject).replace("[Y]", obj)
    return re.sub(r"\s+([.,;:!?])", r"\1", " ".join(text.split()))
