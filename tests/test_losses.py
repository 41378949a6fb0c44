import pytest
import torch

from toolformer.lm.losses import is_kept, loss_minus, loss_weights, weighted_loss


def test_weights_are_the_papers():
    assert loss_weights(5) == pytest.approx([1 / 3, 4 / 15, 1 / 5, 2 / 15, 1 / 15])
    assert sum(loss_weights(5)) == pytest.approx(1.0)
    assert loss_weights(2) == pytest.approx([2 / 3, 1 / 3])


def test_weighted_loss_on_literals():
    logp = torch.tensor([[-1.0, -2.0, -3.0, -4.0, -5.0], [-1.0, -1.0, -1.0, -1.0, -1.0]])
    w = torch.tensor(loss_weights(5))
    got = weighted_loss(logp, w)
    # 1/3*1 + 4/15*2 + 1/5*3 + 2/15*4 + 1/15*5 = (5 + 8 + 9 + 8 + 5) / 15 = 35/15
    assert got.tolist() == pytest.approx([35 / 15, 1.0])
    mask = torch.tensor([[1, 1, 0, 0, 0], [1, 1, 1, 1, 1]])
    assert weighted_loss(logp, w, mask).tolist()[0] == pytest.approx(1 / 3 + 8 / 15)


def test_loss_minus_is_the_min_and_criterion():
    assert loss_minus(1.69, 3.07) == 1.69
    assert loss_minus(2.0, 1.5) == 1.5  # the call without its result can be the better baseline
    assert is_kept(1.69, 0.13, 1.0) and not is_kept(1.69, 0.13, 1.6)
    assert is_kept(1.5, 1.0, 0.5)  # exactly tau_f is kept (≥)
