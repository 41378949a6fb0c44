"""A straightforward reference of the filter loss: one sequence at a time, the
whole sequence through the model, no padding, no sharing. The batched filter
must agree with it."""

import math

import torch


def reference_weights(horizon=5):
    raw = [max(0.0, 1 - 0.2 * t * 5 / horizon) for t in range(horizon)]
    return [w / sum(raw) for w in raw]


def reference_loss(model, prefix_ids, text_ids, position, horizon=5, window=None):
    """L_i(z) = -sum_j w_{j-i} log p(x_j | z, x_<j) for j = i .. i+horizon-1."""
    targets = list(range(position, min(position + horizon, len(text_ids))))
    seq = list(prefix_ids) + list(text_ids[: targets[-1] + 1])
    cut = 0
    if window is not None and len(seq) > window:
        cut = len(seq) - window  # drop text tokens on the left, keep the prefix
        seq = list(prefix_ids) + list(text_ids[cut : targets[-1] + 1])
    with torch.no_grad():
        logits = model(torch.tensor([seq])).logits[0].double()
    w = reference_weights(horizon)
    total = 0.0
    for t, j in enumerate(targets):
        at = len(prefix_ids) + (j - cut)  # index of x_j in seq
        assert at >= 1, "x_0 after an empty prefix has no logits to be predicted from"
        logp = torch.log_softmax(logits[at - 1], dim=-1)[text_ids[j]].item()
        total -= w[t] * logp
    assert math.isfinite(total)
    return total
