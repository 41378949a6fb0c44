"""Low-rank adapters for fine-tuning (``finetune.method: lora``), through ``peft``.

The base model's weights stay frozen; each linear layer inside the decoder blocks learns a low-rank update
``B·A`` (rank ``finetune.lora_rank``, scaled by ``lora_alpha / lora_rank``, ``lora_dropout`` on its input). The
layers are found from the model (:func:`find_targets`: every ``nn.Linear``, and GPT-2's ``Conv1D``, except the
output layer), so Llama-, Qwen-, Gemma-, GPT-NeoX- and GPT-2-style models need no list; ``finetune.lora_targets``
names them instead. With ``calls.style: special`` the call tokens' embedding rows are trained too (peft's
trainable tokens), since a new token has no row the base model learnt.

``finetune.method: qlora`` trains the same adapters on a base model loaded in 4 bits (NF4 with double
quantization, bfloat16 compute, through ``bitsandbytes``: :func:`load_4bit`), which needs a CUDA GPU;
:func:`qlora_unavailable` says in one line why it cannot run elsewhere, before any model is loaded.

The loop (:mod:`toolformer.lm.training`) checkpoints and resumes the wrapped model as any other; at the end
:func:`save_merged` writes the adapter into ``OUTPUT_DIR/adapter`` and the model with the update merged into its
weights as a plain folder, which every reader of a model folder loads as it is. A 4-bit base is not merged into:
the adapter is merged into the base model read again at full precision (:func:`merge_into_base`).
"""

from __future__ import annotations

import copy
from pathlib import Path

import torch

ADAPTER = "adapter"
"""OUTPUT_DIR/adapter: the adapter alone (``peft``'s ``save_pretrained``)."""


def _is_linear(module) -> bool:
    return isinstance(module, torch.nn.Linear) or type(module).__name__ == "Conv1D"


def find_targets(model) -> list[str]:
    """The names (last part) of the linear layers inside the model, the output layer left out."""
    out = model.get_output_embeddings()
    return sorted({name.rsplit(".", 1)[-1] for name, m in model.named_modules() if _is_linear(m) and m is not out})


def check_targets(model, targets: list[str]) -> None:
    """A ValueError naming each target that matches no linear layer of ``model``, and the ones there are."""
    found = set(find_targets(model))
    missing = [t for t in targets if t not in found]
    if missing:
        raise ValueError(f"finetune.lora_targets: {', '.join(missing)} match no linear layer of the model (its "
                         f"linear layers: {', '.join(sorted(found))})")


def call_token_ids(tokenizer, style) -> list[int]:
    """The ids of the call markers of a special-token style (empty for a plain style)."""
    if not style.special_tokens:
        return []
    return sorted({tokenizer.convert_tokens_to_ids(m) for m in (style.start, style.end, style.arrow)})


def wrap(model, fc, tokenizer, style):
    """``model`` with adapters on its linear layers (``fc``: the fine-tune config) and, for a special-token call
    style, its call tokens' rows trainable; every other weight frozen."""
    from peft import LoraConfig, get_peft_model

    targets = list(fc.lora_targets) or find_targets(model)
    check_targets(model, targets)
    conv1d = any(type(m).__name__ == "Conv1D" for m in model.modules())
    ids = call_token_ids(tokenizer, style)
    config = LoraConfig(r=fc.lora_rank, lora_alpha=fc.lora_alpha, lora_dropout=fc.lora_dropout,
                        target_modules=targets, task_type="CAUSAL_LM", fan_in_fan_out=conv1d,
                        trainable_token_indices=ids or None)
    return get_peft_model(model, config)


def qlora_unavailable() -> str:
    """Why ``method: qlora`` cannot run on this machine, in one line; empty when it can."""
    import importlib.util

    if importlib.util.find_spec("bitsandbytes") is None:
        return ("method: qlora loads the base model in 4 bits through bitsandbytes, which is not installed here "
                "(pip install 'toolformer[qlora]'; or method: lora, the same adapters on a float32 base)")
    if not torch.cuda.is_available():
        return ("method: qlora needs a CUDA GPU (bitsandbytes' 4-bit layers) and this machine has none; "
                "method: lora trains the same adapters on a float32 base")
    return ""


def quantization_config():
    """The 4-bit load of QLoRA: NF4 weights with double quantization, matrix products in bfloat16."""
    from transformers import BitsAndBytesConfig

    return BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True,
                              bnb_4bit_compute_dtype=torch.bfloat16)


def load_4bit(path: str, device: torch.device, tokenizer, gradient_checkpointing: bool):
    """The base model in 4 bits on ``device`` (a GPU), its call-token rows fitted to ``tokenizer``, ready for
    adapters (norms and embeddings in float32, peft's ``prepare_model_for_kbit_training``)."""
    from peft import prepare_model_for_kbit_training
    from transformers import AutoModelForCausalLM

    from toolformer.lm.modeling import fit_rows

    index = device.index if device.index is not None else torch.cuda.current_device()
    model = AutoModelForCausalLM.from_pretrained(path, quantization_config=quantization_config(),
                                                 device_map={"": index}, dtype=torch.bfloat16)
    fit_rows(model, tokenizer)
    return prepare_model_for_kbit_training(model, use_gradient_checkpointing=gradient_checkpointing)


def is_quantized(model) -> bool:
    """Whether ``model`` (or the base under its adapters) holds 4- or 8-bit weights."""
    return bool(getattr(model, "is_loaded_in_4bit", False) or getattr(model, "is_loaded_in_8bit", False))


def merge_into_base(base_path: str, adapter_dir: Path, tokenizer):
    """The base model of ``base_path`` read at float32 on the CPU, with the adapter of ``adapter_dir`` merged into
    its weights: the plain model of a QLoRA run (its 4-bit weights are not the base model's)."""
    from peft import PeftModel

    from toolformer.lm.modeling import load_model

    base = load_model(base_path, torch.device("cpu"), torch.float32, tokenizer)
    return PeftModel.from_pretrained(base, adapter_dir).merge_and_unload()


def is_adapted(model) -> bool:
    """Whether ``model`` is a peft model (adapters around a base model)."""
    return hasattr(model, "merge_and_unload") and hasattr(model, "peft_config")


def trainable_share(model) -> tuple[int, int]:
    """(trainable parameters, all parameters)."""
    total = sum(p.numel() for p in model.parameters())
    return sum(p.numel() for p in model.parameters() if p.requires_grad), total


def save_merged(model, output_dir: Path, is_main: bool, tokenizer=None):
    """Write the adapter into ``output_dir/adapter`` (on the main process) and return a copy of the model with
    the adapters merged into its weights (a plain transformers model, to be saved as any other); over a 4-bit
    base, the adapter merged into the base model read again (:func:`merge_into_base`)."""
    if is_main:
        model.save_pretrained(output_dir / ADAPTER)
    if is_quantized(model):
        return merge_into_base(model.peft_config["default"].base_model_name_or_path, output_dir / ADAPTER, tokenizer)
    return copy.deepcopy(model).merge_and_unload()
