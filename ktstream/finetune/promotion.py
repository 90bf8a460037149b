"""Promotion: a candidate replaces the serving model only if it passes the leakage gate and is
better on [C+H, C+2H) beyond noise.

1. Leakage gate (``ktstream.leakage.run_gate``) on the candidate, with the
   replay's windows as time-ordered splits: train = events < C, valid = the
   events of [C, C+H), test = those of [C+H, C+2H) (each window a split of its
   own, so the gate's protocol checks see disjoint, time-ordered splits).
   Training on coin flips is the gate's costly check; ``random_labels_days``
   runs it on the last N days before C only (None: all events before C).
2. Prequential comparison on [C+H, C+2H): both models predict every event of
   the window from the learner's whole earlier history (training path; equal
   to the serving path by invariant 2, which the gate checks); each model
   reads the events through its own vocabulary. Paired bootstrap over learners
   (``bootstrap``): promote only if the lower bound of the CI of
   metric(candidate) - metric(serving) exceeds ``margin``.

With no serving model (the first version) the gate alone decides.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import Any, Sequence

import numpy as np

from ktstream.data.histories import LearnerHistory
from ktstream.data.vocab import Vocabulary
from ktstream.finetune.significance import paired_bootstrap
from ktstream.finetune.finetune import FinetuneResult
from ktstream.finetune.registry import ModelRegistry
from ktstream.finetune.windows import TimeWindows, owned, window_only
from ktstream.leakage import GateConfig, GateData, GateReport, run_gate
from ktstream.models.base import KTModel
from ktstream.training.trainer import predict_histories


@dataclass
class PromotionConfig:
    margin: float = 0.0
    confidence: float = 0.95
    bootstrap: int = 1000
    seed: int = 0
    gate: GateConfig = field(default_factory=GateConfig)
    random_labels_days: float | None = None
    eval_batch_size: int = 64


@dataclass
class Decision:
    promote: bool
    reasons: list[str]
    comparison: dict[str, Any] | None
    gate: GateReport

    def to_dict(self) -> dict[str, Any]:
        return {"promote": self.promote, "reasons": self.reasons, "comparison": self.comparison,
                "gate": self.gate.to_dict()}


def reencode(histories: Sequence[LearnerHistory], source: tuple[Vocabulary, Vocabulary],
             target: tuple[Vocabulary, Vocabulary]) -> list[LearnerHistory]:
    """Histories encoded with ``source`` vocabularies, re-encoded with ``target``'s (unseen ids -> 1)."""
    maps = [np.array([0, 1] + [t.encode(x) for x in s.ids], dtype=np.int64) for s, t in zip(source, target)]
    return [replace(h, items=maps[0][h.items], concepts=maps[1][h.concepts]) for h in histories]


def scored_predictions(model: KTModel, histories: Sequence[LearnerHistory], scored: Sequence[np.ndarray],
                       batch_size: int = 64) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Per learner with scored responses: (responses (n,), probabilities (n, K))."""
    device = next(model.parameters()).device
    probs = predict_histories(model, histories, batch_size, device)
    ys, ps = [], []
    for h, p, s in zip(histories, probs, scored):
        keep = s & (h.responses >= 0)
        if keep.any():
            ys.append(h.responses[keep])
            ps.append(p[keep].astype(np.float64))
    return ys, ps


def gate_data(data: TimeWindows) -> GateData:
    """The replay's windows as the gate's time-ordered splits: training, and the scored tails of selection
    and promotion."""
    valid, test = window_only(data.select, data.select_scored), window_only(data.judge, data.judge_scored)
    return GateData(data.train, valid, test, split="time", n_items=len(data.items), n_concepts=len(data.concepts))


def gate(candidate: KTModel, data: TimeWindows, cfg: PromotionConfig) -> GateReport:
    full = gate_data(data)
    valid, test = full.valid, full.test
    if cfg.random_labels_days is None or "random_labels" not in cfg.gate.checks:
        return run_gate(candidate, full, cfg.gate)
    report = run_gate(candidate, full, replace(cfg.gate, checks=[c for c in cfg.gate.checks if c != "random_labels"]))
    recent = recent_training(data, cfg.random_labels_days)
    only = replace(cfg.gate, checks=["random_labels"])
    extra = run_gate(candidate, GateData(recent, valid, test, split="time"), only)
    extra.checks[0].extras["train_window_days"] = cfg.random_labels_days
    return GateReport(report.model, report.checks + extra.checks, report.labels, report.config,
                      report.seconds + extra.seconds)


def recent_training(data: TimeWindows, days: float) -> list[LearnerHistory]:
    """Each learner's training events of the last ``days`` before C (learners with none left out), as
    histories of their own: a window streamed from the archive is not held through them."""
    since = (data.cutoff_ms - days * 86_400_000) / 1000.0
    recent = (h.slice(int(np.searchsorted(h.times, since)), len(h)) for h in data.train)
    return [owned(h) for h in recent if len(h)]


def judge(candidate: FinetuneResult, serving: tuple[KTModel, Vocabulary, Vocabulary] | None, data: TimeWindows,
          cfg: PromotionConfig | None = None) -> Decision:
    """Gate the candidate, compare it with the serving model on [C+H, C+2H), decide."""
    cfg = cfg or PromotionConfig()
    report = gate(candidate.model, data, cfg)
    reasons = [] if report.passed else [f"leakage gate failed: {', '.join(report.failed())}"]
    comparison = None
    if serving is None:
        reasons.append("no serving model: the gate alone decides")
    else:
        model, items, concepts = serving
        y, pc = scored_predictions(candidate.model, data.judge, data.judge_scored, cfg.eval_batch_size)
        served = reencode(data.judge, (data.items, data.concepts), (items, concepts))
        y2, ps = scored_predictions(model, served, data.judge_scored, cfg.eval_batch_size)
        assert all(np.array_equal(a, b) for a, b in zip(y, y2)), "both models must score the same interactions"
        if not y:
            reasons.append("no scored interactions in [C+H, C+2H)")
        else:
            comparison = paired_bootstrap(y, pc, ps, cfg.bootstrap, cfg.confidence, cfg.seed)
            comparison["margin"] = cfg.margin
            ok = comparison["ci_low"] > cfg.margin  # NaN compares False: not promoted
            reasons.append(f"{comparison['metric']} {comparison['candidate']:.4f} vs serving "
                           f"{comparison['serving']:.4f}: difference {comparison['difference']:+.4f}, "
                           f"{100 * cfg.confidence:.0f}% CI [{comparison['ci_low']:+.4f}, "
                           f"{comparison['ci_high']:+.4f}] {'above' if ok else 'not above'} margin {cfg.margin:+.4f}")
    promote = report.passed and (serving is None or (comparison is not None and comparison["ci_low"] > cfg.margin))
    return Decision(bool(promote), reasons, comparison, report)


def promote_or_reject(registry: ModelRegistry, candidate: FinetuneResult, decision: Decision, data: TimeWindows,
                      parent: str | None, cfg: PromotionConfig) -> tuple[str, str]:
    """Publish a new version, or keep the candidate under ``rejected/``; ("promoted" | "rejected", name)."""
    settings = {**asdict(cfg), "gate": cfg.gate.as_dict()}
    payload = {"family": candidate.model.name, "parent": parent, "window": data.window(),
               "finetune": candidate.to_dict(), "promotion": decision.to_dict(), "promotion_config": settings}
    model = candidate.model.cpu()
    if decision.promote:
        return "promoted", registry.publish(model, candidate.items, candidate.concepts, payload)
    return "rejected", registry.reject(model, candidate.items, candidate.concepts, payload, label=f"c{data.cutoff_ms}")
