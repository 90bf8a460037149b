"""Promotion: gate + paired bootstrap over learners; better promoted, worse rejected and kept with its report."""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from ktstream.data.simulate import simulate
from ktstream.data.vocab import UNKNOWN, Vocabulary
from ktstream.finetune.significance import paired_bootstrap
from ktstream.finetune.finetune import fine_tune
from ktstream.finetune.promotion import judge, promote_or_reject, reencode
from ktstream.finetune.registry import ModelRegistry
from ktstream.finetune.windows import build_windows
from ktstream.leakage import ALL_CHECKS
from ktstream.models import create
from ktstream.models.dkt import DKT
from tests.finetune.conftest import DAY_MS, TINY_DKT, fast_gate, fast_promotion, tiny_finetune

# where the comparison, not the gate, is under test: every check but the costly random-label training
CHEAP = fast_promotion(gate=fast_gate(checks=[c for c in ALL_CHECKS if c != "random_labels"]))


@pytest.fixture(scope="module")
def world():
    """A learnable stream (120 learners), its replay, and a candidate trained on it (~15 s)."""
    recs = simulate(n_learners=120, n_items=30, n_concepts=6, mean_length=50, seed=0,
                    start_spread_ms=10 * DAY_MS, mean_gap_ms=3_600_000)
    times = np.array([r["event_time"] for r in recs])
    C = int(np.quantile(times, 0.5))
    data = build_windows(recs, C, int(np.quantile(times, 0.75)) - C)
    good = fine_tune(data, cfg=tiny_finetune(epochs=6, batch_size=16), family="dkt", model_kwargs=TINY_DKT)
    return data, good


def fresh(data, seed: int = 5):
    torch.manual_seed(seed)
    return create("dkt", n_items=len(data.items), n_concepts=len(data.concepts), **TINY_DKT).eval()


def test_clearly_better_candidate_is_promoted(world, tmp_path):
    data, good = world
    decision = judge(good, (fresh(data), data.items, data.concepts), data, fast_promotion())
    c = decision.comparison
    assert decision.gate.passed, decision.gate.table()
    assert decision.promote and c["metric"] == "auc" and c["ci_low"] > 0
    assert c["ci_low"] <= c["difference"] <= c["ci_high"] and c["n_samples"] == 200
    assert c["learners"] == sum(1 for h, s in zip(data.judge, data.judge_scored) if s.any())
    reg = ModelRegistry(tmp_path)
    outcome, name = promote_or_reject(reg, good, decision, data, None, fast_promotion())
    assert (outcome, name) == ("promoted", "v000001") and reg.latest() == name
    meta = reg.metrics(name)
    assert meta["window"]["cutoff_ms"] == data.cutoff_ms and meta["window"]["horizon_ms"] == data.horizon_ms
    assert meta["promotion"]["comparison"]["ci_low"] == c["ci_low"] and meta["promotion"]["gate"]["passed"]


def test_worse_candidate_is_rejected_and_kept_with_its_report(world, tmp_path):
    data, good = world
    untrained = fine_tune(data, cfg=tiny_finetune(epochs=1, lr=0.0), family="dkt", model_kwargs=TINY_DKT)
    decision = judge(untrained, (good.model, data.items, data.concepts), data, CHEAP)
    assert not decision.promote and decision.comparison["ci_high"] < 0
    reg = ModelRegistry(tmp_path)
    outcome, name = promote_or_reject(reg, untrained, decision, data, "v000007", CHEAP)
    assert outcome == "rejected" and reg.latest() is None and reg.rejected() == [name]
    report = reg.rejected_report(name)
    assert report["parent"] == "v000007" and report["promotion"]["promote"] is False
    assert "not above margin" in report["promotion"]["reasons"][-1]
    assert report["promotion"]["comparison"]["difference"] == decision.comparison["difference"]


def test_no_better_than_serving_is_not_promoted(world):
    data, good = world
    same = judge(good, (good.model, data.items, data.concepts), data, CHEAP)
    assert same.comparison["difference"] == 0.0 and same.comparison["ci_low"] == 0.0 and not same.promote
    margin = judge(good, (fresh(data), data.items, data.concepts), data, replace(CHEAP, margin=0.5))
    assert margin.comparison["difference"] > 0 and not margin.promote


class PeeksAtAnswer(DKT):
    """A leaky design: the training path adds the current response to its own prediction."""

    def forward(self, histories, state=None):
        log_probs, final = super().forward(histories, state)
        return F.log_softmax(log_probs + 4.0 * F.one_hot(histories.responses.clamp(min=0), 2), -1), final


def test_leaky_candidate_with_higher_auc_is_rejected_by_the_gate(world):
    data, good = world
    torch.manual_seed(0)
    leaky = PeeksAtAnswer(n_items=len(data.items), n_concepts=len(data.concepts), **TINY_DKT)
    leaky.load_state_dict(good.model.state_dict())
    decision = judge(SimpleNamespace(model=leaky.eval()), (good.model, data.items, data.concepts), data,
                     fast_promotion())
    assert decision.comparison["ci_low"] > 0.2, "reading the answer looks much better..."
    assert not decision.promote and "current_label_flip" in decision.gate.failed()
    assert decision.reasons[0].startswith("leakage gate failed")


def test_serving_model_reads_the_window_through_its_own_vocabulary(world):
    data, _ = world
    old_items = Vocabulary(data.items.ids[:5])
    out = reencode(data.judge[:3], (data.items, data.concepts), (old_items, data.concepts))
    for before, after in zip(data.judge[:3], out):
        known = before.items < len(old_items)
        assert (after.items[known] == before.items[known]).all() and (after.items[~known] == UNKNOWN).all()
        assert (after.concepts == before.concepts).all() and after.event_ids == before.event_ids


def test_paired_bootstrap_resamples_learners_and_handles_ordinal_models():
    rng = np.random.default_rng(1)
    y = [rng.integers(0, 3, 50) for _ in range(20)]
    exact = [np.eye(3)[v] * 0.9 + 0.1 / 3 for v in y]
    noise = [rng.dirichlet(np.ones(3), 50) for _ in y]
    r = paired_bootstrap(y, exact, noise, n_samples=300, confidence=0.9, seed=3)
    assert r["metric"] == "qwk" and r["candidate"] == pytest.approx(1.0) and r["ci_low"] > 0.5
    again = paired_bootstrap(y, exact, noise, n_samples=300, confidence=0.9, seed=3)
    assert again == r, "seeded: the same interval every time"
    wider = paired_bootstrap(y, exact, noise, n_samples=300, confidence=0.99, seed=3)
    assert wider["ci_low"] <= r["ci_low"] and wider["ci_high"] >= r["ci_high"]
