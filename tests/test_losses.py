import pytest
import torch

from toolformer.lm.losses import add_weighted_losses, is_kept, loss_minus, loss_weights


def test_weights_are_the_papers():
    assert loss_weights(5) == pytest.approx([1 / 3, 4 / 15, 1 / 5, 2 / 15, 1 / 15])
    assert sum(loss_weights(5)) == pytest.approx(1.0)
    assert loss_weights(2) == pytest.approx([2 / 3, 1 / 3])


def test_weighted_losses_on_literals():
    # Request 0: log p −1..−5 at t = 0..4; request 1: −1 at every t, its targets interleaved with request 0's.
    owner = [0, 1, 0, 1, 0, 1, 0, 1, 0, 1]
    step = [0, 0, 1, 1, 2, 2, 3, 3, 4, 4]
    logp = torch.tensor([-1.0, -1.0, -2.0, -1.0, -3.0, -1.0, -4.0, -1.0, -5.0, -1.0], dtype=torch.float64)
    loss = torch.zeros(2, dtype=torch.float64)
    add_weighted_losses(loss, owner, step, logp, loss_weights(5))
    # 1/3*1 + 4/15*2 + 1/5*3 + 2/15*4 + 1/15*5 = (5 + 8 + 9 + 8 + 5) / 15 = 35/15
    assert loss.tolist() == pytest.approx([35 / 15, 1.0])
    # Near the end of a text only x_i and x_{i+1} exist: the same weights, fewer terms; sums add up.
    short = torch.zeros(2, dtype=torch.float64)
    add_weighted_losses(short, [0, 0], [0, 1], logp[[0, 2]], loss_weights(5))
    assert short.tolist() == pytest.approx([1 / 3 + 8 / 15, 0.0])
    add_weighted_losses(short, [1], [0], torch.tensor([-3.0], dtype=torch.float64), loss_weights(5))
    assert short.tolist() == pytest.approx([1 / 3 + 8 / 15, 1.0])


def test_loss_minus_is_the_min_and_criterion():
    assert loss_minus(1.69, 3.07) == 1.69
    assert loss_minus(2.0, 1.5) == 1.5  # the call without its result can be the better baseline
    assert is_kept(1.69, 0.13, 1.0) and not is_kept(1.69, 0.13, 1.6)
    assert is_kept(1.5, 1.0, 0.5)  # exactly tau_f is kept (≥)
