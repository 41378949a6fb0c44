"""The ``toolformer`` model of lm-evaluation-harness: a tuned model folder that calls its tools.

Model arguments (``--model_args key=value,...``; lm-eval turns ``10`` and ``true`` into numbers and
booleans, both spellings are taken):

=====================  =========================================================================
``pretrained``         the model folder (its ``toolformer.json``: tools, tool data, call style and
                       decoding rule, as :meth:`ToolformerModel.from_pretrained` reads it), or a
                       loaded :class:`~toolformer.api.ToolformerModel` from Python
``tools``              ``on`` (default: the folder's tools) or ``off`` (p(call-start) = 0: the
                       evaluate stage's ``toolformer_disabled`` row)
``top_k``              a call starts when the call-start token is among the top k (the folder's rule)
``max_calls``          calls per output at most (the folder's rule)
``constrained``        well-formed calls only (:mod:`toolformer.lm.constrain`; the folder's rule)
``device``, ``dtype``  ``auto``, ``cpu``, ``cuda``, ``cuda:N``; ``auto``, ``float32``, ``bfloat16``,
                       ``float16``
``batch_size``         prompts decoded (sequences scored) together (default: the config's
                       ``evaluate.batch_size``; ``auto`` means that default too)
``max_gen_toks``       tokens generated when a task does not say (the folder's ``max_new_tokens``)
``trust_folder_tools`` trust the folder's record with its MCP servers, side effects and data outside
                       it (see :mod:`toolformer.lm.foldertrust`)
``config``             a YAML config over the folder's record (as ``from_pretrained(config=...)``)
=====================  =========================================================================

``generate_until`` decodes as the evaluate stage does
(:func:`toolformer.lm.generate.generate_with_tools`, greedy unless a task asks to sample): the prompts
of one task and one set of generation arguments, shortest first, in batches of ``batch_size``, each
item's ``date`` (if its document has one) given to the Calendar tool. The output keeps the calls
(``[Calculator(4 * 5) → 20] 20``), so a task's metric removes them
(:func:`toolformer.integrations.lmeval_tasks.process_results`) and logged samples show them. A task's stop
sequences (``until``) cut the output at their first occurrence outside a call, after decoding.

``loglikelihood`` and ``loglikelihood_rolling`` score text with tools disabled: the call-start tokens
are taken out of every next-token distribution and the rest renormalised (a target that is itself a
call-start token keeps its plain log-likelihood), as the evaluate stage's perplexity of a row without
tools. Sequences start with the tokenizer's BOS (else end-of-text), and a context longer than the
model's window is cut from the left.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import torch
from lm_eval import utils as lm_utils
from lm_eval.api.model import LM
from lm_eval.models.utils import normalize_gen_kwargs
from tqdm import tqdm

from toolformer.api import ToolformerModel
from toolformer.lm.modeling import document_start, model_window, set_threads
from toolformer.lm.textpos import marker_token_ids
from toolformer.tools.calls import CallStyle, parse_calls

MODEL_ARGS = ("pretrained", "tools", "top_k", "max_calls", "constrained", "device", "dtype", "batch_size",
              "max_batch_size", "max_gen_toks", "trust_folder_tools", "config")
SAMPLING_KEYS = {"until", "max_gen_toks", "do_sample", "temperature"}
NO_CHAT = ("--apply_chat_template: the toolformer model continues plain text with its calls inline, as it was "
           "tuned; it has no chat turns to apply a template to (leave the option out)")


def flag(key: str, value: Any) -> bool:
    """A model argument that is on or off."""
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("on", "true", "yes", "1"):
        return True
    if text in ("off", "false", "no", "0"):
        return False
    raise ValueError(f"lm-eval model_args: {key}={value!r}: use on or off")


def count(key: str, value: Any, minimum: int = 0) -> int:
    """A model argument that is a whole number of at least ``minimum``."""
    try:
        if isinstance(value, bool) or float(value) != int(float(value)):
            raise ValueError
        n = int(float(value))
    except (TypeError, ValueError):
        raise ValueError(f"lm-eval model_args: {key}={value!r}: not a whole number") from None
    if n < minimum:
        raise ValueError(f"lm-eval model_args: {key}={value!r}: at least {minimum}")
    return n


def cut_at_stop(text: str, until: list[str], style: CallStyle) -> str:
    """``text`` up to the first of the stop sequences ``until`` that is not inside a call."""
    spans = [(pc.start, pc.end) for pc in parse_calls(text, style)]
    end = len(text)
    for stop in until:
        i = text.find(stop) if stop else -1
        while i != -1 and any(s <= i < e for s, e in spans):
            i = text.find(stop, i + 1)
        if i != -1:
            end = min(end, i)
    return text[:end]


class ToolformerLM(LM):
    """A tuned model folder as an lm-eval model (see the module doc for the arguments)."""

    def __init__(self, pretrained: str | ToolformerModel, tools: Any = "on", top_k: Any = None,
                 max_calls: Any = None, constrained: Any = None, device: str | None = None,
                 dtype: str | None = None, batch_size: Any = None, max_batch_size: Any = None,
                 max_gen_toks: Any = None, trust_folder_tools: Any = False, config: str | None = None,
                 **unknown: Any):
        super().__init__()
        if unknown:
            raise ValueError(f"lm-eval model_args: unknown {', '.join(sorted(unknown))}; the toolformer model "
                             f"takes {', '.join(MODEL_ARGS)}")
        self.tools_on = flag("tools", tools)
        if isinstance(pretrained, ToolformerModel):
            self.tf = pretrained
        else:
            if not pretrained:
                raise ValueError("lm-eval model_args: pretrained=DIR (a tuned model folder) is required")
            self.tf = ToolformerModel.from_pretrained(
                str(pretrained), device=device, dtype=dtype, config=config, tools=None if self.tools_on else [],
                trust_folder_tools=flag("trust_folder_tools", trust_folder_tools))
        ev = self.tf.config.evaluate
        self.top_k = ev.top_k_trigger if top_k is None else count("top_k", top_k)
        self.max_calls = ev.max_calls if max_calls is None else count("max_calls", max_calls)
        self.constrained = ev.constrained if constrained is None else flag("constrained", constrained)
        self.max_gen_toks = ev.max_new_tokens if max_gen_toks is None else count("max_gen_toks", max_gen_toks, 1)
        auto = batch_size is None or str(batch_size).startswith("auto")
        self.batch_size = ev.batch_size if auto else count("batch_size", batch_size, 1)
        self.model, self.tokenizer = self.tf.model, self.tf.tokenizer
        self._device = next(self.model.parameters()).device
        set_threads(self.tf.config.model.threads)  # as the evaluate stage: the cores, following the load
        self.window = model_window(self.model, self.tf.config.model)
        self.start_ids = marker_token_ids(self.tokenizer, self.tf.style.start)
        self._ignored: set[str] = set()

    @classmethod
    def create_from_arg_string(cls, arg_string: str, additional_config: dict | None = None) -> ToolformerLM:
        """lm-eval's ``--model_args`` and its ``--batch_size`` and ``--device``, which it always passes (1 and
        ``cuda:0`` by default): the same key in ``--model_args`` goes over them, and a CUDA device on a machine
        without CUDA is replaced by the folder's own device setting (``auto``: the CPU), as lm-eval's ``hf``
        model does."""
        return cls.create_from_arg_obj(lm_utils.simple_parse_args_string(arg_string), additional_config)

    @classmethod
    def create_from_arg_obj(cls, arg_dict: dict, additional_config: dict | None = None) -> ToolformerLM:
        extra = {k: v for k, v in (additional_config or {}).items() if v is not None}
        if str(extra.get("device", "")).startswith("cuda") and not torch.cuda.is_available():
            warnings.warn(f"toolformer model: --device {extra.pop('device')} but CUDA is not available; using "
                          "the model folder's device setting", stacklevel=2)
        return cls(**{**extra, **arg_dict})

    @property
    def tokenizer_name(self) -> str:
        return self.tf.folder

    def chat_template(self, chat_template: bool | str = False) -> str | None:
        """No chat template: ``--apply_chat_template`` is refused (:data:`NO_CHAT`)."""
        if chat_template:
            raise ValueError(NO_CHAT)
        return ""

    def apply_chat_template(self, chat_history: list[dict[str, str]], add_generation_prompt: bool = True) -> str:
        raise ValueError(NO_CHAT)

    def get_model_info(self) -> dict:
        """What lm-eval records of the model in its results' ``config``."""
        return {"toolformer": {"folder": str(Path(self.tf.folder)), "tools": self.tf.tools if self.tools_on else [],
                               "call_style": self.tf.style.name, "top_k_trigger": self.top_k,
                               "max_calls": self.max_calls, "constrained": self.constrained,
                               "max_gen_toks": self.max_gen_toks, "batch_size": self.batch_size}}

    # -- generation ------------------------------------------------------------------------------------------
    def _settings(self, gen_kwargs: dict) -> dict:
        kw = dict(normalize_gen_kwargs(dict(gen_kwargs or {}), self.max_gen_toks))
        ignored = sorted(set(kw) - SAMPLING_KEYS - self._ignored)
        if ignored:
            self._ignored.update(ignored)
            warnings.warn(f"toolformer model: generation arguments {', '.join(ignored)} are not used", stacklevel=3)
        return {"until": [s for s in kw["until"] if isinstance(s, str)], "max_new_tokens": int(kw["max_gen_toks"]),
                "do_sample": bool(kw.get("do_sample")), "temperature": float(kw.get("temperature") or 1.0)}

    def generate_until(self, requests, disable_tqdm: bool = False) -> list[str]:
        """Each request's continuation, calling tools (see the module doc)."""
        groups: dict[str, list[int]] = {}
        for i, req in enumerate(requests):
            key = json.dumps([getattr(req, "task_name", None), req.args[1]], sort_keys=True, default=str)
            groups.setdefault(key, []).append(i)
        out = [""] * len(requests)
        bar = tqdm(total=len(requests), desc="toolformer generate_until", disable=disable_tqdm)
        for idx in groups.values():
            settings = self._settings(requests[idx[0]].args[1])
            until = settings.pop("until")
            order = sorted(idx, key=lambda i: len(requests[i].args[0]))
            for s in range(0, len(order), self.batch_size):
                chunk = order[s : s + self.batch_size]
                gens = self.tf.generate(
                    [requests[i].args[0] for i in chunk], top_k_trigger=self.top_k, max_calls=self.max_calls,
                    disabled=not self.tools_on, dates=[_date(requests[i]) for i in chunk],
                    batch_size=self.batch_size, constrained=self.constrained, **settings)
                assert isinstance(gens, list)  # a list of prompts in, a list out
                for i, g in zip(chunk, gens):
                    out[i] = cut_at_stop(g.text, until, self.tf.style)
                    self.cache_hook.add_partial("generate_until", requests[i].args, out[i])
                bar.update(len(chunk))
        bar.close()
        return out

    # -- scoring ---------------------------------------------------------------------------------------------
    def _prefix(self) -> list[int]:
        return document_start(self.tokenizer)

    def _encode_pair(self, context: str, continuation: str) -> tuple[list[int], list[int]]:
        """(context ids after the BOS, continuation ids), split where the context's tokens end (spaces at the
        end of the context go with the continuation, as lm-eval's own models do)."""
        spaces = len(context) - len(context.rstrip())
        if spaces:
            context, continuation = context[:-spaces], context[-spaces:] + continuation
        enc = self.tokenizer.encode
        ctx = enc(context, add_special_tokens=False) if context else []
        whole = enc(context + continuation, add_special_tokens=False)
        return self._prefix() + ctx, whole[len(ctx):]

    def loglikelihood(self, requests, disable_tqdm: bool = False) -> list[tuple[float, bool]]:
        """(log p(continuation | context), whether greedy decoding writes it) per request, tools disabled."""
        pairs = [self._encode_pair(*req.args) for req in requests]
        out = self.score_pairs(pairs, disable_tqdm)
        for req, res in zip(requests, out):
            self.cache_hook.add_partial("loglikelihood", req.args, res)
        return out

    def loglikelihood_rolling(self, requests, disable_tqdm: bool = False) -> list[float]:
        """log p(text) per request, in windows of the model's context (lm-eval's rolling windows), tools
        disabled."""
        prefix = self._prefix()
        if not prefix:
            raise ValueError("loglikelihood_rolling: the tokenizer has neither a BOS nor an end-of-text token")
        windows, owner = [], []
        for n, req in enumerate(requests):
            ids = self.tokenizer.encode(req.args[0], add_special_tokens=False)
            for pair in lm_utils.get_rolling_token_windows(ids, prefix[0], self.window, 1):
                windows.append(lm_utils.make_disjoint_window(pair))
                owner.append(n)
        totals = [0.0] * len(requests)
        for n, (logp, _greedy) in zip(owner, self.score_pairs(windows, disable_tqdm)):
            totals[n] += logp
        for req, total in zip(requests, totals):
            self.cache_hook.add_partial("loglikelihood_rolling", req.args, total)
        return totals

    @torch.no_grad()
    def score_pairs(self, pairs: list[tuple[list[int], list[int]]],
                    disable_tqdm: bool = True) -> list[tuple[float, bool]]:
        """(log-likelihood, greedy) of each continuation given its context (token ids), with the call-start
        tokens taken out of every distribution; batched, longest first; a context is cut to the window."""
        for ctx, cont in pairs:
            if not cont or len(cont) > self.window:
                raise ValueError(f"loglikelihood: a continuation of {len(cont)} tokens (1 to the model's window of "
                                 f"{self.window})")
            if not ctx:
                raise ValueError("loglikelihood: no context token (the tokenizer has no BOS or end-of-text)")
        order = sorted(range(len(pairs)), key=lambda i: -len(pairs[i][0]) - len(pairs[i][1]))
        out: list[tuple[float, bool]] = [(0.0, False)] * len(pairs)
        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        bar = tqdm(total=len(pairs), desc="toolformer loglikelihood", disable=disable_tqdm)
        for s in range(0, len(order), self.batch_size):
            chunk = order[s : s + self.batch_size]
            seqs = [(pairs[i][0] + pairs[i][1])[-(self.window + 1):][:-1] for i in chunk]
            width = max(len(x) for x in seqs)
            ids = torch.tensor([x + [pad] * (width - len(x)) for x in seqs], device=self._device)  # (B, T)
            mask = torch.tensor([[1] * len(x) + [0] * (width - len(x)) for x in seqs], device=self._device)  # (B, T)
            logits = self.model(input_ids=ids, attention_mask=mask, use_cache=False).logits  # (B, T, V)
            for b, i in enumerate(chunk):
                cont = pairs[i][1]
                end = len(seqs[b])
                out[i] = self._continuation(logits[b, end - len(cont) : end].float(), cont)  # (n, V)
            bar.update(len(chunk))
        bar.close()
        return out

    def _continuation(self, logits: torch.Tensor, targets: list[int]) -> tuple[float, bool]:
        """Summed log-probability of ``targets`` under ``logits`` (n, V) without the call-start tokens, and
        whether each target is the most likely token."""
        t = torch.tensor(targets, device=logits.device)  # (n,)
        starts = torch.tensor(self.start_ids, device=logits.device, dtype=torch.long)  # (S,)
        masked = logits.clone()
        masked[:, starts] = float("-inf")
        is_start = torch.isin(t, starts)  # (n,)
        chosen = logits.gather(-1, t[:, None]).squeeze(-1)  # (n,)
        logp = torch.where(is_start, chosen - logits.logsumexp(-1), chosen - masked.logsumexp(-1))  # (n,)
        greedy = torch.where(is_start, logits.argmax(-1) == t, masked.argmax(-1) == t)  # (n,)
        return float(logp.double().sum()), bool(greedy.all())


def _date(request) -> str | None:
    """The date of a request's document (the Calendar tool's), if it has one."""
    doc = getattr(request, "doc", None)
    date = doc.get("date") if isinstance(doc, dict) else None
    return date if isinstance(date, str) and date else None
