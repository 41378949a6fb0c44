"""The published-data world (toolformer.published): reading the published formats with every bad record counted,
the checksum check and the fetch command, splits without leaks, the contamination search, gold from GSM8K's
annotations and MAWPS's and ASDiv's formulas (tests/test_published_gold.py: the formulas and the gold report).

Small files written here stand in for the published ones; the tests that need the real files read them from
$TOOLFORMER_PUBLISHED_DATA (`.ci/run` sets it when the folder is there) and skip with the reason otherwise."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest
from worlds import write_published_math

from toolformer.published import sources, world
from toolformer.published.config import DATA_ENV, load_published
from toolformer.published.contamination import hits, longest_shared, normalise
from toolformer.published.readers import Rejected, parse_solution, read_gsm8k
from toolformer.rundir.files import read_jsonl
from toolformer.tasks.formats import SkipItem, load_task

ROOT = Path(__file__).resolve().parents[1]
REAL = os.environ.get(DATA_ENV, "")
needs_real = pytest.mark.skipif(not REAL or not Path(REAL).is_dir(),
                                reason=f"${DATA_ENV} does not name a folder of the published files")

GSM8K = [
    {"question": "Ann has 48 pens and gives away half. How many are left?",
     "answer": "She gives 48/2 = <<48/2=24>>24 pens.\nShe keeps 48-24 = <<48-24=24>>24 pens.\n#### 24"},
    {"question": "Bo buys 3 boxes of 12 eggs. How many eggs?", "answer": "He has 3*12 = <<3*12=36>>36 eggs.\n#### 36"},
    {"question": "No final line here.", "answer": "It is 2+2 = <<2+2=4>>4."},
    {"question": "A broken annotation.", "answer": "It is <<what>>5.\n#### 5"},
]


def _fact(uuid: str, rel: str, sub: str, obj: str, sentences: list[str]) -> dict:
    return {"uuid": uuid, "predicate_id": rel, "sub_label": sub, "obj_label": obj,
            "evidences": [{"masked_sentence": s} for s in sentences]}


def write_fixture(folder: Path, facts: int = 40) -> Path:
    """A data folder in the published layout: GSM8K, MAWPS, ASDiv and two T-REx relations (one missing from
    relations.jsonl)."""
    (folder / "math/gsm8k").mkdir(parents=True)
    (folder / "math/mawps").mkdir(parents=True)
    (folder / "lama/trex").mkdir(parents=True)
    lines = [json.dumps(r) for r in GSM8K]
    (folder / "math/gsm8k/train.jsonl").write_text("\n".join(lines[:2] + ["{not json"] + lines[2:]) + "\n")
    (folder / "math/gsm8k/test.jsonl").write_text(json.dumps(
        {"question": "Cy has 5 cats and gets 4 more. How many cats?", "answer": "5+4 = <<5+4=9>>9\n#### 9"}) + "\n")
    write_published_math(folder)
    towns = ["Paris", "Lyon", "Rome", "Oslo"]
    rows = [_fact(f"u{k}", "P19", f"Person Number{k}", towns[k % 4],
                  [f"Person Number{k} was born in [MASK] .", f"Person Number{k} (born in [MASK]) wrote books ."])
            for k in range(facts)]
    (folder / "lama/trex/P19.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    (folder / "lama/trex/P103.jsonl").write_text(json.dumps(
        _fact("x1", "P999", "Someone", "French", ["Someone spoke [MASK] ."])) + "\n")
    return folder


def fixture_config(tmp_path: Path, monkeypatch, **published):
    data = write_fixture(tmp_path / "data")
    monkeypatch.setattr(world, "check_data", sources.read_data)  # the stand-in files have other sha256
    overrides = [f"run_dir={tmp_path / 'run'}", f"published.data_dir={data}", "published.eval_lama=6",
                 *(f"published.{k}={v}" for k, v in published.items())]
    return load_published(ROOT / "configs" / "published.yaml", overrides)


def test_a_gsm8k_solution_becomes_text_and_gold_calls_at_the_annotated_results():
    sol = parse_solution(GSM8K[0]["answer"])
    assert "<<" not in sol.text and "####" not in sol.text and sol.answer == "24"
    assert [(c["input"], c["result"]) for c in sol.calls] == [("48/2", "24"), ("48-24", "24")]
    for c in sol.calls:
        assert sol.text[c["char_start"]:].startswith(c["result"])
    for bad in (GSM8K[2]["answer"], GSM8K[3]["answer"]):
        with pytest.raises(SkipItem):
            parse_solution(bad)


def test_bad_records_are_counted_with_file_and_line_never_dropped_unsaid(tmp_path, monkeypatch):
    cfg = fixture_config(tmp_path, monkeypatch)
    root = world.build_world(cfg, quiet=True)
    rejected = read_jsonl(root / "rejected.jsonl")
    where = {r["reason"]: r["where"] for r in rejected}
    train = str(Path(cfg.published.data_dir) / "math/gsm8k/train.jsonl")
    assert where["invalid JSON"] == f"{train}:3"
    assert where["no ####"] == f"{train}:4"
    assert where["annotation does not parse"] == f"{train}:5"
    assert where["relation missing from relations.jsonl"].endswith("P103.jsonl:1")
    summary = json.loads((root / "world.json").read_text())
    assert summary["rejected"] == {r: sum(x["reason"] == r for x in rejected) for r in where}
    assert len(read_gsm8k(Path(train), Rejected())) == 2


def test_a_record_with_a_long_number_lone_surrogate_or_nested_annotation_is_rejected_with_file_and_line(
        tmp_path, monkeypatch):
    cfg = fixture_config(tmp_path, monkeypatch)
    data = Path(cfg.published.data_dir)
    train, mawps = data / "math/gsm8k/train.jsonl", data / "math/mawps/trainset.json"
    with train.open("a") as f:  # lines 6 to 9
        for answer in ("x\n#### " + "1" * 400, "x\n#### " + "1" * 5000, "lone \ud800 surrogate\n#### 2",
                       "x <<2*<<3=3>>=6>>6 apples\n#### 6"):
            f.write(json.dumps({"question": "How many?", "answer": answer}) + "\n")
    rows = json.loads(mawps.read_text()) + [{"id": "h1", "original_text": "How many ?", "ans": 10**400}]
    mawps.write_text(json.dumps(rows)[:-1] + ', {"id": "h2", "original_text": "q", "ans": ' + "7" * 5000 + "}]")
    root = world.build_world(cfg, quiet=True)
    rejected = {r["where"]: r["reason"] for r in read_jsonl(root / "rejected.jsonl")}
    assert {w: rejected.get(w) for w in (f"{train}:6", f"{train}:7", f"{train}:8", f"{train}:9")} == {
        f"{train}:6": "answer number too long", f"{train}:7": "answer number too long", f"{train}:8": "not text",
        f"{train}:9": "annotation does not parse"}
    assert rejected[f"{mawps}: item 6"] == rejected[f"{mawps}: item 7"] == "answer number too long"
    assert json.loads((root / "world.json").read_text())["counts"]["pretrain"] > 0


def test_a_nested_or_unmatched_annotation_is_no_gold_call():
    for answer in ("x <<2*<<3=3>>=6>>6 apples\n#### 6", "x 3=3>>3 apples\n#### 3", "x <<3=3 apples\n#### 3"):
        with pytest.raises(SkipItem, match="annotation does not parse"):
            parse_solution(answer)


def test_mawps_and_asdiv_documents_carry_gold_calls_only_in_the_annotation_corpus(tmp_path, monkeypatch):
    from toolformer.published.pretrain import tokenizer_texts

    cfg = fixture_config(tmp_path, monkeypatch)
    root = world.build_world(cfg, quiet=True)
    corpus = [d for d in read_jsonl(root / "corpus.jsonl") if d["source"] in world.FORMULA_SOURCES]
    assert {d["source"] for d in corpus} == {"mawps", "asdiv"}
    for doc in corpus:
        (g,) = doc["gold_calls"]
        assert doc["text"][g["char_start"]:] == g["result"] + "." and doc["text"][:g["char_start"]].endswith(
            world.ANSWER_LEAD)
    assert not any("gold_calls" in d for d in read_jsonl(root / "pretrain.jsonl"))
    summary = json.loads((root / "world.json").read_text())
    assert summary["format"] == world.FORMAT == 3
    assert summary["math_gold"]["mawps"] == {"problems": 8, "with_gold": 8, "without": {}}
    assert summary["math_gold"]["asdiv"]["with_gold"] == summary["math_gold"]["asdiv"]["problems"] > 0
    texts = tokenizer_texts(root)  # the formulas' calls are not inline: the shipped tokenizer's texts stay
    assert not any(f"[Calculator({doc['gold_calls'][0]['input']}" in t for doc in corpus for t in texts)
    assert any("[Calculator(48/2) → 24]" in t for t in texts)  # GSM8K's are


def test_the_world_reads_the_bytes_it_checked_not_a_file_replaced_after_the_check(tmp_path, monkeypatch):
    cfg = fixture_config(tmp_path, monkeypatch)
    data = Path(cfg.published.data_dir)
    present = tuple(r for r in sources.READ if (data / r).is_file())
    monkeypatch.setattr(sources, "READ", present)
    monkeypatch.setattr(sources, "FILES", {r: hashlib.sha256((data / r).read_bytes()).hexdigest() for r in present})
    monkeypatch.setattr(sources, "RELATION_LINES", sources.relation_lines((data / sources.RELATIONS).read_bytes()))
    published = {r: (data / r).read_bytes() for r in present}

    def check_then_swap(folder):
        files = sources.check_data(folder)  # every file checked as published ...
        (data / "math/ASDiv.xml").write_text(  # ... then two replaced before the world is built
            "<Machine-Reading-Corpus-File><ProblemSet><Problem ID='x1'><Body>INJECTED Ann has 3 apples.</Body>"
            "<Question>How many apples?</Question><Answer>3</Answer></Problem></ProblemSet>"
            "</Machine-Reading-Corpus-File>")
        (data / "math/gsm8k/train.jsonl").write_text(json.dumps({"question": "INJECTED?", "answer": "#### 1"}) + "\n")
        return files

    monkeypatch.setattr(world, "check_data", check_then_swap)
    root = world.build_world(cfg, quiet=True)
    texts = [d["text"] for name in ("pretrain", "corpus") for d in read_jsonl(root / f"{name}.jsonl")]
    assert not any("INJECTED" in t for t in texts) and any("Eve has" in t for t in texts)
    files = json.loads((root / "world.json").read_text())["files"]
    assert files == {r: hashlib.sha256(b).hexdigest() for r, b in published.items()}


def test_evaluation_facts_are_in_no_training_text_and_in_the_qa_data(tmp_path, monkeypatch):
    cfg = fixture_config(tmp_path, monkeypatch)
    root = world.build_world(cfg, quiet=True)
    training = [d["text"] for name in ("pretrain", "corpus") for d in read_jsonl(root / f"{name}.jsonl")]
    _fmt, lama = load_task(root / "eval" / "lama.jsonl", "lama")
    assert 3 <= len(lama.items) <= 6
    for item in lama.items:
        subject = item.question.split(" was born")[0].split(" (born")[0]
        assert not any(subject + " " in t or subject + " (" in t for t in training), subject
    knowledge = read_jsonl(root / "knowledge.jsonl")
    assert len(knowledge) == 40 and {"subject", "relation", "object", "text"} <= set(knowledge[0])
    assert knowledge[0]["text"] == f"{knowledge[0]['subject']} was born in {knowledge[0]['object']}."
    for doc in read_jsonl(root / "corpus.jsonl"):
        for g in doc.get("gold_calls", []):
            assert doc["text"][g["char_start"]:].startswith(g["result"]), (doc, g)
    assert not any("[" in t for t in training[: len(read_jsonl(root / "pretrain.jsonl"))])  # no call syntax


def test_a_missing_or_edited_file_is_exit_2_naming_it_and_the_fetch_command(tmp_path, capsys):
    from toolformer.cli.app import main

    data = write_fixture(tmp_path / "data")
    rc = main(["published", "build", "--config", str(ROOT / "configs" / "published.yaml"),
               f"run_dir={tmp_path / 'run'}", f"published.data_dir={data}"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1, err
    assert "math/gsm8k/train.jsonl: sha256" in err[0] and "toolformer published fetch" in err[0]
    assert "Traceback" not in err[0]
    (data / "math/ASDiv.xml").unlink()
    assert sources.file_problem(data, "math/ASDiv.xml") == "missing"
    with pytest.raises(sources.DataError, match="train.jsonl: sha256 .*toolformer published fetch"):
        sources.check_data(data)


def test_fetch_checks_every_file_and_writes_nothing_that_differs(tmp_path, monkeypatch):
    data = write_fixture(tmp_path / "mirror")
    files = ("math/gsm8k/train.jsonl", "math/ASDiv.xml")
    monkeypatch.setattr(sources, "FILES", {f: hashlib.sha256((data / f).read_bytes()).hexdigest() for f in files})
    out = tmp_path / "out"
    assert sources.fetch(out, base=data.as_uri(), files=files, quiet=True) == list(files)
    assert all((out / f).read_bytes() == (data / f).read_bytes() for f in files)
    assert sources.fetch(out, base=data.as_uri(), files=files, quiet=True) == []  # already there and checked
    (out / files[1]).unlink()
    (data / files[1]).write_text("<edited/>")
    with pytest.raises(sources.DataError, match="not the published"):
        sources.fetch(out, base=data.as_uri(), files=files, quiet=True)
    assert not (out / files[1]).exists() and not list((out / "math").glob(".fetch-*"))


def test_the_contamination_search_finds_a_prompt_however_it_is_spaced_or_cased():
    texts = ["Nothing here.", "Anna was born in PARIS , France", "the cat sat on the mat all day long"]
    assert normalise("Zakāt,  is  HERE!") == "zakat is here"
    assert hits(["anna was born in paris", "Paris, France", "born in Lyon"], texts) == {0: [1], 1: [1]}
    assert hits(["cat sat on the ma"], texts) == {}  # whole words only
    longest = longest_shared(["we saw the cat sat on the mat today"], texts)
    assert longest["words"] == 6 and longest["ngram"] == "the cat sat on the mat"


@needs_real
@pytest.mark.slow
def test_no_evaluation_prompt_of_the_published_world_is_in_any_training_text(tmp_path):
    """Every evaluation prompt (LAMA, ASDiv, MAWPS, GSM8K test, read back with the project's loaders) searched,
    normalised, in every training text: pre-training, annotation, and so build's plain documents."""
    cfg = load_published(ROOT / "configs" / "published-scratch.yaml",
                         [f"run_dir={tmp_path}", f"published.data_dir={REAL}"])
    root = world.build_world(cfg, quiet=True)
    prompts = [it.question for name in ("lama", "asdiv", "mawps", "gsm8k")
               for it in load_task(root / "eval" / f"{name}.jsonl", "lama" if name == "lama" else "gsm8k")[1].items]
    assert len(prompts) > 1000
    training = [d["text"] for name in ("pretrain", "corpus") for d in read_jsonl(root / f"{name}.jsonl")]
    assert hits(prompts, training) == {}
    summary = json.loads((root / "world.json").read_text())
    assert summary["contamination"]["longest_shared"]["words"] < 60
    from toolformer.published.pretrain import pretrain_key  # the shipped base model was trained on these texts

    record = json.loads((ROOT / "data" / "published-base" / "pretrain.json").read_text())
    assert record["key"] == pretrain_key(cfg, root) and record["steps"] == cfg.pretrain.max_steps


def test_a_shipped_base_model_of_other_texts_is_not_silently_retrained(tmp_path, monkeypatch):
    from toolformer.published.pretrain import refuse_other_shipped

    cfg = fixture_config(tmp_path, monkeypatch)
    shipped = tmp_path / "shipped"
    shipped.mkdir()
    (shipped / "pretrain.json").write_text(json.dumps({"format": 2, "key": "k1", "steps": cfg.pretrain.max_steps,
                                                       "wall_seconds": 1800}))
    cfg.pretrain.shipped = str(shipped)
    refuse_other_shipped(cfg, "k1")  # the same key and steps: used
    with pytest.raises(ValueError, match="pass --force to train one here"):
        refuse_other_shipped(cfg, "k2")
    from toolformer.published.pretrain import pretrain_base_model  # nor a model of other texts replaced in place

    cfg.pretrain.shipped, cfg.pretrain.output_dir = "", str(shipped)
    monkeypatch.setattr("toolformer.published.pretrain.pretrain_key", lambda cfg, root: "k2")
    with pytest.raises(ValueError, match="holds a base model trained on other texts .* pass --force to replace it"):
        pretrain_base_model(cfg)
    assert json.loads((shipped / "pretrain.json").read_text())["key"] == "k1"


def test_the_fetch_command_reads_a_file_url_mirror(tmp_path, monkeypatch, capsys):
    from toolformer.cli.app import main

    data = write_fixture(tmp_path / "mirror")
    files = ("math/gsm8k/test.jsonl",)
    monkeypatch.setattr(sources, "READ", files)
    monkeypatch.setattr(sources, "FILES", {files[0]: hashlib.sha256((data / files[0]).read_bytes()).hexdigest()})
    monkeypatch.setattr(sources.fetch, "__defaults__", (files, False))
    assert main(["published", "fetch", "--out", str(tmp_path / "out"), "--source", data.as_uri()]) == 0
    assert "1 file(s) downloaded and checked" in capsys.readouterr().out
    assert (tmp_path / "out" / files[0]).read_bytes() == (data / files[0]).read_bytes()


@pytest.mark.slow
def test_the_published_demo_runs_every_stage_into_results_json(tmp_path, monkeypatch):
    """The whole demo on the small stand-in files with a tiny base model trained here: every row and set in
    results.json, gold counted per tool, the paper's numbers beside them."""
    from toolformer.published.demo import ROWS, run_published

    cfg = fixture_config(tmp_path, monkeypatch, eval_math=3, heldout_sentences=5)
    for key, value in {"vocab_size": 300, "hidden": 32, "layers": 1, "heads": 2, "max_steps": 2, "eval_every": 1,
                       "dev_docs": 2, "shipped": "", "threads": 1, "output_dir": str(tmp_path / "base"),
                       "weights": ""}.items():  # a base model trained here, not the config's SmolLM2
        setattr(cfg.pretrain, key, value)
    p = cfg.pipeline
    p.model.threads = 1
    p.filter.per_tool_tau = {"Calculator": -100.0, "QA": -100.0}  # keep every call: a 2-step model helps none
    p.finetune.max_steps, p.finetune.eval_every, p.finetune.save_every = 2, 1, 1
    p.evaluate.max_new_tokens = 8
    cfg.demo.math_max_new_tokens = cfg.demo.gsm8k_max_new_tokens = 8
    results = run_published(cfg)
    assert set(results["rows"]) == set(ROWS) and all(results["rows"].values())
    assert set(results["rows"]["toolformer"]) >= {"lama", "asdiv", "mawps", "gsm8k", "perplexity", "call_rate"}
    corpus = read_jsonl(cfg.world_dir() / "corpus.jsonl")
    calculator = results["gold"]["Calculator"]
    assert calculator["gold"] == sum(g["tool"] == "Calculator" for d in corpus for g in d.get("gold_calls", []))
    assert set(calculator["by_source"]) == {"gsm8k", "mawps", "asdiv"} and calculator["by_source"]["gsm8k"]["gold"] == 3
    assert results["gold"]["QA"]["gold"] > 0
    assert calculator["needed"]["gold"] == calculator["gold"]  # every gold calculation asked of the base model
    assert results["kept_calls"]["Calculator"] > 0
    assert results["paper"]["lama"] == {"without_tools": 31.9, "toolformer": 53.5}
    saved = json.loads((Path(p.run_dir) / "results.json").read_text())
    assert saved["rows"] == json.loads(json.dumps(results["rows"]))
