"""The filter's loss math (pure): weights, weighted loss, L⁻, L⁺ and the criterion.

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


def weighted_loss(target_logprobs: torch.Tensor, weights: torch.Tensor,
                  mask: torch.Tensor | None = None) -> torch.Tensor:
    """L_i from log p of the targets x_i..x_{i+h−1}.

    target_logprobs: (B, H) log-probabilities of each target token; weights: (H,);
    mask: (B, H) 1 where the target exists. Returns (B,).
    """
    w = weights.to(target_logprobs.dtype).unsqueeze(0)  # (1, H)
    if mask is not None:
        w = w * mask.to(target_logprobs.dtype)
    return -(w * target_logprobs).sum(dim=-1)


def loss_minus(loss_none: float, loss_no_result: float) -> float:
    """L⁻ = min(L(ε), L(e(c, ε))): no call at all, or the call without its result."""
    return min(loss_none, loss_no_result)


def is_kept(loss_minus_value: float, loss_plus_value: float, tau_filter: float) -> bool:
    """Keep the call if L⁻ − L⁺ ≥ tau_f."""
    return loss_minus_value - loss_plus_value >= tau_filter
