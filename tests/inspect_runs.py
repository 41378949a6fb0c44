"""Run folders for ``toolformer inspect`` written by hand following the stage contracts (sample, execute and
filter records of five documents and ten calls, or of documents with gold calls), the funnel counts their records
give, and readers of what inspect prints and of its HTML report."""

import json
import re
from html.parser import HTMLParser
from pathlib import Path

from helpers import shard_records, write_jsonl

from toolformer.config.schema import PipelineConfig
from toolformer.rundir.folder import FORMAT
from toolformer.tools.calls import get_style

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
SCRIPT = "<script>alert('x')</script>"
STYLE = get_style("plain")

DOCS = [
    {"doc_id": "d0", "date": "2021-03-14",
     "text": "Intro. The market sold 340 crates and 275 crates, 615 crates in all. Bye."},
    {"doc_id": "d1", "date": "2021-03-20", "text": "Brightwater has 96,500 people and Aldermoor 18,240."},
    {"doc_id": "d2", "date": "2022-07-02", "text": "The Vell is 212 km long and the Oster 87 km, 299 km together."},
    {"doc_id": "d3", "date": "2022-07-09", "text": "Today the council of Kessford met."},
    {"doc_id": "d4", "date": "2023-01-30", "text": "The mill was rebuilt in 1888 by Ann Hale."},
]
# (doc, tool, input, char_start anchor, result or error code, L(ε), L(e(c,ε)), L(e(c,r)))
CALLS = [
    ("d0", "Calculator", "340 + 275", "615", "615", 3.0, 2.5, 0.4),   # margin 2.1, kept
    ("d0", "Calculator", "340 - 275", "615", "65", 3.0, 2.8, 3.3),    # -0.5
    ("d0", "Calculator", "340 / 0", "615", "division_by_zero", None, None, None),
    ("d2", "Calculator", "212 + 87", "299", "299", 2.0, 2.2, 0.5),    # 1.5, kept
    ("d2", "Calculator", "212 * 87", "299", "18444", 2.0, 1.9, 1.7),  # 0.2
    ("d1", "Calculator", SCRIPT, "18,240", "syntax", None, None, None),
    ("d1", "QA", "Who lives in Brightwater?", "96,500", "96,500", 4.0, 3.5, 2.0),   # 1.5, kept
    ("d3", "QA", SCRIPT, "Kessford", "</span><b>bold</b>", 1.0, 1.2, 1.1),          # -0.1
    ("d4", "QA", "Who rebuilt the mill?", "Ann", "Ann Hale", 2.5, 2.4, 0.9),        # 1.5, kept
    ("d4", "QA", "When was the mill rebuilt?", "1888", "not_found", None, None, None),
]
TAU = {"Calculator": 0.5, "QA": 1.0}
ERRORS = {"division_by_zero", "syntax", "not_found"}


def _records(docs: list[dict], calls: list[tuple]):
    out = []
    for doc_id, tool, tool_input, anchor, outcome, l_none, l_no_result, l_with in calls:
        text = next(d["text"] for d in docs if d["doc_id"] == doc_id)
        char_start = text.index(anchor)
        sample = {"doc_id": doc_id, "tool": tool, "input": tool_input, "position": char_start // 3,
                  "char_start": char_start, "p_i": None, "source": "rules"}
        failed = outcome in ERRORS
        executed = {**sample, "result": None if failed else outcome,
                    "error": {"code": outcome, "message": f"{outcome} in {tool_input}"} if failed else None}
        filtered = dict(executed, call_text=None if failed else STYLE.render(tool, tool_input, outcome),
                        call_text_no_result=STYLE.render(tool, tool_input, ""), loss_none=l_none,
                        loss_no_result=l_no_result, loss_with_result=l_with, loss_minus=None, loss_plus=None,
                        tau_filter=TAU[tool], read_ahead=[], kept=False)
        if not failed:
            filtered["loss_minus"] = l_none if l_no_result is None else min(l_none, l_no_result)  # None: left out
            filtered["loss_plus"] = l_with
            filtered["kept"] = filtered["loss_minus"] - l_with >= TAU[tool]
        out.append((sample, executed, filtered))
    return out


def _write_stage(run: Path, name: str, records: list[dict], counts: dict, shard_size: int = 4) -> None:
    d = run / name
    d.mkdir(parents=True, exist_ok=True)
    for i in range(0, len(records), shard_size):
        write_jsonl(d / f"shard-{i // shard_size:05d}.jsonl", records[i:i + shard_size])
    (d / "manifest.json").write_text(json.dumps({"format": FORMAT, "stage": name, "config_hash": "x", "seed": 0,
                                                 "counts": counts,
                                                 "shards": (len(records) + shard_size - 1) // shard_size}))


def make_run(root: Path, stages=("sample", "execute", "filter"), docs=DOCS, calls=CALLS) -> Path:
    run = root / "run"
    (run / "sample").mkdir(parents=True)
    write_jsonl(run / "sample" / "documents.jsonl", docs)
    recs = _records(docs, calls)
    tools = ("Calculator", "QA")
    # A tool's pre-filter passes more documents than end up with candidates.
    sample_counts = {"documents": len(docs), "windows": len(docs), "per_tool": {t: {
        "documents": len({s["doc_id"] for s, _, _ in recs if s["tool"] == t}) + 1,
        "positions": len({(s["doc_id"], s["position"]) for s, _, _ in recs if s["tool"] == t}),
        "candidates": sum(s["tool"] == t for s, _, _ in recs)} for t in tools}}
    _write_stage(run, "sample", [s for s, _, _ in recs], sample_counts)
    if "execute" in stages:
        _write_stage(run, "execute", [e for _, e, _ in recs], {"per_tool": {t: {
            "candidates": sum(e["tool"] == t for _, e, _ in recs),
            "ok": sum(e["tool"] == t and e["error"] is None for _, e, _ in recs),
            "failed": sum(e["tool"] == t and e["error"] is not None for _, e, _ in recs)} for t in tools}})
    if "filter" in stages:
        _write_stage(run, "filter", [f for _, _, f in recs], {"per_tool": {t: {
            "candidates": sum(f["tool"] == t for _, _, f in recs),
            "scored": sum(f["tool"] == t and f["loss_plus"] is not None for _, _, f in recs),
            "kept": sum(f["tool"] == t and f["kept"] for _, _, f in recs), "read_ahead": 0} for t in tools}})
    return run


def expected_counts(run: Path) -> dict:
    """Funnel counts straight from the shard records (and the manifest for the
    two counts the records cannot give: documents and positions)."""
    def records(stage):
        return shard_records(run, stage)
    manifest = json.loads((run / "sample" / "manifest.json").read_text())["counts"]["per_tool"]
    out = {}
    for t in ("Calculator", "QA"):
        out[t] = {"documents": manifest[t]["documents"], "positions": manifest[t]["positions"],
                  "candidates": sum(r["tool"] == t for r in records("sample"))}
        if (run / "execute").exists():
            out[t]["executed_ok"] = sum(r["tool"] == t and r["error"] is None for r in records("execute"))
        if (run / "filter").exists():
            out[t]["kept"] = sum(r["tool"] == t and r["kept"] for r in records("filter"))
    return out


def cfg_for(run: Path, **inspect) -> PipelineConfig:
    cfg = PipelineConfig(run_dir=str(run))
    for k, v in inspect.items():
        setattr(cfg.inspect, k, v)
    return cfg


LABEL_TO_STEP = {"documents passing pre-filter": "documents", "positions kept": "positions",
                 "candidate calls": "candidates", "executed without error": "executed_ok",
                 "kept (L⁻ − L⁺ ≥ tau_f)": "kept"}
ROW = re.compile(r"^\s*(\S*)\s+(" + "|".join(re.escape(k) for k in LABEL_TO_STEP) + r")\s+([\d,]+|–)\s")


def terminal_funnel(out: str) -> dict:
    table, tool = {}, None
    for line in out.splitlines():
        m = ROW.match(line)
        if m:
            tool = m.group(1) or tool
            count = None if m.group(3) == "–" else int(m.group(3).replace(",", ""))
            table.setdefault(tool, {})[LABEL_TO_STEP[m.group(2)]] = count
    return table


class ReportParser(HTMLParser):
    """Funnel rows, script tags, images, call spans and page links of one page."""

    def __init__(self):
        super().__init__()
        self.funnel, self.tags, self.images, self.calls, self.links, self.text = {}, [], [], [], [], []
        self._row = self._cell = self._call = self._doc = None
        self.docs = []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        self.tags.append(tag)
        if tag == "tr" and "data-step" in a:
            self._row = (a["data-tool"], a["data-step"])
        if tag == "td" and self._row and "count" in (a.get("class") or "").split():
            self._cell = ""
        if tag == "img":
            self.images.append(a["src"])
        if tag == "a" and a.get("href", "").startswith("report"):
            self.links.append(a["href"])
        if tag == "span" and "call" in (a.get("class") or "").split() and "title" in a:  # not the legend
            self._call = {"class": a["class"].split()[1], "title": a["title"], "text": "", "doc": self._doc}
        if tag == "section" and a.get("class") == "doc":
            self._doc = a["id"]
            self.docs.append(a["id"])

    def handle_endtag(self, tag):
        if tag == "td" and self._cell is not None:
            tool, step = self._row
            self.funnel.setdefault(tool, {})[step] = None if self._cell == "–" else int(self._cell.replace(",", ""))
            self._cell = None
        if tag == "tr":
            self._row = None
        if tag == "section":
            self._doc = None
        if tag == "span" and self._call is not None:
            self.calls.append(self._call)
            self._call = None

    def handle_data(self, data):
        self.text.append(data)
        if self._cell is not None:
            self._cell += data
        if self._call is not None:
            self._call["text"] += data


def parse_page(path: Path) -> ReportParser:
    p = ReportParser()
    p.feed(path.read_text(encoding="utf-8"))
    return p


# -- kept calls against gold calls -------------------------------------------------------
# doc_id -> (text, gold calls as (tool, input, result): each starts where its result's text does; None: the
# record has no gold_calls field)
GOLD_TEXTS = {
    "g0": ("The market sold 340 crates and 275 crates, 615 crates in all.", [("Calculator", "340 + 275", "615")]),
    "g1": ("The Vell is 212 km long and the Oster 87 km, 299 km together.", [("Calculator", "212 + 87", "299")]),
    "g2": ("Brightwater has 96,500 people and Aldermoor 18,240.", [("QA", "How many live in Aldermoor?", "18,240")]),
    "g3": ("The mill was rebuilt in 1888 by Ann Hale.", [("QA", "Who rebuilt the mill?", "Ann Hale")]),
    "g4": ("Today the council of 12 towns met.", []),
    "g5": ("Not annotated: 40 + 2 is 42.", None),
}
GOLD_DOCS = [{"doc_id": d, "date": None, "text": text}
             | ({} if gold is None else {"gold_calls": [
                 {"tool": t, "input": i, "result": r, "char_start": text.index(r)} for t, i, r in gold]})
             for d, (text, gold) in GOLD_TEXTS.items()]
GOLD_RUN_CALLS = [  # as CALLS; tau_f 0.5 (Calculator), 1.0 (QA)
    ("g0", "Calculator", "340 + 275", "615", "615.0", 3.0, 2.5, 0.4),  # 2.1 kept, right: 615.0 == 615
    ("g1", "Calculator", "212 * 87", "299", "18444", 2.0, 1.9, 0.9),  # 1.0 kept, wrong result at the gold position
    ("g1", "Calculator", "212 + 87", "km, 299", "299", 2.0, 2.2, 0.2),  # 1.8 kept, 4 characters early: not there
    ("g4", "Calculator", "12 + 0", "12", "12", 2.0, 2.0, 1.4),  # 0.6 kept, a document without gold calls
    ("g5", "Calculator", "40 + 2", "42", "42", 2.0, 2.0, 0.5),  # 1.5 kept, not annotated: not judged
    ("g2", "QA", "Who lives in Brightwater?", "96,500", "96,500", 4.0, 3.5, 2.0),  # 1.5 kept, no QA gold call here
    ("g2", "QA", "How many live in Aldermoor?", "18,240", "18,240", 1.0, 1.2, 0.5),  # 0.5 rejected: not counted
    ("g3", "QA", "who rebuilt the mill", "y Ann", " ann hale ", 2.5, 2.4, 0.9),  # 1.5 kept, 2 characters early, right
]
