"""Invariant 1 by perturbation: the future, and the current response, never move a prediction.

`future_perturbation` runs three perturbations per round (see `perturb`), each
row of the batch at its own position t with s = t's step start:

A. responses from s and query parts from t + 1 changed: predictions at <= t equal;
B. responses from s and query parts from t changed: predictions at < t equal
   (t's own query may move t, but not its step mates before it);
C. the history cut after t: predictions at <= t equal (no leak through length).
   Cutting changes the shape a packed RNN computes in, so C allows rounding
   (``batch_atol``) and runs in ``train_nodrop`` instead of seeded ``train``.

`current_label_flip` changes only the response at t and compares the
prediction at t in the training path; in serving, at every position,
``predict`` is asked three times, with the true response, another one, and none
(the engine hands ``predict`` the whole event, so a model reading
``query.responses`` is caught).

Both run in ``eval`` and in ``train`` mode (seeded dropout; see `probe`).
"""

from __future__ import annotations

import numpy as np
import torch

from ktstream.data.histories import NO_RESPONSE, Interactions
from ktstream.leakage.config import GateConfig
from ktstream.leakage.perturb import change_future, cut_after, flip_at, pick_positions
from ktstream.leakage.probe import batch_of, forward_probs, max_diff
from ktstream.leakage.report import CheckResult
from ktstream.models.base import KTModel, where_state

RULE = "max |dp| at compared positions <= bound"
CUT = "C history cut after t"


class _Worst:
    """Keeps, per case, the largest difference seen and where it was."""

    def __init__(self) -> None:
        self.per_case: dict[str, float] = {}
        self.where: dict[str, str] = {}

    def add(self, case: str, diff: float, where: str) -> None:
        if diff > self.per_case.get(case, -1.0):
            self.per_case[case] = diff
            self.where[case] = f"{case}: {where} moved by {diff:.3g}"

    @staticmethod
    def at(learners, loc, t: torch.Tensor) -> str:
        if loc is None:
            return ""
        b, p = loc
        return f"learner {learners[b].learner_id!r}, perturbed at t={int(t[b])}, position {p}"

    def verdict(self, name: str, bounds: dict[str, float], rule: str, ok_detail: str) -> CheckResult:
        """The worst failing case (figure, its bound), else the worst case overall."""
        failing = [c for c, d in self.per_case.items() if d > bounds[c]]
        pool = failing or list(self.per_case)
        case = max(pool, key=lambda c: self.per_case[c])
        detail = self.where.get(case, "") if failing else ok_detail
        return CheckResult.judge(name, self.per_case[case], bounds[case], not failing, rule, detail,
                                 per_case=self.per_case)


def future_perturbation(model: KTModel, learners, cfg: GateConfig, rng: np.random.Generator) -> CheckResult:
    hist = batch_of(learners)
    B, T = hist.shape
    lengths = hist.mask.sum(1)
    pos = torch.arange(T).unsqueeze(0)
    worst = _Worst()
    for mode in ("eval", "train"):
        base = forward_probs(model, hist, mode, seed=cfg.seed)
        base_nodrop = forward_probs(model, hist, "train_nodrop", seed=cfg.seed) if mode == "train" else base
        for r in range(cfg.n_positions):
            t = pick_positions(lengths, r, rng)
            upto = hist.mask & (pos <= t.unsqueeze(1))
            before = hist.mask & (pos < t.unsqueeze(1))
            cases = {
                "A responses>=s, queries>t": (change_future(hist, t, t + 1, model.n_categories, model.n_items,
                                                            model.n_concepts, rng), upto),
                "B responses>=s, queries>=t": (change_future(hist, t, t, model.n_categories, model.n_items,
                                                             model.n_concepts, rng), before),
                CUT: (cut_after(hist, t), upto),
            }
            for name, (changed, keep) in cases.items():
                run = "train_nodrop" if mode == "train" and name == CUT else mode  # packed shape changes
                out = forward_probs(model, changed, run, seed=cfg.seed)
                diff, loc = max_diff(out, base_nodrop if run == "train_nodrop" else base, keep)
                worst.add(f"{run}/{name}", diff, worst.at(learners, loc, t))
    exact = cfg.exact_atol
    reshaped = cfg.batch_atol if cfg.precision == "fp64" else cfg.fp32_atol  # C changes the packed shape
    bounds = {c: reshaped if c.endswith(CUT) else exact for c in worst.per_case}
    return worst.verdict("future_perturbation", bounds, RULE, f"{B} learners x {cfg.n_positions} positions x 3 "
                         "perturbations, eval and train mode")


def current_label_flip(model: KTModel, learners, cfg: GateConfig, rng: np.random.Generator) -> CheckResult:
    hist = batch_of(learners)
    B, T = hist.shape
    lengths = hist.mask.sum(1)
    pos = torch.arange(T).unsqueeze(0)
    worst = _Worst()
    base = {mode: forward_probs(model, hist, mode, seed=cfg.seed) for mode in ("eval", "train")}
    for r in range(cfg.n_positions):
        t = pick_positions(lengths, r, rng)
        at = hist.mask & (pos == t.unsqueeze(1)) & (hist.responses >= 0)
        flipped = flip_at(hist, t, model.n_categories, rng)
        for mode in ("eval", "train"):
            diff, loc = max_diff(forward_probs(model, flipped, mode, cfg.seed), base[mode], at)
            worst.add(mode, diff, worst.at(learners, loc, t))
    model.eval()
    for case, (diff, loc) in serving_flips(model, hist, rng).items():
        worst.add(case, diff, f"learner {learners[loc[0]].learner_id!r}, position {loc[1]}" if loc else "")
    return worst.verdict("current_label_flip", {c: cfg.exact_atol for c in worst.per_case},
                         "max |dp_t| when r_t flipped <= bound", f"{B} learners x {cfg.n_positions} positions in "
                         "the training path (eval, train); every position in serving")


@torch.inference_mode()
def serving_flips(model: KTModel, hist, rng: np.random.Generator) -> dict[str, tuple[float, tuple | None]]:
    """One serving pass (as `predict_stepwise`); at every position ``predict`` is also asked with the response
    flipped, and with no response at all (a prediction request): all three must agree."""
    B, T = hist.shape
    K = model.n_categories
    state = model.init_state(B)
    at_step_start = state
    worst = {"serving flipped": (0.0, None), "serving no response": (0.0, None)}
    for t in range(T):
        at_step_start = where_state(hist.step_start[:, t] == t, state, at_step_start)
        query = hist.at(t)
        valid = hist.mask[:, t] & (query.responses >= 0)
        p = model.predict(at_step_start, query)
        shift = torch.from_numpy(rng.integers(1, K, size=B))
        other = {"serving flipped": (query.responses + shift) % K, "serving no response": torch.full_like(
            query.responses, NO_RESPONSE)}
        for case, responses in other.items():
            q2 = Interactions(query.items, query.concepts, torch.where(valid, responses, query.responses), query.times)
            d = (model.predict(at_step_start, q2) - p).abs().amax(-1).masked_fill(~valid, 0.0)
            d = torch.nan_to_num(d, nan=float("inf"))
            if float(d.max()) > worst[case][0]:
                worst[case] = (float(d.max()), (int(d.argmax()), t))
        if bool(valid.any()):
            state = where_state(valid, model.update(state, query), state)
    return worst
