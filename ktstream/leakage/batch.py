"""Batch independence: a learner's predictions do not depend on who shares its batch, or how many.

Each sampled learner is predicted inside two different batches (all sampled
learners in a shuffled order, and in reverse order with a longer
padding-mate added) and alone (B = 1, no padding; in serving, where each solo
run is a full pass, for three of them), and its predictions at its own
positions must agree. Three paths:

- ``eval``: the training path as evaluation runs it;
- ``train_nodrop``: the training path in training mode with dropout set to 0
  (batch statistics, e.g. batch normalisation over learners or positions, are
  exactly what this catches; dropout itself is random per batch shape, so it
  has to be off for a comparison across shapes);
- ``serving``: `predict_stepwise`, predict-then-update one interaction at a time.

Across batch shapes matrix kernels may sum in another order, so equality is
up to rounding: ``batch_atol`` in fp64, ``fp32_atol`` in fp32.
"""

from __future__ import annotations

import numpy as np
import torch

from ktstream.data.histories import LearnerHistory
from ktstream.leakage.config import GateConfig
from ktstream.leakage.probe import batch_of, forward_probs, is_deterministic
from ktstream.leakage.report import CheckResult
from ktstream.models.base import KTModel
from ktstream.models.stepwise import predict_stepwise


def _predict(model: KTModel, learners: list[LearnerHistory], mode: str, seed: int) -> torch.Tensor:
    hist = batch_of(learners)
    if mode == "serving":
        model.eval()
        return predict_stepwise(model, hist)[0]
    return forward_probs(model, hist, mode, seed)


def _groupings(learners: list[LearnerHistory], rng: np.random.Generator) -> list[list[int]]:
    """Orders of learner indices forming the batches; -1 is the padding-mate."""
    n = len(learners)
    shuffled = [int(i) for i in rng.permutation(n)]
    return [shuffled, [-1] + list(range(n - 1, -1, -1))]


def _solo_subset(learners: list[LearnerHistory], rng: np.random.Generator) -> list[int]:
    """Serving one learner at a time costs a full pass each: the longest, the shortest and one at random."""
    by_len = sorted(range(len(learners)), key=lambda i: len(learners[i]))
    return sorted({by_len[0], by_len[-1], int(rng.integers(len(learners)))})


def batch_independence(model: KTModel, learners: list[LearnerHistory], cfg: GateConfig,
                       rng: np.random.Generator) -> CheckResult:
    bound = cfg.batch_atol if cfg.precision == "fp64" else cfg.fp32_atol
    longest = max(learners, key=len)
    mate = LearnerHistory("padding-mate", np.concatenate([longest.items, longest.items[:7]]),
                          np.concatenate([longest.concepts, longest.concepts[:7]]),
                          np.concatenate([longest.responses, 1 - longest.responses[:7].clip(0, 1)]),
                          np.concatenate([longest.times, longest.times[-1:] + 60.0 * np.arange(1, 8)]),
                          np.concatenate([longest.step_start, len(longest) + np.arange(7)]),
                          longest.event_ids + [f"mate-{i}" for i in range(7)])
    worst, where, per_mode = 0.0, "", {}
    hist = batch_of(learners)
    for mode in ("eval", "train_nodrop", "serving"):
        if mode == "train_nodrop" and not is_deterministic(model, hist, mode):
            return CheckResult("batch_independence", "fail", None, bound, "max |dp| alone vs in a batch <= bound",
                               "training-mode forward stays random with every nn.Dropout/RNN/MultiheadAttention "
                               "dropout at 0: dropout drawn outside those modules cannot be checked; declare it "
                               "as an nn.Dropout module")
        solo = range(len(learners)) if mode != "serving" else _solo_subset(learners, rng)
        alone = {i: _predict(model, [learners[i]], mode, cfg.seed)[0, : len(learners[i])] for i in solo}
        per_mode[mode] = 0.0
        first: dict[int, torch.Tensor] = {}
        for order in _groupings(learners, rng):
            batch = [mate if i < 0 else learners[i] for i in order]
            out = _predict(model, batch, mode, cfg.seed)
            first = first or {i: out[row, : len(learners[i])] for row, i in enumerate(order) if i >= 0}
            for row, i in enumerate(order):
                if i < 0:
                    continue
                n = len(learners[i])
                ref = alone[i] if i in alone else first[i]
                d = float(torch.nan_to_num((out[row, :n] - ref).abs(), nan=float("inf")).max())
                per_mode[mode] = max(per_mode[mode], d)
                if d > worst:
                    worst = d
                    where = (f"{mode}: learner {learners[i].learner_id!r} in a batch of {len(batch)} "
                             f"(row {row}) vs {'alone' if i in alone else 'in the first batch'}")
    return CheckResult.judge("batch_independence", worst, bound, worst <= bound,
                             "max |dp| alone vs in a batch <= bound",
                             where if worst > bound else f"{len(learners)} learners, 2 batchings, "
                             "eval / train (dropout 0) / serving", per_mode=per_mode)
