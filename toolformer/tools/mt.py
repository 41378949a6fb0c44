"""MT: translation into English with a Hugging Face seq2seq model (NLLB in the paper)."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from toolformer.tools.base import TEXT_PATTERN, Tool, ToolError, prepare_data


class MT(Tool):
    name = "MT"
    description = (
        "Translates a short text into English with a local sequence-to-sequence "
        "translation model (an NLLB model in the paper) and returns the translation."
    )
    input_description = "a short text in any language"
    example = "hola mundo"
    input_pattern = TEXT_PATTERN
    prompt = (
        "Your task is to add calls to a Machine Translation API to a piece of text. A "
        "call translates a phrase in another language into English. Write a call as "
        "\"[MT(text)]\". Examples:\n"
        "Input: He said \"hasta mañana\", which means see you tomorrow.\n"
        "Output: He said \"hasta mañana\", which means [MT(hasta mañana)] see you tomorrow.\n"
        "Input: The sign read \"Ausgang\", the exit.\n"
        "Output: The sign read \"Ausgang\", the [MT(Ausgang)] exit.\n"
        "Input: {text}\n"
        "Output:"
    )

    def __init__(self, model_path: str = "", target_lang: str = "eng_Latn", max_new_tokens: int = 64):
        self.model_path = model_path
        self.target_lang = target_lang
        self.max_new_tokens = max_new_tokens
        self._model: Any = None  # a transformers seq2seq model and its tokenizer, loaded on first use
        self._tokenizer: Any = None
        self._lock = threading.Lock()  # one generate at a time on a shared model

    def _load(self) -> None:
        if self._model is not None:
            return
        if not self.model_path:
            raise ToolError("no_model", "no translation model configured (set tools.mt_model)")
        path = Path(self.model_path)
        if not path.exists():
            raise ToolError("no_model", f"translation model folder {path} does not exist")
        from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

        self._tokenizer = AutoTokenizer.from_pretrained(str(path))
        self._model = AutoModelForSeq2SeqLM.from_pretrained(str(path)).eval()

    def prepare(self) -> None:
        def load() -> None:
            with self._lock:
                self._load()

        prepare_data(load)

    def run(self, tool_input: str, date: str | None = None) -> str:
        import torch

        text = tool_input.strip()
        if not text:
            raise ToolError("empty", "nothing to translate", "the text to translate, e.g. [MT(hola mundo)]")
        with self._lock:
            self._load()
            tok = self._tokenizer
            enc = tok(text, return_tensors="pt", truncation=True, max_length=256)
            enc.pop("token_type_ids", None)
            kwargs = {}
            lang_id = tok.convert_tokens_to_ids(self.target_lang) if self.target_lang else None
            if lang_id is not None and lang_id != tok.unk_token_id:
                kwargs["forced_bos_token_id"] = lang_id  # NLLB picks the output language this way
            with torch.no_grad():
                out = self._model.generate(**enc, max_new_tokens=self.max_new_tokens, do_sample=False, **kwargs)
            result = tok.decode(out[0], skip_special_tokens=True).strip()
        if not result:
            raise ToolError("empty_result", "the model produced no translation")
        return result
