"""``toolformer export`` read by the clients it is written for: every ``openai`` record keeps the rules of OpenAI's
chat fine-tuning format with tools and validates as the openai SDK's typed request parameters, every ``anthropic``
record as the anthropic SDK's typed Messages parameters (no text block of whitespace alone, no last assistant turn
ending in whitespace), and TRL's SFTTrainer and DPOTrainer train the tiny model a few steps on the ``trl-sft`` folder
(with the chat template it carries) and the ``trl-dpo`` folder. Every record of a format offers the same tools, the
run's enabled ones, rows without calls included. The client packages are test extras; a test whose package is
missing is skipped saying so."""

import json
import math
import re
from pathlib import Path

import pytest
from helpers import built_run_with_two_calls, read_jsonl
from runs import tiny_built_run

from toolformer.inspect.export import export_run
from toolformer.inspect.trl import export_trl

pytestmark = pytest.mark.slow  # the tiny config's first stages, and training with TRL

NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
OPENAI_KEYS = {"role", "content", "name", "function_call", "weight", "tool_calls", "tool_call_id"}
OPENAI_ROLES = {"system", "user", "assistant", "function", "tool"}


@pytest.fixture(scope="module")
def run_dir(tiny_model_dir, tmp_path_factory) -> Path:
    return tiny_built_run(tiny_model_dir, tmp_path_factory.mktemp("clients") / "run")


def exported(run_dir: Path, fmt: str, tmp_path: Path) -> list[dict]:
    from toolformer.config.schema import PipelineConfig

    export_run(PipelineConfig(run_dir=str(run_dir)), fmt, tmp_path / f"{fmt}.jsonl")
    return read_jsonl(tmp_path / f"{fmt}.jsonl")


def openai_format_errors(record: dict) -> list[str]:
    """What OpenAI's chat fine-tuning format refuses in one example with tools: no ``messages`` list, a message
    with an unknown key or role, content that is neither text nor (for an assistant message with tool calls) null,
    no assistant message, a tool message that answers no earlier call, a tool that is not a named function with an
    object schema, a call of a tool not offered or with arguments that are not a JSON object."""
    messages = record.get("messages")
    if not isinstance(messages, list) or not messages:
        return ["missing messages list"]
    errors = [f"unknown record key {k}" for k in set(record) - {"messages", "tools", "parallel_tool_calls"}]
    offered = set()
    for t in record.get("tools", []):
        f = t.get("function") or {}
        if t.get("type") != "function" or not NAME.match(str(f.get("name"))) or \
                (f.get("parameters") or {}).get("type") != "object":
            errors.append(f"bad tool {t}")
        offered.add(f.get("name"))
    ids: set[str] = set()
    for m in messages:
        errors += [f"unknown message key {k}" for k in set(m) - OPENAI_KEYS]
        if m.get("role") not in OPENAI_ROLES:
            errors.append(f"unknown role {m.get('role')}")
        content = m.get("content")
        if not isinstance(content, str) and not (content is None and m.get("tool_calls")):
            errors.append("content neither text nor null beside tool calls")
        for tc in m.get("tool_calls") or []:
            ids.add(tc["id"])
            if tc["function"]["name"] not in offered or not isinstance(json.loads(tc["function"]["arguments"]), dict):
                errors.append(f"bad call {tc}")
        if m.get("role") == "tool" and m.get("tool_call_id") not in ids:
            errors.append("a tool message answers no earlier call")
    if not any(m.get("role") == "assistant" for m in messages):
        errors.append("no assistant message")
    return errors


def materialized(value):
    """A pydantic-validated TypedDict with its lazily validated iterables read (which validates their items)."""
    if isinstance(value, dict):
        return {k: materialized(v) for k, v in value.items()}
    if isinstance(value, str | bytes | int | float | bool) or value is None:
        return value
    return [materialized(v) for v in value]


def test_openai_records_keep_the_fine_tuning_rules_and_the_sdk_types(run_dir, tmp_path):
    records = exported(run_dir, "openai", tmp_path)
    assert any("tool_calls" in m for r in records for m in r["messages"])
    assert any(len(r["messages"]) == 2 for r in records)  # rows without calls are there too
    assert all(openai_format_errors(r) == [] for r in records), [openai_format_errors(r) for r in records][:3]
    assert all(r["tools"] == records[0]["tools"] for r in records)
    assert [t["function"]["name"] for t in records[0]["tools"]] == ["Calculator", "QA"]  # tools.enabled
    pytest.importorskip("openai", reason="the openai SDK is a test extra: pip install -e '.[test]'")
    from openai.types.chat import ChatCompletionMessageParam, ChatCompletionToolParam
    from pydantic import TypeAdapter

    messages, tools = TypeAdapter(list[ChatCompletionMessageParam]), TypeAdapter(list[ChatCompletionToolParam])
    for r in records:  # a key the types lack would be dropped: the records come back equal only without one
        assert materialized(messages.validate_python(r["messages"])) == r["messages"]
        assert materialized(tools.validate_python(r["tools"])) == r["tools"]


def test_anthropic_records_are_typed_messages_requests(run_dir, tmp_path):
    records = exported(run_dir, "anthropic", tmp_path)
    spaced = built_run_with_two_calls(tmp_path / "spaced", other_text="Nothing to compute.  \n")
    export_run(spaced, "anthropic", tmp_path / "spaced.jsonl")
    records += read_jsonl(tmp_path / "spaced.jsonl")
    assert records[-1]["messages"][-1]["content"] == [{"type": "text", "text": "Nothing to compute."}]
    for r in records:
        last = r["messages"][-1]
        if last["role"] == "assistant":
            assert last["content"][-1]["text"] == last["content"][-1]["text"].rstrip()
        assert all(b["text"].strip() for m in r["messages"] if isinstance(m["content"], list) for b in m["content"]
                   if b["type"] == "text")
        assert r["tools"] == records[0]["tools"] or r in records[-2:]  # one run, one catalogue
    pytest.importorskip("anthropic", reason="the anthropic SDK is a test extra: pip install -e '.[test]'")
    from anthropic.types.message_create_params import MessageCreateParamsNonStreaming
    from pydantic import TypeAdapter

    request = TypeAdapter(MessageCreateParamsNonStreaming)
    for r in records:
        body = {"model": "any", "max_tokens": 1, **r}
        assert materialized(request.validate_python(body)) == body


def test_trl_trains_on_both_folders(run_dir, tiny_model_dir, tmp_path, capsys):
    pytest.importorskip("trl", reason="TRL is a test extra: pip install -e '.[test]'")
    from toolformer.config.schema import PipelineConfig

    cfg = PipelineConfig(run_dir=str(run_dir))
    cfg.model.path = tiny_model_dir
    sft = export_trl(cfg, "trl-sft", tmp_path / "sft")
    assert sft["header_tokens"] > 0 and f"its tools header takes {sft['header_tokens']:,} tokens" in \
        capsys.readouterr().out
    export_trl(cfg, "trl-dpo", tmp_path / "dpo")
    common = {"max_steps": 2, "per_device_train_batch_size": 2, "report_to": [], "save_strategy": "no",
              "use_cpu": True, "logging_steps": 1, "max_length": 1024, "bf16": False}
    losses = []
    try:
        losses = _train_both(sft, common, tiny_model_dir, tmp_path)
    finally:  # TRL's trainers set accelerate's process-wide state; later tests build their own Accelerator
        from accelerate.state import AcceleratorState

        AcceleratorState._reset_state(reset_partial_state=True)
    assert len(losses) == 2 and all(math.isfinite(x) for x in losses), losses


def _train_both(sft: dict, common: dict, tiny_model_dir, tmp_path) -> list[float]:
    from datasets import load_from_disk
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import DPOConfig, DPOTrainer, SFTConfig, SFTTrainer

    losses = []
    for trainer_class, config in (
            (SFTTrainer, SFTConfig(output_dir=str(tmp_path / "sft-out"), chat_template_path=sft["chat_template"],
                                   **common)),
            (DPOTrainer, DPOConfig(output_dir=str(tmp_path / "dpo-out"), **common))):
        folder = tmp_path / ("sft" if trainer_class is SFTTrainer else "dpo") / "dataset"
        trainer = trainer_class(model=AutoModelForCausalLM.from_pretrained(tiny_model_dir), args=config,
                                train_dataset=load_from_disk(str(folder)),
                                processing_class=AutoTokenizer.from_pretrained(tiny_model_dir))
        losses.append(trainer.train().training_loss)
    return losses
