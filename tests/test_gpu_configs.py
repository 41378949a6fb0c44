"""The GPU configs: configs/gpu-paper.yaml (the paper's settings) and configs/accelerate/*.yaml (accelerate
launcher configs), checked without a GPU. The paper's config loads with the paper's values and every key names
its source; the training loop's plan gives an effective batch of exactly 128 on 1 and on 8 processes (a simulated
world size), bf16 training on a CUDA device and the saved dtype finetune.save_dtype names; every accelerate key is
one accelerate's launcher knows, and the launcher's environment builds the FSDP plugin the comments describe."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch
import yaml
from helpers import ROOT

from toolformer.config.load import load_config, to_dict
from toolformer.config.schema import PipelineConfig
from toolformer.lm.trainargs import TrainArgs, batch_plan, mixed_precision, save_dtype

GPU_PAPER = ROOT / "configs" / "gpu-paper.yaml"
FSDP_8GPU = ROOT / "configs" / "accelerate" / "fsdp-8gpu.yaml"
ACCELERATE_CONFIGS = sorted((ROOT / "configs" / "accelerate").glob("*.yaml"))
# What a key's comment names as its source: the paper's section or appendix, accelerate, or this project.
SOURCE = re.compile(r"§\d|Appendix [AB]|accelerate|this project's")


def paper_config() -> PipelineConfig:
    return load_config(PipelineConfig, GPU_PAPER)


def test_gpu_paper_has_the_papers_settings():
    cfg = paper_config()
    ft = cfg.finetune
    assert cfg.tools.enabled == ["Calculator", "Calendar", "WikiSearch", "QA", "MT"]
    assert cfg.build.max_per_tool == 25000
    assert (ft.max_length, ft.batch_size, ft.max_steps) == (1024, 128, 2000)
    assert (ft.learning_rate, ft.warmup_ratio) == (1e-5, 0.1)
    assert ft.dtype == "bfloat16"
    assert ft.eval_every > 0 and ft.dev_ratio > 0  # the best model by dev perplexity is kept
    assert (cfg.evaluate.top_k_trigger, cfg.evaluate.max_calls) == (10, 1)
    # Sampling and filtering as configs/default.yaml has them; the paper's own markers " [", "]" and "->".
    default = to_dict(load_config(PipelineConfig, ROOT / "configs" / "default.yaml"))
    for section in ("sample", "filter"):
        assert to_dict(cfg)[section] == default[section], section
    assert cfg.calls.style == "plain_ascii"


@pytest.mark.parametrize("path", [GPU_PAPER, FSDP_8GPU], ids=lambda p: p.name)
def test_every_key_names_its_source(path: Path):
    lines = path.read_text(encoding="utf-8").splitlines()
    assert lines[0].startswith("#") and "Run:" in "\n".join(lines[:3])
    leaves = [(n, line) for n, line in enumerate(lines, 1)
              if line.strip() and not line.lstrip().startswith("#") and not line.rstrip().endswith(":")]
    assert len(leaves) > 10
    for n, line in leaves:
        comment = line.partition(" #")[2]
        assert SOURCE.search(comment), f"{path.name}:{n}: no source in the comment: {line.strip()}"


@pytest.mark.parametrize("processes", [1, 8])
def test_gpu_paper_batch_and_precision(processes: int):
    args = TrainArgs.from_config(paper_config().finetune)
    args.validate()
    accum, effective = batch_plan(args.batch_size, args.micro_batch_size, processes)
    assert effective == args.micro_batch_size * accum * processes == 128
    assert (args.micro_batch_size, accum) == {1: (4, 32), 8: (4, 4)}[processes]
    assert mixed_precision(args.dtype, cuda=True) == "bf16"  # bf16 autocast over float32 weights on a GPU
    assert save_dtype(args, cuda=True) == torch.bfloat16  # finetune.save_dtype: bfloat16


def test_gpu_paper_batch_is_exact_up_to_32_processes():
    ft = paper_config().finetune
    for processes in (1, 2, 4, 8, 16, 32):
        assert batch_plan(ft.batch_size, ft.micro_batch_size, processes)[1] == 128, processes
    assert batch_plan(128, 8, 32) == (1, 256)  # a micro batch of 8 would overshoot there


def test_batch_plan_rounds_down_to_whole_rounds():
    assert batch_plan(128, 8, 1) == (16, 128)
    assert batch_plan(100, 8, 3) == (4, 96)  # the nearest multiple of 8 x 3 below 100
    assert batch_plan(4, 8, 2) == (1, 16)  # at least one round


def test_precision_follows_the_device(monkeypatch):
    assert mixed_precision("auto", cuda=True) == "bf16" and mixed_precision("auto", cuda=False) == "no"
    assert [mixed_precision(d, cuda=c) for d in ("float32", "bfloat16", "float16") for c in (True, False)] == [
        "no", "no", "bf16", "bf16", "fp16", "fp16"]
    auto = TrainArgs(dtype="auto")
    assert save_dtype(auto, cuda=True) == torch.bfloat16 and save_dtype(auto, cuda=False) == torch.float32
    assert save_dtype(TrainArgs(dtype="auto", save_dtype="float16"), cuda=True) == torch.float16
    # Without `cuda`, what this machine has (what the training loop asks).
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert mixed_precision("auto") == "bf16" and save_dtype(auto) == torch.bfloat16
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert mixed_precision("auto") == "no" and save_dtype(auto) == torch.float32


@pytest.mark.parametrize("processes", [1, 8])
def test_trainer_uses_the_batch_plan(monkeypatch, tmp_path, processes: int):
    """The training loop's accumulation and effective batch on 1 and 8 processes (accelerate's process count
    simulated). dtype auto, as the other tests' loops: accelerate's state, once made, keeps its precision."""
    from accelerate import Accelerator

    from toolformer.lm.training import Trainer

    monkeypatch.setattr(Accelerator, "num_processes", property(lambda self: processes))
    args = TrainArgs.from_config(paper_config().finetune, dtype="auto")
    trainer = Trainer(torch.nn.Linear(2, 2), torch.zeros((8, 16), dtype=torch.long), None, args, tmp_path)
    assert (trainer.world, trainer.accum, trainer.effective) == (processes, 128 // (4 * processes), 128)


def launcher_environment(path: Path) -> dict[str, str]:
    """What `accelerate launch --config_file PATH -m toolformer.cli finetune` hands its processes."""
    from accelerate.commands.launch import _validate_launch_command, launch_command_parser
    from accelerate.utils.launch import prepare_multi_gpu_env

    parser = launch_command_parser()
    args, _, _ = _validate_launch_command(parser.parse_args(["--config_file", str(path), "-m", "toolformer.cli",
                                                             "finetune"]))
    return prepare_multi_gpu_env(args)


@pytest.mark.parametrize("path", ACCELERATE_CONFIGS, ids=lambda p: p.name)
def test_accelerate_config_keys_are_the_launchers(path: Path):
    from accelerate.commands.config.config_args import ClusterConfig, load_config_from_file
    from accelerate.commands.launch import launch_command_parser

    raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    known = set(ClusterConfig.__dataclass_fields__)
    assert set(raw) <= known, f"{path.name}: keys accelerate's config does not know: {sorted(set(raw) - known)}"
    config = load_config_from_file(str(path))  # refuses unknown keys and values of its enums itself
    assert isinstance(config, ClusterConfig) and config.distributed_type.value == "FSDP"
    assert (config.num_machines, config.num_processes, config.mixed_precision) == (1, 8, "bf16")
    launcher_args = {action.dest for action in launch_command_parser()._actions}
    unknown = sorted(set(config.fsdp_config) - launcher_args)
    assert not unknown, f"{path.name}: fsdp_config keys accelerate's launcher does not know: {unknown}"


@pytest.mark.parametrize("path", ACCELERATE_CONFIGS, ids=lambda p: p.name)
def test_accelerate_config_builds_the_fsdp_plugin(monkeypatch, path: Path):
    """The launcher's environment gives FSDP full sharding, one unit per transformer block, whole state dicts and
    the optimizer's own parameters (a CUDA device simulated: the plugin refuses sync_module_states on a CPU)."""
    import accelerate.utils.dataclasses as accelerate_dataclasses
    from accelerate.utils import FullyShardedDataParallelPlugin
    from torch.distributed.fsdp import ShardingStrategy, StateDictType
    from transformers import GPT2Config, GPT2LMHeadModel
    from transformers.models.gpt2.modeling_gpt2 import GPT2Block

    env = launcher_environment(path)
    assert env["ACCELERATE_USE_FSDP"] == "true" and env["ACCELERATE_MIXED_PRECISION"] == "bf16"
    for key, value in env.items():
        if key.startswith(("FSDP_", "ACCELERATE_")):
            monkeypatch.setenv(key, value)
    monkeypatch.setattr(accelerate_dataclasses, "get_torch_accelerator_backend", lambda: ("cuda", torch.cuda))
    plugin = FullyShardedDataParallelPlugin()
    assert plugin.fsdp_version == 1 and plugin.sharding_strategy == ShardingStrategy.FULL_SHARD
    assert plugin.state_dict_type == StateDictType.FULL_STATE_DICT  # no sharded state dicts
    assert plugin.use_orig_params and not plugin.cpu_offload.offload_params
    plugin.set_auto_wrap_policy(GPT2LMHeadModel(GPT2Config(n_layer=2, n_embd=8, n_head=2, vocab_size=16)))
    assert plugin.auto_wrap_policy.keywords["transformer_layer_cls"] == {GPT2Block}


def test_fsdp_8gpu_precision_is_the_paper_configs():
    """The launcher's precision for configs/accelerate/fsdp-8gpu.yaml is the one the loop asks for itself."""
    accelerate_precision = yaml.safe_load(FSDP_8GPU.read_text(encoding="utf-8"))["mixed_precision"]
    assert accelerate_precision == mixed_precision(paper_config().finetune.dtype, cuda=True) == "bf16"
