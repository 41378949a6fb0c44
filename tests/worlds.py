"""Small worlds for tests: ``SMALL``, a world far smaller than the demo's with each optional feature off, and
``small_cfg`` that points it at a folder; ``TINY``, pre-training settings that train a base model in seconds.
(The conftest fixture ``small_world`` is the files of ``small_cfg`` with its defaults, generated once.)"""

from __future__ import annotations

import json
from pathlib import Path

from toolformer.smallworld.config import SmallWorldConfig, WorldConfig

SMALL = dict(towns=14, rivers=3, ranges=2, seas=2, people=18, events=6, pretrain_docs=400, corpus_docs=150,
             heldout_docs=40, eval_math=24, eval_qa=30, twostep_docs=30, eval_twostep=16,
             copycall_share=0.2, cuecall_share=0.1,
             # the plainer world: a test of a feature switches it on (the shipped world has them all)
             note_share=0.3, induction_share=0.0, noise_share=0.0, rewrite_share=0.0, rewrite_math_share=0.0,
             text_order=False, extra_train_forms=False, scene_forms=False)

TINY = dict(vocab_size=700, hidden=16, layers=1, heads=2, positions=64, seq_len=32, batch_size=4, max_steps=3,
            eval_every=2, dev_docs=20, probe_items=6, threads=1, shipped="", init_from="", learning_rate=3e-3,
            digits_apart=False, prefix_space=False)


def small_cfg(out: Path, **kw) -> SmallWorldConfig:
    """The SMALL world (``kw`` changing its settings) with its run folder ``out``."""
    cfg = SmallWorldConfig(world=WorldConfig(**{**SMALL, **kw}))
    cfg.pipeline.run_dir = str(out)
    return cfg


def records(path: Path) -> list[dict]:
    """The objects of a world's JSON Lines file, every line one object (a blank line is an error)."""
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def write_published_math(folder: Path) -> None:
    """Stand-ins in the published layout for MAWPS (train, valid and test sets), ASDiv and T-REx's
    relations.jsonl (P19 only), under ``folder`` whose math/mawps and lama/trex folders exist. Each MAWPS and
    ASDiv problem has its published formula (``X=(9.0-3.0)``, ``4+5=9``), whose value is the answer."""
    for name, n in (("trainset", 6), ("validset", 2), ("testset", 3)):
        (folder / f"math/mawps/{name}.json").write_text(json.dumps(
            [{"id": f"{name}{k}", "original_text": f"Dee had {k + 7} apples and ate {k + 1} . How many are left ?",
              "equation": f"X=({k + 7}.0-{k + 1}.0)", "ans": 6.0} for k in range(n)]))
    problems = "".join(f'<Problem ID="nluds-{k:04d}"><Body>Eve has {k + 2} red and {k + 3} blue balls.</Body>'
                       f"<Question>How many balls?</Question><Answer>{2 * k + 5} (balls)</Answer>"
                       f"<Formula>{k + 2}+{k + 3}={2 * k + 5}</Formula></Problem>" for k in range(10))
    (folder / "math/ASDiv.xml").write_text(f"<Machine-Reading-Corpus-File><ProblemSet>{problems}</ProblemSet>"
                                           "</Machine-Reading-Corpus-File>")
    (folder / "lama/trex/relations.jsonl").write_text(json.dumps(
        {"relation": "P19", "template": "[X] was born in [Y] .", "label": "place of birth"}) + "\n")
