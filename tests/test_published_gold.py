"""Gold Calculator calls of the published world's MAWPS and ASDiv documents, from each problem's published formula
(toolformer.published.readers.formula_call), and the gold report judging kept calls against them, per source.

Small files written here stand in for the published ones (tests/worlds.py); the test on the real files reads them
from $TOOLFORMER_PUBLISHED_DATA and skips with the reason otherwise."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from inspect_runs import make_run
from worlds import write_published_math

from toolformer.published import world
from toolformer.published.config import DATA_ENV, load_published
from toolformer.published.gold import gold_report
from toolformer.published.readers import Rejected, formula_call, read_task
from toolformer.rundir.files import read_jsonl
from toolformer.tasks.formats import SkipItem
from toolformer.tools.calculator import calculate

ROOT = Path(__file__).resolve().parents[1]
REAL = os.environ.get(DATA_ENV, "")
MAWPS, ASDIV = "math/mawps/trainset.json", "math/ASDiv.xml"


@pytest.fixture
def data(tmp_path) -> Path:
    """A folder with the stand-in MAWPS and ASDiv files."""
    for sub in ("math/mawps", "lama/trex"):
        (tmp_path / sub).mkdir(parents=True)
    write_published_math(tmp_path)
    return tmp_path


def docs_of(data: Path, rel: str, fmt: str) -> list[dict]:
    """The documents of a stand-in file as the world writes them, with their corpus ids."""
    return [d | {"doc_id": world.CORPUS_ID + d["id"]}
            for d in (world.math_doc(p, fmt) for p in read_task(data / rel, fmt, Rejected()))]


def test_a_mawps_and_an_asdiv_document_get_a_gold_call_at_the_answer_with_its_value(data):
    for rel, fmt, expression, value in ((MAWPS, "mawps", "(7-1)", "6"), (ASDIV, "asdiv", "2+3", "5")):
        doc = docs_of(data, rel, fmt)[0]
        (call,) = doc["gold_calls"]
        at = doc["text"].index(world.ANSWER_LEAD) + len(world.ANSWER_LEAD)
        assert call == {"tool": "Calculator", "input": expression, "result": value, "char_start": at}
        assert doc["text"][at:] == f"{value}." and calculate(call["input"]) == value


def test_a_formula_whose_value_is_not_the_answer_gives_no_gold_call(data):
    rows = json.loads((data / MAWPS).read_text())
    rows[0]["equation"] = "X=(7.0+1.0)"  # 8, the answer 6
    (data / MAWPS).write_text(json.dumps(rows))
    (data / ASDIV).write_text((data / ASDIV).read_text().replace("<Formula>2+3=5</Formula>", "<Formula>2+4=6"
                                                                "</Formula>"))
    for rel, fmt in ((MAWPS, "mawps"), (ASDIV, "asdiv")):
        first, second = read_task(data / rel, fmt, Rejected())[:2]
        assert first.call is None and first.no_call is not None
        assert first.no_call.reason == "formula's value differs from the answer"
        assert first.no_call.detail.endswith(f"the answer {first.answer}")
        assert "gold_calls" not in world.math_doc(first, fmt) and second.call is not None


@pytest.mark.parametrize("formula, answer, fmt, expression", [
    ("hours=4.0*0.5/3.0", "0.6667", "mawps", "4*0.5/3"),  # 0.67 both, as the Calculator writes them
    ("number=1.477/-7.0", "-0.211", "mawps", "1.477/-7"),
    ("6 (penny)*1 (cent/penny) + 3 (nickel)*5 (cent/nickel) = 21 (cent)", "21", "asdiv", "6*1 + 3*5"),
    ("3*4=12; 12-2=10; 3+12+10=25", "25", "asdiv", "3+12+10"),
    ("17/10=1 r7; 7/5=1 r2; 2/1=2; 1+1+2=4", "4", "asdiv", "1+1+2"),
])
def test_the_expression_of_a_formula_in_the_calculators_syntax(formula, answer, fmt, expression):
    call = formula_call(formula, answer, fmt)
    assert call["input"] == expression and call["result"] == calculate(answer)


@pytest.mark.parametrize("formula, answer, fmt, reason", [
    ("X-6=52", "58", "mawps", "an equation to solve"),
    ("(200.0/x)-1.0=200.0/(10.0+x)", "40.0", "mawps", "an equation to solve"),
    ("47/6=7 r5", "5", "asdiv", "a division with a remainder"),
    ("GCD(18,12)=6", "6", "asdiv", "formula not arithmetic the Calculator reads"),
    ("x:The number; 2x-12=20", "16", "asdiv", "formula not arithmetic the Calculator reads"),
    ("hh:mm=5:45", "5:45", "asdiv", "answer not a number the Calculator reads"),
    ("", "3", "mawps", "no formula"),
])
def test_a_formula_without_a_gold_call_says_why(formula, answer, fmt, reason):
    with pytest.raises(SkipItem) as e:
        formula_call(formula, answer, fmt)
    assert e.value.reason == reason


def test_the_gold_report_judges_kept_calls_on_mawps_documents_per_source(data, tmp_path):
    docs = docs_of(data, MAWPS, "mawps")[:3]
    ids = [d["doc_id"] for d in docs]
    run = make_run(tmp_path, docs=docs, calls=[
        (ids[0], "Calculator", "7 - 1", "6.", "6", 3.0, 2.5, 0.4),  # right: at the answer, its value
        (ids[1], "Calculator", "8 + 2", "6.", "10", 3.0, 2.5, 0.4),  # kept, a wrong value
        (ids[2], "Calculator", "9 - 3", "6.", "6", 3.0, 2.8, 3.3),  # right, not kept
    ])
    gold = gold_report(run)["gold"]["Calculator"]
    assert set(gold["by_source"]) == {"mawps"}
    for counts in (gold, gold["by_source"]["mawps"]):
        assert {k: counts[k] for k in ("documents", "kept", "kept_right", "gold", "gold_with_right_kept")} == {
            "documents": 3, "kept": 2, "kept_right": 1, "gold": 3, "gold_with_right_kept": 1}
        assert counts["precision"] == pytest.approx(0.5, abs=1e-12)
        assert counts["recall_right"] == pytest.approx(1 / 3, abs=1e-12)


@pytest.mark.slow
@pytest.mark.skipif(not REAL or not Path(REAL).is_dir(), reason=f"${DATA_ENV} does not name a folder of the "
                                                                 "published files")
def test_most_published_mawps_and_asdiv_training_problems_get_a_gold_call(tmp_path, capsys):
    """On the published files (measured: MAWPS 2,089 of 2,135 training problems, 97.8 %; ASDiv 1,299 of 1,795,
    72.4 %: ASDiv's others need GCD/LCM, a ratio, an unknown solved for or a remainder, or answer a time)."""
    cfg = load_published(ROOT / "configs" / "published.yaml", [f"run_dir={tmp_path}", f"published.data_dir={REAL}"])
    root = world.build_world(cfg, quiet=True)
    gold = json.loads((root / "world.json").read_text())["math_gold"]
    share = {s: gold[s]["with_gold"] / gold[s]["problems"] for s in world.FORMULA_SOURCES}
    with capsys.disabled():
        print("\nshare of training problems with a gold call: " + ", ".join(
            f"{s} {100 * v:.1f} % ({gold[s]['with_gold']:,} of {gold[s]['problems']:,}, without: "
            f"{gold[s]['without']})" for s, v in share.items()))
    assert share["mawps"] >= 0.95 and share["asdiv"] >= 0.70
    for s in world.FORMULA_SOURCES:
        assert gold[s]["with_gold"] + sum(gold[s]["without"].values()) == gold[s]["problems"]
    corpus = [d for d in read_jsonl(root / "corpus.jsonl") if d["source"] in world.FORMULA_SOURCES]
    assert sum(bool(d.get("gold_calls")) for d in corpus) >= 0.8 * len(corpus)
    assert not any("gold_calls" in d for d in read_jsonl(root / "pretrain.jsonl"))


def test_recall_where_the_model_needs_the_call(data, tmp_path, monkeypatch, tiny_model_dir):
    """Recall over the gold calls the base model gets wrong itself: of the three, the model misses the first two;
    the first has a right kept call, so 1 of 2. The tiny model is asked once per gold call with a number."""
    from toolformer.published import needed

    docs = docs_of(data, MAWPS, "mawps")[:3]
    ids = [d["doc_id"] for d in docs]
    run = make_run(tmp_path, docs=docs, calls=[
        (ids[0], "Calculator", "7 - 1", "6.", "6", 3.0, 2.5, 0.4),
        (ids[1], "Calculator", "8 + 2", "6.", "10", 3.0, 2.5, 0.4),
        (ids[2], "Calculator", "9 - 3", "6.", "6", 3.0, 2.8, 3.3),
    ])
    from toolformer.rundir.folder import read_documents

    asked = needed.model_misses(read_documents(run), tiny_model_dir)
    assert len(asked) == 3 and all(isinstance(v, bool) for v in asked.values())
    first = {d: min(g["char_start"] for g in doc["gold_calls"]) for d, doc in read_documents(run).items()}
    monkeypatch.setattr(needed, "model_misses", lambda documents, model_dir: {
        (d, first[d]): d in ids[:2] for d in ids})
    got = needed.needed_recall(run, tiny_model_dir)
    assert {k: got[k] for k in ("gold", "needed", "needed_with_right_kept")} == {
        "gold": 3, "needed": 2, "needed_with_right_kept": 1}
    assert got["recall_right"] == pytest.approx(0.5, abs=1e-12) and set(got["by_source"]) == {"mawps"}


@pytest.mark.parametrize("continuation, number, writes", [
    (" 50 apples", "50", True), ("500", "50", False), ("$1,200 in all", "$1,200", True), (" 4.5", "4", False),
    ("", "7", False)])
def test_a_continuation_writes_the_number_only_as_a_whole_number(continuation, number, writes):
    from toolformer.published.needed import continues_with, written_number

    assert continues_with(continuation, number) is writes
    assert written_number("so 48/2 = $1,200.50 today", 10) == "$1,200.50"


def test_fewer_candidates_a_position_replayed_on_the_records(data, tmp_path):
    """Three candidates at one position, the right one last: at most 2 a position leaves it out, 3 keeps it."""
    from toolformer.published.lab import per_position

    docs = docs_of(data, MAWPS, "mawps")[:1]
    d = docs[0]["doc_id"]
    run = make_run(tmp_path, docs=docs, calls=[
        (d, "Calculator", "7 + 1", "6.", "8", 3.0, 2.5, 0.4),
        (d, "Calculator", "7 * 1", "6.", "7", 3.0, 2.5, 3.0),
        (d, "Calculator", "7 - 1", "6.", "6", 3.0, 2.5, 0.4),
    ])
    rows = {r["per_position"]: r for r in per_position(str(run), (2, 3))}
    assert (rows[2]["candidates"], rows[2]["kept"], rows[2]["right"]) == (2, 1, 0)
    assert (rows[3]["candidates"], rows[3]["kept"], rows[3]["right"]) == (3, 2, 1)
    from inspect_runs import TAU

    from toolformer.published.lab import closest_to_tau

    # L⁻ − L⁺ = 2.5 − 0.4 = 2.1 and 2.5 − 3.0 = −0.5: the closest to Calculator's tau_f
    want = min(abs(2.1 - TAU["Calculator"]), abs(-0.5 - TAU["Calculator"]))
    assert closest_to_tau(str(run)) == pytest.approx({"Calculator": want}, abs=1e-9)


def test_the_loss_after_each_start_token(tiny_model_dir, tok):
    """`lab starts`: one loss per start token, each the mean over the texts' tokens (a finite number of nats)."""
    from toolformer.published.lab import start_losses

    got = start_losses(tiny_model_dir, ["7 + 8 = 15", "The river runs by the town."], [tok.bos_token, tok.pad_token])
    assert set(got) == {tok.bos_token, tok.pad_token} and all(0 < v < 50 for v in got.values())
    assert got[tok.bos_token] != got[tok.pad_token]


def test_the_filters_losses_with_the_call_inline(data, tmp_path, tiny_model_dir, tok):
    """`lab inline`: each scored record's losses recomputed with the call inside the text equal the reference
    (tests/reference.py) given the text before it, the call and the separator, within 1e-5 nats; the comparison
    counts both placements."""
    from reference import reference_loss
    from transformers import AutoModelForCausalLM

    from toolformer.inspect.view import read_stage
    from toolformer.lm.modeling import document_start
    from toolformer.published.placement import compare, inline_records
    from toolformer.rundir.folder import read_documents

    docs = docs_of(data, MAWPS, "mawps")[:1]
    d = docs[0]["doc_id"]
    run = make_run(tmp_path, docs=docs, calls=[(d, "Calculator", "7 + 1", "6.", "8", 3.0, 2.5, 0.4),
                                               (d, "Calculator", "7 - 1", "6.", "6", 3.0, 2.5, 0.4)])
    documents = read_documents(run)
    records = inline_records(read_stage(run, "filter").records, documents, tiny_model_dir)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir).eval()
    encode = lambda s: tok(s, add_special_tokens=False)["input_ids"]  # noqa: E731
    assert len(records) == 2
    for r in records:
        text, at = documents[d]["text"], r["char_start"]
        before, after = document_start(tok) + encode(text[:at]), encode(text[at:])
        for key, call in (("loss_none", ""), ("loss_no_result", r["call_text_no_result"] + " "),
                          ("loss_with_result", r["call_text"] + " ")):
            want = reference_loss(model, before + encode(call), after, 0)
            assert r[key] == pytest.approx(want, abs=1e-5), key
        assert r["kept"] == (min(r["loss_none"], r["loss_no_result"]) - r["loss_with_result"] >= 0.5)
    rows = {r["placement"]: r for r in compare(run, tiny_model_dir)}
    assert set(rows) == {"prefix", "inline"} and rows["prefix"]["scored"] == rows["inline"]["scored"] == 2
