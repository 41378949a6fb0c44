"""The filter's loss math (pure): weights, the weighted sum of L_i, L⁻ and the criterion.

L_i(z) = − Σ_{j ≥ i} w_{j−i} · log p_M(x_j | z, x_1..x_{j−1}) with
w̃_t = max(0, 1 − t / horizon) normalised to sum 1 (for horizon 5:
1/3, 4/15, 1/5, 2/15, 1/15). Near the end of a text fewer than ``horizon``
tokens follow x_i; the sum then runs over the tokens that exist, with the same
weights, for every variant alike.
"""

from __future__ import annotations

import torch


def loss_weights(horizon: int = 5) -> list[float]:
    """Normalised weights w_0..w_{horizon−1}."""
    raw = [max(0.0, 1.0 - t / horizon) for t in range(horizon)]
    total = sum(raw)
    return [w / total for w in raw]


def add_weighted_losses(loss: torch.Tensor, owner: list[int], step: list[int],
                        target_logprobs: torch.Tensor, weights: list[float]) -> None:
    """Add each target's term of L_i to its request's loss: ``loss[owner[n]] += −w_{step[n]} · log p``.

    loss: (R,) float64, one sum per request; owner: the request of each target; step: t = j − i, the
    target's distance from x_i (its weight w_t); target_logprobs: (N,) float64 log p_M of each target, in
    the order of ``owner`` and ``step``. Accumulated in float64, target by target (``index_add_``).
    """
    w = torch.tensor([weights[t] for t in step], dtype=torch.float64)
    loss.index_add_(0, torch.tensor(owner), -w * target_logprobs)


def loss_minus(loss_none: float, loss_no_result: float) -> float:
    """L⁻ = min(L(ε), L(e(c, ε))): no call at all, or the call without its result."""
    return min(loss_none, loss_no_result)


def is_kept(loss_minus_value: float, loss_plus_value: float, tau_filter: float) -> bool:
    """Keep the call if L⁻ − L⁺ ≥ tau_f."""
    return loss_minus_value - loss_plus_value >= tau_filter
