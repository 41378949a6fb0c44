"""The training loop: packing, schedule, best model, resumable checkpoints."""

import json
import math

import pytest
import torch
from helpers import approx_floats
from transformers import AutoModelForCausalLM

from toolformer.lm.checkpoints import checkpoint_dirs
from toolformer.lm.rows import IGNORE_INDEX, batch_inputs, pack_sequences
from toolformer.lm.trainargs import TrainArgs, lr_factor
from toolformer.lm.training import train_causal_lm

TEXTS = [f"The town of Vell has {i} people and [Calculator({i} * 3) → {i * 3}] {i * 3} cows." for i in range(40)]


@pytest.fixture(scope="module")
def rows(tok):
    return pack_sequences(tok, TEXTS, 48)


def args(**kw):
    base = dict(learning_rate=3e-3, warmup_ratio=0.25, batch_size=4, micro_batch_size=2, max_steps=6,
                eval_every=3, save_every=2, log_every=1, keep_checkpoints=2)
    return TrainArgs(**{**base, **kw})


def test_pack_sequences_bos_and_padding(tok):
    texts = ["a 12 b", "Vell 3"]
    ids = [tok(t, add_special_tokens=False)["input_ids"] for t in texts]
    stream = [tok.bos_token_id, *ids[0], tok.bos_token_id, *ids[1]]
    assert len(stream) % 5, "the example must leave a partial last row"
    packed = pack_sequences(tok, texts, 5)
    assert packed.shape == (math.ceil(len(stream) / 5), 5) and packed.dtype == torch.long
    flat = packed.flatten().tolist()
    assert flat[: len(stream)] == stream and flat[len(stream):] == [IGNORE_INDEX] * (len(flat) - len(stream))


def test_labels_ignore_padding(tiny_model_dir, tok):
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir).eval()
    packed = pack_sequences(tok, ["Lake Orun lies near Vell. It has 4 islands."], 64)  # one partial row
    n_real = int((packed[0] != IGNORE_INDEX).sum())
    assert packed.shape == (1, 64) and n_real < 64
    inputs = batch_inputs(packed, pad_id=tok.pad_token_id)
    assert inputs["attention_mask"][0].tolist() == [1] * n_real + [0] * (64 - n_real)
    assert (inputs["input_ids"] >= 0).all() and (inputs["labels"][0, n_real:] == IGNORE_INDEX).all()
    with torch.no_grad():
        padded = model(**inputs).loss
        real = packed[:, :n_real]
        unpadded = model(input_ids=real, labels=real).loss
    torch.testing.assert_close(padded, unpadded)  # float32's default tolerance: rtol 1.3e-6, atol 1e-5


def test_lr_schedule():
    a = TrainArgs(warmup_ratio=0.2, max_steps=10, learning_rate=1.0)
    assert [round(lr_factor(s, a), 4) for s in range(10)] == [0.5, 1.0, 1.0, 0.875, 0.75, 0.625, 0.5, 0.375, 0.25,
                                                              0.125]
    c = TrainArgs(warmup_ratio=0.0, max_steps=4, schedule="cosine")
    assert [round(lr_factor(s, c), 4) for s in range(4)] == [1.0, 0.8536, 0.5, 0.1464]
    with pytest.raises(ValueError, match="schedule"):
        TrainArgs(schedule="step").validate()


def loss_steps(state):
    return [h["step"] for h in state["log_history"] if "loss" in h]


@pytest.mark.slow
def test_interrupted_run_resumes_to_the_same_weights(tiny_model_dir, tok, rows, tmp_path):
    """Stopped after step 3 and resumed from step 2's checkpoint: the weights, losses and dev perplexities of a run
    straight through, to float tolerance (the same shapes in one process agree bit for bit on a machine; the
    tolerance leaves room for a thread count or CPU kernel that sums in another order)."""
    train, dev = rows[:-2], rows[-2:]
    straight = train_causal_lm(AutoModelForCausalLM.from_pretrained(tiny_model_dir), train, dev, args(),
                               tmp_path / "a", tokenizer=tok)

    class Interrupt(Exception):
        pass

    def stop_at_3(step, record):
        if step == 3:
            raise Interrupt

    with pytest.raises(Interrupt):
        train_causal_lm(AutoModelForCausalLM.from_pretrained(tiny_model_dir), train, dev, args(), tmp_path / "b",
                        tokenizer=tok, on_step=stop_at_3)
    assert [p.name for p in checkpoint_dirs(tmp_path / "b")] == ["step-0000002"]
    partial = tmp_path / "b/checkpoints/step-0000003"  # as if killed while writing it
    partial.mkdir()
    (partial / "optimizer.bin").write_bytes(b"")
    resumed = train_causal_lm(AutoModelForCausalLM.from_pretrained(tiny_model_dir), train, dev, args(),
                              tmp_path / "b", tokenizer=tok)
    assert resumed["resumed_from"] == 2 and resumed["steps"] == straight["steps"] == 6
    assert not partial.exists()
    assert resumed["best_dev_perplexity"] == pytest.approx(straight["best_dev_perplexity"], rel=1e-5)

    a = AutoModelForCausalLM.from_pretrained(tmp_path / "a")
    b = AutoModelForCausalLM.from_pretrained(tmp_path / "b")
    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    for (name, pa), pb in zip(a.named_parameters(), b.parameters()):
        torch.testing.assert_close(pa, pb, msg=name)  # float32's default tolerance: rtol 1.3e-6, atol 1e-5
    assert any(not torch.equal(pa, p0) for pa, p0 in zip(a.parameters(), base.parameters()))

    sa = json.loads((tmp_path / "a/trainer_state.json").read_text())
    sb = json.loads((tmp_path / "b/trainer_state.json").read_text())
    assert sb["global_step"] == 6 and loss_steps(sb) == [1, 2, 3, 4, 5, 6]
    assert sb["log_history"] == approx_floats(sa["log_history"], rel=1e-5)
    evals = [h for h in sb["log_history"] if "dev_perplexity" in h]
    assert [h["step"] for h in evals] == [3, 6]
    best = min(evals, key=lambda h: h["dev_perplexity"])
    assert (sb["best_step"], sb["best_dev_perplexity"]) == (best["step"], best["dev_perplexity"])  # one file: a copy
    # keep_checkpoints=2: steps 4 and 6 are left.
    assert [p.name for p in checkpoint_dirs(tmp_path / "b")] == ["step-0000004", "step-0000006"]


@pytest.mark.slow
def test_more_steps_continue_without_dev(tiny_model_dir, tok, rows, tmp_path):
    out = tmp_path / "m"
    first = train_causal_lm(AutoModelForCausalLM.from_pretrained(tiny_model_dir), rows, None,
                            args(max_steps=4, save_every=3), out, tokenizer=tok, run_key="k")
    # A checkpoint every 3 steps and at the last one.
    assert first["best_dev_perplexity"] is None
    assert [p.name for p in checkpoint_dirs(out)] == ["step-0000003", "step-0000004"]
    after_4 = AutoModelForCausalLM.from_pretrained(out)  # no dev set: the last model is saved
    more = train_causal_lm(AutoModelForCausalLM.from_pretrained(tiny_model_dir), rows, None,
                           args(max_steps=6, save_every=3), out, tokenizer=tok, run_key="k")
    assert more["resumed_from"] == 4 and more["steps"] == 6
    state = json.loads((out / "trainer_state.json").read_text())
    assert state["global_step"] == 6 and loss_steps(state) == [1, 2, 3, 4, 5, 6]
    after_6 = AutoModelForCausalLM.from_pretrained(out)
    assert any(not torch.equal(p, q) for p, q in zip(after_4.parameters(), after_6.parameters()))

    # Another run key (other data or hyper-parameters): the checkpoints are not resumed.
    other = train_causal_lm(AutoModelForCausalLM.from_pretrained(tiny_model_dir), rows, None,
                            args(max_steps=2, save_every=0), out, tokenizer=tok, run_key="other")
    assert other["resumed_from"] == 0 and other["steps"] == 2


def test_gradient_accumulation_matches_one_big_batch(tiny_model_dir, rows, tmp_path):
    """4 full rows as 2 micro-batches of 2 give the loss and update of 1 batch of 4."""
    common = dict(max_steps=2, save_every=0, warmup_ratio=0.0, grad_clip=0.0, batch_size=4, learning_rate=1e-3)
    train = rows[:4]
    assert (train != IGNORE_INDEX).all()
    no_dropout = dict(resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    metrics = [train_causal_lm(AutoModelForCausalLM.from_pretrained(tiny_model_dir, **no_dropout), train, None,
                               args(micro_batch_size=micro, **common), tmp_path / str(micro))
               for micro in (2, 4)]
    assert metrics[0]["train_loss"] == pytest.approx(metrics[1]["train_loss"], abs=1e-5)
    a = AutoModelForCausalLM.from_pretrained(tmp_path / "2")
    b = AutoModelForCausalLM.from_pretrained(tmp_path / "4")
    for pa, pb in zip(a.parameters(), b.parameters()):
        torch.testing.assert_close(pa, pb, atol=1e-5, rtol=1e-4)


def test_row_nlls_takes_tokens_out_and_renormalises(tiny_model_dir, tok, rows):
    """The NLL with tokens taken out equals scoring under the softmax with those logits at -inf, but where the
    target is one of them (it keeps its plain log-likelihood); without tokens it is the plain NLL."""
    from toolformer.lm.rows import row_nll, row_nlls
    from toolformer.lm.textpos import marker_token_ids

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir).eval()
    pad = tok.pad_token_id
    part = rows[:3].clone()  # (3, 48)
    part[2, 40:] = IGNORE_INDEX
    out = marker_token_ids(tok, "[")
    with torch.no_grad():
        plain, counted = row_nll(model, part, pad, "cpu")
        nll, without, counted2 = row_nlls(model, part, pad, "cpu", out)
        logits = model(**{k: v for k, v in batch_inputs(part, pad).items() if k != "labels"}).logits[:, :-1].float()
    targets = batch_inputs(part, pad)["labels"][:, 1:]  # (3, 47)
    masked = logits.clone()
    masked[..., out] = float("-inf")
    want = torch.zeros(3, dtype=torch.float64)
    assert bool(torch.isin(targets, torch.tensor(out)).any())  # the rows hold call-start tokens as targets
    for b in range(3):
        for t in range(targets.shape[1]):
            y = int(targets[b, t])
            if y == IGNORE_INDEX:
                continue
            scores = logits[b, t] if y in out else masked[b, t]
            want[b] -= float(scores.log_softmax(-1)[y])
    # Exact where one code path runs the same forward on the same rows (row_nll is row_nlls without tokens).
    assert torch.allclose(without, want, atol=1e-4) and torch.equal(nll, plain) and torch.equal(counted, counted2)
    assert counted.tolist() == [47.0, 47.0, 39.0]
    assert bool((without < plain).all())  # taking mass out renormalises every other token upwards
    ce = torch.nn.functional.cross_entropy(logits.transpose(1, 2), targets, ignore_index=IGNORE_INDEX,
                                           reduction="none").double().sum(1)
    assert torch.allclose(plain, ce, atol=1e-4)
    assert torch.equal(row_nlls(model, part, pad, "cpu", [])[1], plain)
