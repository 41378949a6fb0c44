"""Evaluation files as lm-evaluation-harness tasks (``toolformer tasks lmeval``).

:func:`write_task` loads a task file as the evaluate stage does
(:func:`~toolformer.tasks.formats.load_task`) and writes, into a folder:

* ``NAME.jsonl``: the loaded items, one ``{"id", "question", "answers", "date"}`` a line;
* ``NAME.yaml``: an lm-eval task: ``output_type: generate_until``, the project's
  prompt for the kind (the evaluate stage's ``{question}`` template), greedy
  decoding with no stop sequence (the evaluate stage stops at end of text or
  after ``max_new_tokens``), and the paper's metric as ``process_results``;
* ``utils.py``: the two hooks the YAML names (``!function utils.load_docs``,
  ``!function utils.process_results``): they call :func:`load_docs` and
  :func:`process_results` here, so a task scores exactly as ``toolformer score``
  scores (:func:`~toolformer.tasks.score.score_output`).

Nothing here imports lm-eval; :func:`load_docs` needs the ``datasets`` package,
a dependency of the project.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from toolformer.config.evaluation import SAFE_NAME, safe_name
from toolformer.rundir.files import atomic_write_text
from toolformer.tasks.formats import KINDS, TaskData, TaskFormatError, TaskItem, load_task
from toolformer.tasks.metrics import default_max_words, gold_numbers
from toolformer.tasks.score import holds_call, score_output
from toolformer.tools.calls import get_style

# The prompts of the project's configs (configs/demo.yaml, configs/tiny.yaml, configs/eval_example.yaml's LAMA).
KIND_PROMPTS = {"math": "{question} The answer is", "qa": "Question: {question} Answer:", "lama": "{question}"}
TASK_KEY = "toolformer_task"  # the YAML's dataset_kwargs entry load_docs reads
HEADER = "# lm-evaluation-harness task written by `toolformer tasks lmeval` from "  # NAME.yaml's first line
MAX_OWN_YAML = 1 << 20  # a NAME.yaml or utils.py longer than this is not one this command wrote
UTILS = '''"""lm-evaluation-harness hooks of the tasks in this folder, written by `toolformer tasks lmeval` (toolformer
must be installed where lm_eval runs): each task's items are the JSONL file its YAML names, beside this file, and
each output is scored with the project's metric (toolformer/integrations/lmeval_tasks.py)."""

from pathlib import Path

from toolformer.integrations.lmeval_tasks import load_docs as _load_docs
from toolformer.integrations.lmeval_tasks import process_results as process_results  # the YAML files name it


def load_docs(**kwargs):
    return _load_docs(Path(__file__).parent, **kwargs)
'''


def _safe_name(name: str) -> str:
    if not safe_name(name or ""):
        cut = f"{name[:60]!r}… ({len(name):,} characters)" if len(name or "") > 60 else repr(name)
        raise ValueError(f"--name {cut}: use {SAFE_NAME} (it names the task's files)")
    return name


def task_settings(fmt: str, kind: str | None, prompt: str | None, max_words: int, decimals: int) -> dict:
    """The scoring settings of a task: kind ``math`` or ``qa`` (``lama``: qa in the first 5 words), the prompt
    template, the QA word window (0: the paper's, 20 or 5 for LAMA) and the decimals math compares."""
    kind = kind or ("lama" if fmt.startswith("lama") else KINDS[fmt])
    if kind not in KIND_PROMPTS:
        raise ValueError(f"--kind {kind!r}: use math, qa or lama")
    prompt = KIND_PROMPTS[kind] if prompt is None else prompt
    if "{question}" not in prompt:
        raise ValueError(f"--prompt {prompt!r}: the template must contain {{question}}")
    if max_words < 0 or decimals < 0:
        raise ValueError("--max-words and --decimals: 0 or more")
    window = max_words or (5 if kind == "lama" else default_max_words(fmt))
    return {"kind": "math" if kind == "math" else "qa", "prompt": prompt, "max_words": window, "decimals": decimals}


def math_items(data: TaskData, path: Path) -> int:
    """Keep the items whose gold answer is a number (a QA-format file scored as math, as the evaluate stage
    does); return how many were left out."""
    keep = [i for i in data.items if gold_numbers(i.answers[0])]
    left = len(data.items) - len(keep)
    if not keep:
        raise TaskFormatError(f"{path}: no item has a number as its answer (the task is math)")
    data.items = keep
    return left


def task_yaml(name: str, source: str, settings: dict, max_new_tokens: int) -> str:
    """The text of ``NAME.yaml``: values as JSON scalars (valid YAML) so that any prompt is kept exactly."""
    spec = {"items": f"{name}.jsonl", **settings}
    gen = ["generation_kwargs:", "  until: []", "  do_sample: false"]
    if max_new_tokens:
        gen.append(f"  max_gen_toks: {max_new_tokens}")
    lines = [
        f"{HEADER}{source}.",
        "# Greedy, no stop sequence (as `toolformer evaluate` decodes); the metric is the paper's, as",
        "# `toolformer score` computes it (toolformer/integrations/lmeval_tasks.py). Run with the toolformer model:",
        f"#   toolformer lm-eval run --model toolformer --model_args pretrained=MODEL --tasks {name} "
        "--include_path DIR",
        f"task: {json.dumps(name)}",
        "custom_dataset: !function utils.load_docs",
        "dataset_kwargs:",
        f"  {TASK_KEY}:",
        *(f"    {k}: {json.dumps(v, ensure_ascii=False)}" for k, v in spec.items()),
        "test_split: test",
        "output_type: generate_until",
        'doc_to_text: "{{prompt}}"',
        'doc_to_target: "{{answers[0]}}"',
        "process_results: !function utils.process_results",
        "metric_list:",
        "  - {metric: acc, aggregation: mean, higher_is_better: true}",
        "  - {metric: call_rate, aggregation: mean, higher_is_better: true}",
        *gen,
        "metadata:",
        "  version: 1.0",
    ]
    return "\n".join(lines) + "\n"


def write_task(path: str | Path, out: str | Path, name: str, fmt: str = "auto", kind: str | None = None,
               prompt: str | None = None, max_words: int = 0, decimals: int = 2, max_items: int = 0,
               max_new_tokens: int = 0, call_style: str = "plain", force: bool = False) -> dict:
    """Write the lm-eval task ``name`` of task file ``path`` into folder ``out`` (see the module doc); return
    what was written and counted. ``max_new_tokens`` > 0 sets the task's ``max_gen_toks`` (else the model's
    own default applies: the folder's ``evaluate.max_new_tokens`` for the toolformer model); ``call_style`` is
    the call syntax removed from outputs before scoring (the model's ``calls.style``). Files of the folder that
    are not this function's own unchanged output are replaced only with ``force`` (:func:`check_replaceable`)."""
    name = _safe_name(name)
    get_style(call_style)
    if max_items < 0 or max_new_tokens < 0:
        raise ValueError("--max-items and --max-new-tokens: 0 or more")
    src = Path(path)
    fmt, data = load_task(src, fmt, max_items)
    settings = task_settings(fmt, kind, prompt, max_words, decimals)
    left_out = math_items(data, src) if settings["kind"] == "math" else 0
    settings["call_style"] = call_style
    digest = hashlib.sha256(src.read_bytes()).hexdigest()[:16]
    source = f"{src.name} (format {fmt}, sha256 {digest}...; {len(data.items)} items)"
    folder = Path(out)
    if not force:
        check_replaceable(folder, name)
    folder.mkdir(parents=True, exist_ok=True)
    items = "".join(json.dumps({"id": i.id, "question": i.question, "answers": i.answers, "date": i.date},
                               ensure_ascii=False) + "\n" for i in data.items)
    atomic_write_text(folder / f"{name}.jsonl", items)
    atomic_write_text(folder / f"{name}.yaml", task_yaml(name, source, settings, max_new_tokens))
    atomic_write_text(folder / "utils.py", UTILS)
    return {"task": name, "format": fmt, "items": len(data.items), "skipped": len(data.skipped),
            "not_numbers": left_out, "folder": str(folder), **settings}


def check_replaceable(folder: Path, name: str) -> None:
    """Refuse (ValueError naming the file) to replace a file of ``folder`` that is not this command's own
    unchanged output: ``utils.py`` other than :data:`UTILS`, a ``NAME.yaml`` that :func:`own_yaml` does not
    recognise, or a ``NAME.jsonl`` not beside such a ``NAME.yaml``."""
    yaml_path, items_path, utils_path = folder / f"{name}.yaml", folder / f"{name}.jsonl", folder / "utils.py"
    ours = _plain_file(yaml_path) and yaml_path.stat().st_size <= MAX_OWN_YAML and own_yaml(
        yaml_path.read_bytes().decode("utf-8", "replace"), name)
    checks = ((yaml_path, ours), (items_path, ours),
              (utils_path, _plain_file(utils_path) and utils_path.stat().st_size <= MAX_OWN_YAML
               and utils_path.read_bytes() == UTILS.encode()))
    for path, replaceable in checks:
        if (path.exists() or path.is_symlink()) and not replaceable:
            raise ValueError(f"{path}: exists and is not the unchanged output of `toolformer tasks lmeval`; "
                             "--force replaces it")


def _plain_file(path: Path) -> bool:
    return path.is_file() and not path.is_symlink()


def own_yaml(text: str, name: str) -> bool:
    """Whether ``text`` is ``NAME.yaml`` as :func:`task_yaml` writes it, unchanged: rendered again from the
    source, settings and decoding it states, it is the same text."""
    lines = text.split("\n")
    if not lines[0].startswith(HEADER) or not lines[0].endswith("."):
        return False
    try:
        spec = {k: json.loads(v) for k, _, v in (ln[4:].partition(": ") for ln in lines if ln.startswith("    "))}
        max_new = next((int(ln.split(": ", 1)[1]) for ln in lines if ln.startswith("  max_gen_toks: ")), 0)
    except (ValueError, RecursionError):
        return False
    spec.pop("items", None)
    return task_yaml(name, lines[0][len(HEADER):-1], spec, max_new) == text


def load_docs(folder: Path, **kwargs) -> dict:
    """lm-eval's ``custom_dataset`` hook: ``{"test": Dataset}`` of the JSONL file that the YAML's
    ``dataset_kwargs.toolformer_task.items`` names in ``folder``, each item with its prompt and scoring
    settings. Other keyword arguments (lm-eval passes the task's metadata and the model's arguments) are
    ignored."""
    import datasets

    spec = kwargs.get(TASK_KEY)
    if not isinstance(spec, dict) or "items" not in spec:
        raise ValueError(f"{folder}: the task's dataset_kwargs need `{TASK_KEY}: {{items: FILE.jsonl, ...}}`")
    path = folder / spec["items"]
    if not path.is_file():
        raise FileNotFoundError(f"{path}: the task's items file is missing (rewrite it: toolformer tasks lmeval)")
    settings = {k: spec[k] for k in ("kind", "max_words", "decimals", "call_style")}
    docs = []
    for n, line in enumerate(path.read_text(encoding="utf-8").split("\n"), 1):
        if line.strip():
            try:
                item = json.loads(line)
            except json.JSONDecodeError as e:
                raise TaskFormatError(f"{path}: line {n}: invalid JSON: {e.msg}") from None
            docs.append({**item, "prompt": spec["prompt"].replace("{question}", item["question"]), **settings})
    return {"test": datasets.Dataset.from_list(docs)}


def process_results(doc: dict, results: list[str]) -> dict:
    """lm-eval's ``process_results`` hook: ``acc`` of one output by the paper's metric (the evaluate stage's
    :func:`~toolformer.tasks.score.score_output`), and ``call_rate``: whether the output holds a call, as the
    evaluate stage counts it (:func:`~toolformer.tasks.score.holds_call`)."""
    item = TaskItem(str(doc["id"]), doc["question"], list(doc["answers"]), doc.get("date"))
    style = get_style(doc["call_style"])
    scored = score_output(item, results[0], doc["kind"], int(doc["max_words"]), int(doc["decimals"]), style)
    return {"acc": float(scored["correct"]), "call_rate": float(holds_call(results[0], style))}
