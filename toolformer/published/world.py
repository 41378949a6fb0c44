"""Writing the published-data world from the published files: splits without leaks, the texts, the tools' data
and the evaluation sets (``toolformer published build``; ``toolformer demo`` runs it first).

Splits:
- T-REx facts by the sha256 of seed and uuid: pre-training facts (``published.trex_pretrain_share``), annotation
  facts (``trex_annotation_share``) and evaluation facts (the rest). An evaluation fact's sentences are in no
  training text (a training sentence equal to one of them is left out), its triple is in the QA tool's data.
- Math by the published splits: GSM8K train/test, MAWPS train+valid/test; ASDiv by the sha256 of its problem ID
  (``asdiv_test_share`` are test problems).
Then every evaluation prompt is searched in every training text (:mod:`.contamination`) and a training document
that holds one is left out, counted in ``world.json``.

Files in the world folder: ``pretrain.jsonl`` (the base model's text: pre-training facts' sentences, GSM8K
training solutions without their annotations, MAWPS and ASDiv training problems with their answers; no call
syntax), ``corpus.jsonl`` (the annotation corpus: GSM8K training problems with their annotations as
``gold_calls``, MAWPS and ASDiv training problems with a gold Calculator call at the answer from their published
formula where its value is the answer, annotation facts' sentences with a gold QA call before each mention of the
object), ``knowledge.jsonl`` (every T-REx triple, rendered through its relation's template: the
QA tool's data), ``eval/`` (``lama.jsonl``, ``asdiv.jsonl``, ``mawps.json``, ``gsm8k.jsonl``), ``heldout.jsonl``
(sentences of evaluation facts that are not evaluation items, for perplexity), ``rejected.jsonl`` (every
record left out: file:line and reason), ``no_gold.jsonl`` (the MAWPS and ASDiv training problems without a gold
call: file and id, why, the formula) and, last, ``world.json`` (counts, ``math_gold``: per source the training
problems with a gold call and why the others have none, the contamination search, the key).
"""

from __future__ import annotations

import hashlib
import json
import random
from pathlib import Path

from toolformer.config.load import config_hash
from toolformer.published.config import PublishedWorldConfig
from toolformer.published.contamination import hits, longest_shared
from toolformer.published.readers import (
    Fact,
    Problem,
    Rejected,
    read_gsm8k,
    read_relations,
    read_task,
    read_trex,
    render,
)
from toolformer.published.sources import RELATIONS, check_data
from toolformer.rundir.files import IntegrityError, atomic_write_text, dumps, read_json

SUMMARY = "world.json"
CORPUS_ID = "a-"
"""The ids of the annotation corpus's documents start with this (``a-gsm8k-12``, ``a-trex-<uuid>``)."""
FORMAT = 3
"""3: MAWPS and ASDiv documents carry a gold Calculator call from their formula."""
FORMULA_SOURCES = ("mawps", "asdiv")
"""The math sources whose gold call comes from the problem's published formula (:func:`.readers.formula_call`)."""
ANSWER_LEAD = "The answer is "


def share(seed: int, key: str) -> float:
    """A number in [0, 1) fixed by ``seed`` and ``key``."""
    return int(hashlib.sha256(f"{seed}:{key}".encode()).hexdigest()[:12], 16) / 16**12


def number_text(value: str) -> str:
    """An answer as a text writes it: 1.8333333333333335 → 1.83, 12.0 → 12; other forms (5:45) and numbers of
    10**15 or more (a float holds not all their digits) as they are."""
    try:
        v = float(value)
    except ValueError:
        return value
    if not abs(v) < 1e15:
        return value
    return str(int(round(v))) if abs(v - round(v)) < 1e-9 else f"{v:.2f}".rstrip("0").rstrip(".")


def math_doc(p: Problem, source: str) -> dict:
    """A math problem as a document: ``Question: …\\nAnswer: [solution\\n]The answer is N.``, GSM8K's
    annotations as gold calls; a MAWPS or ASDiv problem's call from its formula as a gold call at N (where the
    annotated result's text would be), none without one."""
    head = f"Question: {p.question}\nAnswer: "
    if p.solution is None:
        doc = {"id": f"{source}-{p.id}", "text": f"{head}{ANSWER_LEAD}{number_text(p.answer)}.", "source": source}
        return doc | ({"gold_calls": [p.call | {"char_start": len(head) + len(ANSWER_LEAD)}]} if p.call else {})
    body = p.solution.text.strip("\n")
    lead = len(p.solution.text) - len(p.solution.text.lstrip("\n"))
    calls = [{**c, "char_start": c["char_start"] - lead + len(head)} for c in p.solution.calls]
    return {"id": f"{source}-{p.id}", "text": f"{head}{body}\n{ANSWER_LEAD}{number_text(p.answer)}.",
            "gold_calls": calls, "source": source}


def math_gold(math: dict[str, list[Problem]]) -> tuple[dict[str, dict], list[dict]]:
    """Per formula source, its training problems, those with a gold call and why the others have none; and
    those others, each ``{"where", "reason", "detail"}``."""
    counts, records = {}, []
    for source in FORMULA_SOURCES:
        without = Rejected()
        for p in math[source]:
            if p.no_call is not None:
                without.add(p.where, p.no_call.reason, p.no_call.detail)
        counts[source] = {"problems": len(math[source]), "with_gold": sum(p.call is not None for p in math[source]),
                          "without": without.counts()}
        records += without.records
    return counts, records


def fact_doc(f: Fact, n: int, gold: bool, skip: set[str]) -> dict | None:
    """A fact's first ``n`` sentences (not those in ``skip``) as one document; with ``gold``, a gold QA call
    before each mention of the object."""
    parts: list[str] = []
    calls: list[dict] = []
    at = 0
    for sentence, mask in zip(f.sentences, f.masks):
        if sentence in skip:
            continue
        if parts:
            at += 1
        if gold:
            calls.append({"tool": "QA", "input": "", "result": f.object, "char_start": at + mask})
        parts.append(sentence)
        at += len(sentence)
        if len(parts) == n:
            break
    if not parts:
        return None
    doc = {"id": f"trex-{f.uuid}", "text": " ".join(parts), "source": f"trex-{f.relation}"}
    return doc | ({"gold_calls": calls} if gold else {})


def _split_facts(facts: list[Fact], cfg) -> dict[str, list[Fact]]:
    out: dict[str, list[Fact]] = {"pretrain": [], "annotation": [], "eval": []}
    for f in facts:
        u = share(cfg.seed, f.uuid)
        key = ("pretrain" if u < cfg.trex_pretrain_share else
               "annotation" if u < cfg.trex_pretrain_share + cfg.trex_annotation_share else "eval")
        out[key].append(f)
    return out


def _lama_items(evals: list[Fact], cfg, rng: random.Random) -> tuple[list[dict], list[Fact]]:
    """Up to ``eval_lama`` evaluation items in T-REx's layout (one sentence ending on the object each), and the
    evaluation facts not asked (their sentences make the perplexity set)."""
    usable = [f for f in evals if any(len(p.split()) >= cfg.min_prompt_words for p in f.prompts)]
    rng.shuffle(usable)
    asked = usable[: cfg.eval_lama or None]
    items = []
    for f in asked:
        prompt = next(p for p in f.prompts if len(p.split()) >= cfg.min_prompt_words)
        items.append({"uuid": f.uuid, "predicate_id": f.relation, "sub_label": f.subject, "obj_label": f.object,
                      "evidences": [{"masked_sentence": f"{prompt} [MASK] ."}]})
    ids = {f.uuid for f in asked}
    return items, [f for f in evals if f.uuid not in ids]


def _math(folder: Path, files: dict[str, bytes], cfg, rejected: Rejected) -> dict[str, list[Problem]]:
    """The math problems of the checked bytes ``files`` (relative path → bytes) of the data folder ``folder``."""
    def task(rel: str, fmt: str) -> list[Problem]:
        return read_task(folder / rel, fmt, rejected, files[rel])

    gsm_train = read_gsm8k(folder / "math/gsm8k/train.jsonl", rejected, files["math/gsm8k/train.jsonl"])
    gsm_test = read_gsm8k(folder / "math/gsm8k/test.jsonl", rejected, files["math/gsm8k/test.jsonl"])
    mawps_train = [*task("math/mawps/trainset.json", "mawps"), *task("math/mawps/validset.json", "mawps")]
    mawps_test = task("math/mawps/testset.json", "mawps")
    asdiv = task("math/ASDiv.xml", "asdiv")
    asdiv_test = [p for p in asdiv if share(cfg.seed, f"asdiv:{p.id}") < cfg.asdiv_test_share]
    test_ids = {p.id for p in asdiv_test}
    return {"gsm8k": gsm_train, "gsm8k_test": gsm_test[: cfg.eval_gsm8k or None], "mawps": mawps_train,
            "mawps_test": mawps_test[: cfg.eval_math or None], "asdiv": [p for p in asdiv if p.id not in test_ids],
            "asdiv_test": asdiv_test[: cfg.eval_math or None]}


def _leak_free(docs: dict[str, list[dict]], prompts: list[str]) -> tuple[dict[str, list[dict]], dict[str, int]]:
    """``docs`` (per file) without the documents that hold an evaluation prompt; the count left out per file."""
    flat = [(name, d) for name, ds in docs.items() for d in ds]
    found = hits(prompts, [d["text"] for _n, d in flat])
    bad = {i for idx in found.values() for i in idx}
    dropped: dict[str, int] = {}
    for i in bad:
        dropped[flat[i][0]] = dropped.get(flat[i][0], 0) + 1
    kept: dict[str, list[dict]] = {name: [] for name in docs}
    for i, (name, d) in enumerate(flat):
        if i not in bad:
            kept[name].append(d)
    return kept, dropped


def world_key(cfg: PublishedWorldConfig) -> str:
    """What the world's files depend on: the published section but its folders, and the format."""
    pc = {k: v for k, v in vars(cfg.published).items() if k not in ("data_dir", "output_dir")}
    return config_hash({"format": FORMAT, "published": pc})


def _write_jsonl(path: Path, rows) -> int:
    lines = [dumps(r) + "\n" for r in rows]
    atomic_write_text(path, "".join(lines))
    return len(lines)


def _texts(cfg, facts: dict[str, list[Fact]], math: dict[str, list[Problem]]) -> dict[str, list[dict]]:
    """The pre-training and annotation documents, before the contamination search."""
    pc, rng = cfg.published, random.Random(cfg.seed)
    held = {s for f in facts["eval"] for s in f.sentences}  # an evaluation fact's sentences are no training text
    pretrain = [d for f in facts["pretrain"] if (d := fact_doc(f, pc.sentences_per_fact, False, held))]
    pretrain += [math_doc(p, "gsm8k") for p in math["gsm8k"]]
    pretrain += [math_doc(p, src) for src in ("mawps", "asdiv") for p in math[src]]
    for d in pretrain:
        d.pop("gold_calls", None)
    annotation = [d for f in facts["annotation"] if (d := fact_doc(f, pc.sentences_per_fact, True, held))]
    rng.shuffle(annotation)
    gsm = [math_doc(p, "gsm8k") for p in math["gsm8k"]]
    rng.shuffle(gsm)
    small = [math_doc(p, src) for src in ("mawps", "asdiv") for p in math[src]]
    rng.shuffle(small)
    corpus = [d | {"id": f"{CORPUS_ID}{d['id']}"}  # ids of their own: build reads pretrain.jsonl beside them
              for d in gsm[: pc.corpus_gsm8k] + small[: pc.corpus_math] + annotation[: pc.corpus_trex]]
    rng.shuffle(corpus)
    random.Random(cfg.seed + 1).shuffle(pretrain)
    return {"pretrain": pretrain, "corpus": corpus}


def _eval_files(root: Path, lama: list[dict], math: dict[str, list[Problem]]) -> dict[str, Path]:
    """The evaluation sets in published layouts the project's loaders read: T-REx for LAMA, GSM8K's for the
    math sets (``{"question", "answer": "#### N"}``)."""
    (root / "eval").mkdir(parents=True, exist_ok=True)
    paths = {"lama": root / "eval" / "lama.jsonl"}
    _write_jsonl(paths["lama"], lama)
    for name in ("asdiv", "mawps", "gsm8k"):
        paths[name] = root / "eval" / f"{name}.jsonl"
        _write_jsonl(paths[name], ({"id": p.id, "question": p.question, "answer": f"#### {p.answer}"}
                                   for p in math[f"{name}_test"]))
    return paths


def build_world(cfg: PublishedWorldConfig, force: bool = False, quiet: bool = False) -> Path:
    """Write the world (see the module docstring) into its folder; a world already written with this key is kept
    unless ``force``. Returns the folder."""
    root = cfg.world_dir()
    key = world_key(cfg)
    summary_path = root / SUMMARY
    rebuild = "rerun `toolformer published build --force` (with this run's --config and overrides) to write it again"
    if summary_path.is_symlink() or (summary_path.exists() and not summary_path.is_file()):
        raise IntegrityError(f"{summary_path}: not a file, so not the world's record: remove it, then {rebuild}")
    if not force and summary_path.exists():
        done = read_json(summary_path, rebuild)
        if done.get("key") == key:
            if not quiet:
                print(f"world: already written ({summary_path}), kept; --force writes it again")
            return root
    pc = cfg.published
    folder = pc.data_folder()
    files = check_data(folder)  # each file read once, as checked: the world is built from these bytes
    rejected = Rejected()
    relations = read_relations(folder / RELATIONS, rejected, files[RELATIONS])
    trex = {Path(r).name: raw for r, raw in files.items() if r.startswith("lama/trex/P")}
    facts = _split_facts(read_trex(folder / "lama/trex", relations, list(trex), rejected, trex), pc)
    math = _math(folder, files, pc, rejected)
    lama, rest = _lama_items(facts["eval"], pc, random.Random(pc.seed))
    docs = _texts(cfg, facts, math)
    prompts = [it["evidences"][0]["masked_sentence"].removesuffix(" [MASK] .") for it in lama]
    prompts += [p.question for name in ("asdiv_test", "mawps_test", "gsm8k_test") for p in math[name]]
    docs, dropped = _leak_free(docs, prompts)
    root.mkdir(parents=True, exist_ok=True)
    counts = {name: _write_jsonl(root / f"{name}.jsonl", ds) for name, ds in docs.items()}
    knowledge = [{"subject": f.subject, "relation": relations[f.relation]["label"], "object": f.object,
                  "text": render(relations[f.relation]["template"], f.subject, f.object)}
                 for part in facts.values() for f in part]
    counts["knowledge"] = _write_jsonl(root / "knowledge.jsonl", knowledge)
    asked_prompts = set(prompts)
    heldout = [{"text": s} for f in rest for s in f.sentences[:1]] or [  # else the asked facts' other sentences
        {"text": s} for f in facts["eval"] for s in f.sentences if not any(s.startswith(p) for p in asked_prompts)]
    random.Random(pc.seed).shuffle(heldout)
    counts["heldout"] = _write_jsonl(root / "heldout.jsonl", heldout[: pc.heldout_sentences or None])
    evals = _eval_files(root, lama, math)
    counts |= {f"eval_{k}": len(lama) if k == "lama" else len(math[f"{k}_test"]) for k in evals}
    counts["rejected"] = _write_jsonl(root / "rejected.jsonl", rejected.records)
    gold, without = math_gold(math)
    counts["no_gold"] = _write_jsonl(root / "no_gold.jsonl", without)
    longest = longest_shared(prompts, [d["text"] for ds in docs.values() for d in ds])
    summary = {"format": FORMAT, "key": key, "data_dir": str(folder),
               "files": {r: hashlib.sha256(raw).hexdigest() for r, raw in files.items()},
               "facts": {k: len(v) for k, v in facts.items()}, "counts": counts,
               "rejected": rejected.counts(), "math_gold": gold,
               "contamination": {"prompts": len(prompts), "training_documents_left_out": dropped,
                                 "longest_shared": longest}}
    atomic_write_text(summary_path, json.dumps(summary, indent=2, ensure_ascii=False) + "\n")
    if not quiet:
        print(f"world: {counts['pretrain']:,} pre-training and {counts['corpus']:,} annotation documents, "
              f"{counts['knowledge']:,} QA facts; evaluation: " + ", ".join(
                  f"{k.removeprefix('eval_')} {v:,}" for k, v in counts.items() if k.startswith("eval_"))
              + f"; {len(rejected.records):,} records rejected ({root / 'rejected.jsonl'}); training documents "
              f"holding an evaluation prompt left out: {sum(dropped.values()):,}; longest n-gram shared with an "
              f"evaluation prompt: {longest['words']} words; in {root}")
    return root
