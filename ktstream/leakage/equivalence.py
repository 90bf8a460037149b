"""Train/serve equivalence (invariant 2) on the gate's own data.

The contract suite checks it on random histories; the gate checks it again on
the learners it was given (real item/concept mixes, real lengths cut to the
probe length, which crosses a windowed model's context three times), because a
model that leaks in training but not in serving shows up here as a mismatch:
serving cannot see the future, the training path of a leaky model does.
"""

from __future__ import annotations

from ktstream.data.histories import LearnerHistory
from ktstream.leakage.config import GateConfig
from ktstream.leakage.probe import batch_of, forward_probs, max_diff
from ktstream.leakage.report import CheckResult
from ktstream.models.base import KTModel
from ktstream.models.stepwise import predict_stepwise


def serving_equivalence(model: KTModel, learners: list[LearnerHistory], cfg: GateConfig) -> CheckResult:
    bound = cfg.fp64_serving_atol if cfg.precision == "fp64" else cfg.fp32_serving_atol
    hist = batch_of(learners)
    batch = forward_probs(model, hist, "eval")
    model.eval()
    served, _ = predict_stepwise(model, hist)
    keep = hist.mask & (hist.responses >= 0)
    diff, loc = max_diff(served, batch, keep)
    where = ""
    if loc is not None and diff > bound:
        where = f"learner {learners[loc[0]].learner_id!r}, position {loc[1]} of {int(hist.mask[loc[0]].sum())}"
    sums = served[hist.mask].sum(-1)
    off_simplex = float((sums - 1).abs().max()) if sums.numel() else 0.0
    ok = diff <= bound and off_simplex <= max(bound, 1e-9)
    if off_simplex > max(bound, 1e-9):
        where = f"serving probabilities sum to 1 +/- {off_simplex:.2e}"
    return CheckResult.judge("serving_equivalence", diff, bound, ok, "max |p_serving - p_forward| <= bound",
                             where or f"{len(learners)} learners, up to {hist.shape[1]} positions",
                             positions=int(keep.sum()), probability_sum_error=off_simplex)

