"""A plain training loop for causal LMs on packed token rows, built on ``accelerate``.

Used to fine-tune on the augmented data set C* (stage ``finetune``) and to
pre-train the small world's base model from scratch. It is a short loop rather
than the HF ``Trainer``, which ran about 10 % slower per step on the tiny model:
:class:`Trainer` (setup, optimizer step, evaluation, checkpoints, finish), run
by :func:`train_causal_lm`; its settings are :class:`TrainArgs`, built from
``FinetuneConfig`` by the finetune stage (:mod:`toolformer.lm.trainargs`); what it
writes, checkpoints and the model, is in :mod:`toolformer.lm.checkpoints`.

* Data: :func:`~toolformer.lm.rows.pack_sequences` turns documents into rows of ``seq_len`` tokens.
  The order of rows is a function of the optimizer step alone (a seeded
  permutation per epoch), so resuming needs no data-loader state.
* One optimizer step consumes ``batch_size`` rows: ``micro_batch_size`` per
  forward and process, gradients accumulated over the rest.
* Learning rate: linear warm-up over ``warmup_ratio`` of the steps, then linear
  decay to 0 (the paper) or cosine. It is computed from the step, so it has no
  state of its own to save.
* Precision: float32 weights and optimizer; ``bfloat16``/``float16`` are
  autocast (mixed precision), since bf16 weights would swallow updates at
  lr 1e-5.
* Dev perplexity every ``eval_every`` steps; the best model is saved with
  ``save_pretrained`` into ``output_dir`` (without a dev set, the last one).
* ``report_to``: the log records and the dev perplexity also go to TensorBoard or Weights & Biases
  (accelerate's trackers, files in ``output_dir/logs``), with tokens/s since the last record.
* Resumable checkpoints (``accelerate.save_state``: model, optimizer, RNG;
  plus the step and log history) in ``output_dir/checkpoints/step-NNNNNNN``; a
  rerun continues from the last complete one.
* Runs alone, or data-parallel under ``accelerate launch --num_processes N``;
  only the main process writes files other than checkpoint shards.
* Stops cleanly (:mod:`toolformer.rundir.stops`): a SIGINT or SIGTERM during a step
  lets the step finish, writes a checkpoint (every process agrees on the step)
  and raises ``Stopped``. The model is saved into a temporary folder and its
  files renamed into ``output_dir``, and a checkpoint that fails is deleted,
  so a full disk leaves no partial file (it raises ENOSPC naming the folder).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import time
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch
from tqdm import tqdm

from toolformer.lm.checkpoints import (
    CHECKPOINT_STATE,
    CHECKPOINTS,
    checkpoint_dirs,
    prepare_checkpoints,
    save_checkpoint,
    save_whole,
)
from toolformer.lm.rows import batch_inputs, evaluate_perplexity
from toolformer.lm.trainargs import TrainArgs, batch_plan, lr_factor, mixed_precision, save_dtype
from toolformer.rundir import stops
from toolformer.rundir.files import atomic_write_text
from toolformer.rundir.parallel import use_cpu
from toolformer.rundir.sharding import fault_point

TRAINER_STATE = "trainer_state.json"
LOGS = "logs"
"""OUTPUT_DIR/logs: the tracker's files (``report_to``)."""


def _param_groups(model, weight_decay: float) -> list[dict]:
    decay = [p for p in model.parameters() if p.requires_grad and p.ndim >= 2]
    no_decay = [p for p in model.parameters() if p.requires_grad and p.ndim < 2]
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


class RowOrder:
    """Row indices of the training stream: epoch e is a permutation seeded by
    (seed, e), so the rows of any step are known without replaying the run."""

    def __init__(self, n_rows: int, seed: int):
        self.n, self.seed = n_rows, seed
        self._perms: dict[int, torch.Tensor] = {}

    def _perm(self, epoch: int) -> torch.Tensor:
        if epoch not in self._perms:
            g = torch.Generator().manual_seed(self.seed * 1_000_003 + epoch)
            self._perms = {epoch: torch.randperm(self.n, generator=g)}  # one epoch cached at a time
        return self._perms[epoch]

    def take(self, start: int, count: int) -> torch.Tensor:
        """Indices of stream positions start .. start + count - 1."""
        return torch.stack([self._perm(q // self.n)[q % self.n] for q in range(start, start + count)])


class Trainer:
    """One run of the training loop (see the module docstring). :func:`train_causal_lm`
    builds it; :meth:`run` sets up, steps until ``max_steps`` and returns the metrics."""

    def __init__(self, model, train: torch.Tensor, dev: torch.Tensor | None, args: TrainArgs,
                 output_dir: str | Path, tokenizer=None, on_step: Callable[[int, dict], None] | None = None):
        from accelerate import Accelerator

        args.validate()
        if len(train) == 0:
            raise ValueError("train_causal_lm: no training rows")
        self.model, self.train, self.dev, self.args = model, train, dev, args
        self.output_dir, self.tokenizer, self.on_step = Path(output_dir), tokenizer, on_step
        self.tracking = args.report_to != "none"
        if args.report_to == "wandb":
            os.environ.setdefault("WANDB_MODE", "offline")  # no network needed; `wandb sync` sends it later
        self.accelerator = Accelerator(mixed_precision=mixed_precision(args.dtype), cpu=use_cpu(),
                                       log_with=args.report_to if self.tracking else None,
                                       project_dir=str(self.output_dir / LOGS) if self.tracking else None)
        self.main = self.accelerator.is_main_process
        self.world = self.accelerator.num_processes
        self.accum, self.effective = batch_plan(args.batch_size, args.micro_batch_size, self.world)
        if self.effective != args.batch_size and self.main:
            print(f"train: effective batch {self.effective} (micro {args.micro_batch_size} x {self.world} processes "
                  f"x {self.accum} accumulation) instead of {args.batch_size}")
        self.pad_id = tokenizer.pad_token_id if tokenizer is not None and tokenizer.pad_token_id is not None else 0
        self.has_dev = dev is not None and len(dev) > 0
        self.order = RowOrder(len(train), args.seed)
        self.step = 0
        self.history: list[dict] = []  # the log and dev records, one per step logged or evaluated
        self.best: dict[str, Any] = {"dev_perplexity": None, "step": None}
        self.resumed_from = 0
        self.checkpoints_written = 0  # by this process, for the kill-and-resume tests
        self.local_tokens = 0
        self.loss_sum = torch.zeros((), device=self.accelerator.device)
        self.loss_count = 0
        self.last_loss: float | None = None
        self.optimizer: Any = None  # accelerate's wrapped AdamW, made by setup()
        self.since_log = (time.perf_counter(), 0)  # (time, local tokens) at the last log record

    # -- setup -------------------------------------------------------------------
    def setup(self, resume: bool = True, run_key: str | None = None) -> None:
        """Checkpoint folder, seed, float32 model and optimizer, then the last checkpoint (if any)."""
        from accelerate.utils import set_seed

        if self.main:
            prepare_checkpoints(self.output_dir / CHECKPOINTS, resume, run_key)
        self.accelerator.wait_for_everyone()
        set_seed(self.args.seed)
        # Master weights in float32 (see module docstring); a 4-bit base (QLoRA) keeps its own types.
        model = self.model if getattr(self.model, "is_loaded_in_4bit", False) else self.model.float()
        if self.args.gradient_checkpointing:
            kwargs = {"use_reentrant": False}
            if hasattr(model, "activation_checkpointing_enable"):  # transformers >= 5 name
                model.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
            else:
                model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)
            if hasattr(model, "peft_config"):
                model.enable_input_require_grads()  # frozen embeddings: the checkpointed blocks still need grads
        model.train()
        optimizer = torch.optim.AdamW(_param_groups(model, self.args.weight_decay), lr=self.args.learning_rate)
        self.model, self.optimizer = self.accelerator.prepare(model, optimizer)
        self.resume()
        if self.tracking:
            settings = {k: v for k, v in asdict(self.args).items() if isinstance(v, (int, float, str, bool))}
            self.accelerator.init_trackers("toolformer", config=settings,
                                           init_kwargs={"wandb": {"dir": str(self.output_dir / LOGS)}})

    def resume(self) -> None:
        """Continue from the last complete checkpoint: weights, optimizer, RNG, step, history, best."""
        found = checkpoint_dirs(self.output_dir)
        if found:
            self.accelerator.load_state(str(found[-1]))
            saved = json.loads((found[-1] / CHECKPOINT_STATE).read_text())
            self.step, self.history, self.best = saved["step"], saved["log_history"], saved["best"]
            if self.main:
                print(f"train: resuming from {found[-1]} (step {self.step})")
            stops.keep(f"the checkpoint of step {self.step} in {found[-1]}")
        self.resumed_from = self.step

    # -- the loop ----------------------------------------------------------------
    def run(self, resume: bool = True, run_key: str | None = None) -> dict:
        self.setup(resume, run_key)
        t0 = time.perf_counter()
        with tqdm(total=self.args.max_steps, initial=self.step, desc="train", unit="step", disable=not self.main,
                  dynamic_ncols=True) as bar:
            while self.step < self.args.max_steps:
                with stops.deferred():  # a signal stops training after this step (and its checkpoint)
                    lr, grad_norm = self.optimizer_step()
                    bar.update(1)
                    self.after_step(lr, grad_norm, bar)
        return self.finish(t0)

    def optimizer_step(self) -> tuple[float, torch.Tensor | None]:
        """One optimizer step over ``accum`` micro-batches; returns (lr, gradient norm or None)."""
        args, acc = self.args, self.accelerator
        lr = args.learning_rate * lr_factor(self.step, args)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        step_loss = torch.zeros((), device=acc.device)
        for k in range(self.accum):
            # This micro-batch's place in the stream: step, accumulation round, process.
            first = ((self.step * self.accum + k) * self.world + acc.process_index) * args.micro_batch_size
            rows = self.train[self.order.take(first, args.micro_batch_size)]  # (B, T)
            batch = {name: v.to(acc.device) for name, v in batch_inputs(rows, self.pad_id).items()}
            self.local_tokens += int(batch["attention_mask"].sum())
            sync = acc.no_sync(self.model) if k < self.accum - 1 else nullcontext()
            with sync:
                loss = self.model(**batch, use_cache=False).loss / self.accum
                acc.backward(loss)
            step_loss += loss.detach()
        grad_norm = acc.clip_grad_norm_(self.model.parameters(), args.grad_clip) if args.grad_clip > 0 else None
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.step += 1
        self.loss_sum += step_loss
        self.loss_count += 1
        return lr, grad_norm

    def after_step(self, lr: float, grad_norm: torch.Tensor | None, bar) -> None:
        """Log, evaluate, checkpoint and record the step; stop here if a signal asked to."""
        args, step = self.args, self.step
        if step % args.log_every == 0 or step == args.max_steps:
            self.log(lr, grad_norm, bar)
        if self.has_dev and ((args.eval_every and step % args.eval_every == 0) or step == args.max_steps):
            self.evaluate()
        stop = _stop_requested(self.accelerator)
        if args.save_every and (stop or step % args.save_every == 0 or step == args.max_steps):
            self.checkpoint()
        self.write_state()
        if self.on_step is not None:
            self.on_step(step, self.history[-1] if self.history else {})
        if stop:
            if not args.save_every:
                stops.keep(f"the model of the best step so far in {self.output_dir} (no checkpoint: "
                           "save_every is 0, a rerun starts over)")
            raise stops.Stopped(stops.pending() or signal.SIGTERM)

    def log(self, lr: float, grad_norm: torch.Tensor | None, bar) -> None:
        """The mean training loss since the last record, into the history."""
        mean = (self.accelerator.reduce(self.loss_sum, "mean") / self.loss_count).item()
        self.last_loss = round(mean, 6)
        record = {"step": self.step, "loss": round(mean, 6), "learning_rate": lr,
                  "epoch": round(self.step * self.effective / len(self.train), 4)}
        if grad_norm is not None:
            record["grad_norm"] = round(float(grad_norm), 6)
        self.history.append(record)
        if self.tracking:
            t0, tokens0 = self.since_log
            now = time.perf_counter()
            speed = self.world * (self.local_tokens - tokens0) / max(now - t0, 1e-9)  # the processes run alike
            self.accelerator.log({f"train/{k}": v for k, v in record.items() if k != "step"}
                                 | {"train/tokens_per_s": speed}, step=self.step)
            self.since_log = (now, self.local_tokens)
        bar.set_postfix(loss=f"{mean:.4f}", lr=f"{lr:.2e}")
        self.loss_sum.zero_()
        self.loss_count = 0

    # -- evaluation ----------------------------------------------------------------
    def evaluate(self) -> None:
        """Dev perplexity; a new best model is saved into ``output_dir``."""
        assert self.dev is not None  # evaluated only with dev rows (has_dev)
        result = evaluate_perplexity(self.model, self.dev, self.args.micro_batch_size, self.accelerator, self.pad_id)
        self.history.append({"step": self.step, **result})
        if self.tracking:
            self.accelerator.log({f"dev/{k.removeprefix('dev_')}": v for k, v in result.items()}, step=self.step)
        best = self.best
        if best["dev_perplexity"] is None or result["dev_perplexity"] < best["dev_perplexity"]:
            best.update(dev_perplexity=result["dev_perplexity"], step=self.step)
            self.save_model()
        if self.main:
            tqdm.write(f"step {self.step}: dev perplexity {result['dev_perplexity']:.3f} "
                       f"(best {best['dev_perplexity']:.3f} at step {best['step']})")

    def save_model(self) -> None:
        from transformers.utils import logging as hf_logging

        bars = hf_logging.is_progress_bar_enabled()
        hf_logging.disable_progress_bar()  # its shard bars would break the training bar
        save_whole(self.accelerator, self.model, self.tokenizer, self.output_dir, save_dtype(self.args))
        if bars:
            hf_logging.enable_progress_bar()

    # -- checkpoints and state -----------------------------------------------------------
    def checkpoint(self) -> None:
        """A resumable checkpoint of this step; older ones beyond ``keep_checkpoints`` are deleted."""
        path = self.output_dir / CHECKPOINTS / f"step-{self.step:07d}"
        save_checkpoint(self.accelerator, path, {"step": self.step, "log_history": self.history, "best": self.best})
        if self.main:
            for old in checkpoint_dirs(self.output_dir)[: -max(1, self.args.keep_checkpoints)]:
                shutil.rmtree(old, ignore_errors=True)
        stops.keep(f"the checkpoint of step {self.step} in {path}")
        self.checkpoints_written += 1
        fault_point("finetune", self.checkpoints_written)

    def write_state(self) -> None:
        """``trainer_state.json``: the settings, the step, the best model and the log history."""
        if self.main:
            dev_rows = 0 if self.dev is None else len(self.dev)
            record = {"args": asdict(self.args), "max_steps": self.args.max_steps,
                      "effective_batch_size": self.effective, "train_rows": len(self.train), "dev_rows": dev_rows,
                      "seq_len": self.train.shape[1], "global_step": self.step, "best_step": self.best["step"],
                      "best_dev_perplexity": self.best["dev_perplexity"], "log_history": self.history}
            atomic_write_text(self.output_dir / TRAINER_STATE, json.dumps(record, indent=2) + "\n")

    # -- finish ----------------------------------------------------------------------
    def finish(self, t0: float) -> dict:
        """Save the model if no dev set chose one, write the state, return the metrics."""
        acc = self.accelerator
        if not self.has_dev or not (self.output_dir / "config.json").exists():
            self.save_model()  # no dev set: the last model; or nothing was saved yet (a finished run rerun)
        self.write_state()
        if self.tracking:
            acc.end_training()
        acc.wait_for_everyone()
        wall = time.perf_counter() - t0
        tokens = acc.reduce(torch.tensor(float(self.local_tokens), device=acc.device), "sum").item()
        last_loss = self.last_loss
        if last_loss is None:
            last_loss = next((r["loss"] for r in reversed(self.history) if "loss" in r), None)
        return {
            "steps": self.step,
            "resumed_from": self.resumed_from,
            "train_loss": last_loss,
            "best_dev_perplexity": self.best["dev_perplexity"],
            "best_step": self.best["step"],
            "effective_batch_size": self.effective,
            "processes": self.world,
            "wall_seconds": round(wall, 2),
            "tokens_per_second": round(tokens / wall, 1) if wall > 0 and tokens else 0.0,
        }


def train_causal_lm(model, train: torch.Tensor, dev: torch.Tensor | None, args: TrainArgs, output_dir: str | Path,
                    tokenizer=None, resume: bool = True, run_key: str | None = None,
                    on_step: Callable[[int, dict], None] | None = None) -> dict:
    """Train ``model`` on packed rows ``train`` (N, T); see the module docstring.

    ``dev`` (M, T) rows give the perplexity that picks the best model.
    ``resume=False`` deletes existing checkpoints first; ``run_key`` (e.g. a
    hash of the data and hyper-parameters) is stored with the checkpoints, and
    checkpoints written under another key are deleted rather than resumed.
    ``on_step(step, record)`` is called after every optimizer step (tests use
    it to interrupt a run). Returns steps, train_loss, best_dev_perplexity,
    best_step, wall_seconds, tokens_per_second and more.
    """
    return Trainer(model, train, dev, args, output_dir, tokenizer, on_step).run(resume, run_key)


def _stop_requested(accelerator) -> bool:
    """Whether a signal asked any process to stop: all processes agree, so they
    write the same checkpoint and stop at the same step."""
    asked = stops.pending() is not None
    if accelerator.num_processes == 1:
        return asked
    flag = torch.tensor(float(asked), device=accelerator.device)
    return accelerator.reduce(flag, "sum").item() > 0


