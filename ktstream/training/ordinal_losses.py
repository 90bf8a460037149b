"""Losses for ordered responses 0..K-1; each takes log_probs (N, K) and targets (N,) and returns a scalar.

Plain cross-entropy ignores the order of the categories: predicting 0 for a 3
costs the same as predicting 2. The ordinal losses here add that order back:
an expected-distance penalty, a differentiable quadratic weighted kappa, and
the CORAL loss on the cumulative events Y > k. Class weights counter the
skew of real ordinal data (most answers in the top category); compute them on
the training split only.

>>> lp = torch.log(torch.tensor([[0.7, 0.2, 0.1], [0.1, 0.3, 0.6]]))
>>> round(float(cross_entropy(lp, torch.tensor([0, 2]))), 4)
0.4338
>>> loss = make_loss({"ce": 1.0, "qwk": 0.5})
>>> bool(loss(lp, torch.tensor([0, 2])) > cross_entropy(lp, torch.tensor([0, 2])))
True
"""

from __future__ import annotations

from typing import Any, Callable

import torch
import torch.nn.functional as F

Loss = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def class_weights(targets: torch.Tensor, K: int, mode: str = "balanced") -> torch.Tensor:
    """(K,) weights n / (K n_k) ("balanced", as sklearn) or their square root ("sqrt_balanced").

    A category absent from ``targets`` gets weight 0 (nothing to reweight).
    """
    if mode not in ("balanced", "sqrt_balanced"):
        raise ValueError(f"mode must be 'balanced' or 'sqrt_balanced', got {mode!r}")
    counts = torch.bincount(targets.reshape(-1), minlength=K).double()
    w = torch.where(counts > 0, counts.sum() / (K * counts.clamp(min=1)), torch.zeros_like(counts))
    return (w.sqrt() if mode == "sqrt_balanced" else w).float()


def _check(log_probs: torch.Tensor, targets: torch.Tensor) -> None:
    assert log_probs.dim() == 2 and targets.shape == log_probs.shape[:1], \
        f"expected log_probs (N, K) and targets (N,), got {tuple(log_probs.shape)} and {tuple(targets.shape)}"


def cross_entropy(log_probs: torch.Tensor, targets: torch.Tensor, weights: torch.Tensor | None = None) -> torch.Tensor:
    _check(log_probs, targets)
    return F.nll_loss(log_probs, targets, weight=weights)


def weighted_ordinal(log_probs: torch.Tensor, targets: torch.Tensor, weights: torch.Tensor | None = None,
                     penalty: float = 0.5) -> torch.Tensor:
    """Class-weighted cross-entropy plus ``penalty`` x the expected distance E_p |k - y|, same weights.

    Weighted means divide by the sum of the weights, as F.nll_loss does.
    """
    _check(log_probs, targets)
    K = log_probs.shape[1]
    w = weights[targets] if weights is not None else torch.ones_like(log_probs[:, 0])  # (N,)
    dist = (torch.arange(K, device=targets.device).view(1, K) - targets.view(-1, 1)).abs().to(log_probs.dtype)
    per = -log_probs.gather(1, targets.view(-1, 1)).squeeze(1) + penalty * (log_probs.exp() * dist).sum(1)
    return (w * per).sum() / w.sum().clamp(min=1e-12)


def focal(log_probs: torch.Tensor, targets: torch.Tensor, gamma: float = 2.0,
          weights: torch.Tensor | None = None) -> torch.Tensor:
    """Focal loss (Lin et al. 2017): -(1 - p_y)^gamma log p_y; gamma = 0 is cross-entropy."""
    _check(log_probs, targets)
    lp = log_probs.gather(1, targets.view(-1, 1)).squeeze(1)
    per = -((1.0 - lp.exp()).clamp(min=0.0) ** gamma) * lp
    w = weights[targets] if weights is not None else torch.ones_like(per)
    return (w * per).sum() / w.sum().clamp(min=1e-12)


def qwk_loss(log_probs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """1 - soft quadratic weighted kappa: the confusion matrix filled with predicted probabilities.

    With one-hot predictions this is exactly 1 - sklearn's cohen_kappa_score(weights="quadratic").
    """
    _check(log_probs, targets)
    K = log_probs.shape[1]
    probs = log_probs.exp()  # (N, K)
    onehot = F.one_hot(targets, K).to(probs.dtype)  # (N, K)
    observed = onehot.t() @ probs  # (K, K): rows true, columns predicted
    expected = onehot.sum(0).view(K, 1) * probs.sum(0).view(1, K) / len(targets)
    k = torch.arange(K, dtype=probs.dtype, device=probs.device)
    w = (k.view(K, 1) - k.view(1, K)) ** 2 / (K - 1) ** 2
    return (w * observed).sum() / (w * expected).sum().clamp(min=1e-12)


def coral_loss(log_probs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """CORAL loss (Cao et al. 2020): sum over k of the binary cross-entropy of P(Y > k) vs [y > k].

    Computed from any head's category log-probs: log P(Y <= k) is a log-cumsum-exp,
    log P(Y > k) the reversed one, so no probability is subtracted. Mean over N.
    """
    _check(log_probs, targets)
    K = log_probs.shape[1]
    le = torch.logcumsumexp(log_probs, dim=1)[:, :-1]  # (N, K-1): log P(Y <= k)
    gt = torch.logcumsumexp(log_probs.flip(1), dim=1).flip(1)[:, 1:]  # (N, K-1): log P(Y > k)
    above = (targets.view(-1, 1) > torch.arange(K - 1, device=targets.device).view(1, -1)).to(log_probs.dtype)
    return -(above * gt + (1 - above) * le).sum(1).mean()


LOSSES: dict[str, Callable[..., torch.Tensor]] = {
    "ce": cross_entropy, "weighted_ordinal": weighted_ordinal, "focal": focal, "qwk": qwk_loss, "coral": coral_loss}


def make_loss(config: dict[str, Any], weights: torch.Tensor | None = None) -> Loss:
    """Weighted sum of named losses: {"ce": 1.0, "focal": {"weight": 0.5, "gamma": 2}, ...}.

    A value is the term's weight, or a dict with "weight" and the term's keyword
    arguments. ``weights`` (K,) class weights go to the terms that take them.
    """
    unknown = set(config) - set(LOSSES)
    if unknown or not config:
        raise ValueError(f"loss config needs terms from {sorted(LOSSES)}, got {sorted(config)}")
    terms = []
    for name, spec in config.items():
        spec = dict(spec) if isinstance(spec, dict) else {"weight": float(spec)}
        scale = float(spec.pop("weight", 1.0))
        if weights is not None and name in ("ce", "weighted_ordinal", "focal"):
            spec.setdefault("weights", weights)
        terms.append((scale, LOSSES[name], spec))

    def loss(log_probs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return sum(scale * fn(log_probs, targets, **kw) for scale, fn, kw in terms)

    return loss
