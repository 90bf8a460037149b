"""The trainer learns a learnable signal, selects on validation only, and cuts windows without leaking."""

import numpy as np
import pytest
import torch

from ktstream.data.histories import NO_RESPONSE, LearnerHistory, collate
from ktstream.models import create, family, names
from ktstream.models.stepwise import predict_stepwise
from ktstream.scoring.binary import auc
from ktstream.training import precision
from ktstream.training.precision import supports_autocast
from ktstream.training.trainer import TrainConfig, eval_batches, fit, forward_windows, predict_histories, score
from tests.conftest import random_learner


def skill_learners(n, seed, length=40):
    """Learners whose response is a deterministic function of the item: a model must find it."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        h = random_learner(rng, length, 20, 6, 2, step_prob=0.0, learner_id=f"s{seed}-{i}")
        h.responses = (h.items % 2).astype(np.int64)
        out.append(h)
    return out


def test_fit_learns_and_keeps_best_epoch():
    torch.manual_seed(0)
    model = create("dkt", n_items=20, n_concepts=6, dim=8, hidden=16)
    train, valid, test = skill_learners(60, 0), skill_learners(20, 1), skill_learners(20, 2)
    result = fit(model, train, valid, TrainConfig(epochs=6, batch_tokens=640, lr=1e-2, chunk=15, progress=False))
    y, p, _ = score(test, predict_histories(model, test))
    assert auc(y, p[:, 1]) > 0.95
    best = max(h["valid_auc"] for h in result.history)
    assert result.best_valid == best
    assert result.history[result.best_epoch - 1]["valid_auc"] == best


@pytest.mark.skipif(not supports_autocast(torch.device("cpu"), torch.bfloat16),
                    reason="this CPU cannot train in bf16 autocast (oneDNN's bf16 LSTM needs AVX-512 BF16 or AMX)")
def test_bf16_autocast_training_learns_like_fp32():
    """Autocast per step: each step's bf16 weights are cast from the updated fp32 ones (CPU bf16 here)."""
    train, valid, test = skill_learners(60, 0), skill_learners(20, 1), skill_learners(20, 2)
    aucs = {}
    for mode in (None, "bf16"):
        torch.manual_seed(0)
        model = create("dkt", n_items=20, n_concepts=6, dim=8, hidden=16)
        fit(model, train, valid, TrainConfig(epochs=6, batch_tokens=640, lr=1e-2, chunk=15, progress=False,
                                             device="cpu", autocast=mode))
        y, p, _ = score(test, predict_histories(model, test))
        aucs[mode] = auc(y, p[:, 1])
    assert aucs[None] > 0.95 and aucs["bf16"] > 0.95, aucs


def test_an_autocast_the_device_cannot_train_in_fails_before_training_in_one_line(monkeypatch):
    """What an AVX2-only CPU says about bf16: the probe's error, named with the option to change."""
    monkeypatch.setattr(precision, "_probe", lambda device_type, dtype: "could not create a primitive descriptor")
    model = create("dkt", n_items=20, n_concepts=6, dim=8, hidden=16)
    before = [p.detach().clone() for p in model.parameters()]
    with pytest.raises(precision.UnsupportedPrecisionError) as err:
        fit(model, skill_learners(4, 0), skill_learners(2, 1),
            TrainConfig(epochs=1, device="cpu", autocast="bf16", progress=False))
    message = str(err.value)
    assert "\n" not in message and "TrainConfig.autocast" in message and "primitive descriptor" in message
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))


def test_the_autocast_probe_answers_for_this_machine():
    """Whatever the CPU, the probe answers instead of crashing, the check agrees with it, and fp32 always trains."""
    cpu = torch.device("cpu")
    assert precision.supports_autocast(cpu, None)
    if precision.supports_autocast(cpu, torch.bfloat16):
        precision.check_autocast(cpu, torch.bfloat16, "TrainConfig.autocast")
    else:
        with pytest.raises(precision.UnsupportedPrecisionError, match="TrainConfig.autocast"):
            precision.check_autocast(cpu, torch.bfloat16, "TrainConfig.autocast")


def test_training_inside_an_autocast_context_is_refused():
    """One autocast context around a whole run would train every step on the first step's weight casts."""
    model = create("dkt", n_items=20, n_concepts=6, dim=8, hidden=16)
    with torch.autocast("cpu", dtype=torch.bfloat16), pytest.raises(RuntimeError, match="TrainConfig.autocast"):
        fit(model, skill_learners(4, 0), skill_learners(2, 1), TrainConfig(epochs=1, device="cpu", progress=False))
    with pytest.raises(ValueError, match="autocast"):
        fit(model, skill_learners(4, 0), skill_learners(2, 1), TrainConfig(epochs=1, autocast="fp8", progress=False))


def test_windows_equal_full_forward_and_cut_between_steps(make_histories):
    torch.manual_seed(0)
    model = create("dkvmn", n_items=30, n_concepts=12, memory_size=4, key_dim=8, value_dim=8, summary_dim=8).eval()
    _, hist = make_histories([50, 37], step_prob=0.5, seed=3)
    with torch.no_grad():
        full, _ = model(hist)
        parts = list(forward_windows(model, hist, chunk=16))
    joined = torch.cat([lp for lp, _, _ in parts], dim=1)
    keep = torch.cat([k for _, k, _ in parts], dim=1)
    cuts = torch.tensor([w.shape[1] for _, _, w in parts]).cumsum(0)[:-1]
    assert len(cuts) >= 3 and all(8 < int(w.shape[1]) <= 16 for _, _, w in parts[:-1])
    for c in cuts.tolist():  # no learner is inside a step at a cut
        assert bool(((hist.step_start[:, c] == c) | ~hist.mask[:, c]).all()), c
    assert torch.equal(keep, hist.mask & (hist.responses >= 0))
    assert torch.allclose(joined[hist.mask], full[hist.mask], atol=1e-5)


def test_a_cut_inside_a_step_scores_its_later_members_from_the_steps_start(make_histories):
    """One long step per learner: no clean cut exists, the window is cut inside the step, and the
    members after the cut are still scored, predicted as the whole forward predicts them."""
    torch.manual_seed(0)
    model = create("dkt", n_items=30, n_concepts=12, dim=8, hidden=8).eval()
    _, hist = make_histories([40, 40], step_prob=0.0, seed=4)
    hist.step_start[:, 10:30] = 10  # positions 10..29: one step
    with torch.no_grad():
        full, _ = model(hist)
        parts = list(forward_windows(model, hist, chunk=16))
    keep = torch.cat([k for _, k, _ in parts], dim=1)
    joined = torch.cat([lp for lp, _, _ in parts], dim=1)
    assert [w.shape[1] for _, _, w in parts] == [10, 16, 14], "cut at the step's start, then forced inside it"
    assert torch.equal(keep, hist.applied), "every position with a response is in the loss"
    assert torch.allclose(joined, full, atol=1e-5)


def straddling_learner(K: int, step: tuple[int, int], length: int = 20, seed: int = 0) -> LearnerHistory:
    """One learner whose positions ``step`` [a, b) share an event time: one step."""
    rng = np.random.default_rng(seed)
    h = random_learner(rng, length, 30, 12, K, step_prob=0.0)
    a, b = step
    h.times[a:b] = h.times[a]
    h.step_start[a:b] = a
    return h


@pytest.mark.parametrize("step", [(3, 13), (0, 20)], ids=["positions 3-12", "every position"])
@pytest.mark.parametrize("name", names())
def test_a_step_cut_by_a_window_is_predicted_from_its_start(name, step):
    """Chunk 8 cuts the step at 8: flipping the responses of its members 3-7 must leave the
    predictions of its members 8-12 as they were, and the windows must predict what serving does."""
    torch.manual_seed(0)
    model = create(name, n_items=30, n_concepts=12, **family(name).tiny_config).eval()
    h = straddling_learner(2, step)
    flipped = straddling_learner(2, step)
    flipped.responses[3:8] = 1 - flipped.responses[3:8]
    base = predict_histories(model, [h], chunk=8)[0]
    moved = np.abs(predict_histories(model, [flipped], chunk=8)[0][8:13] - base[8:13]).max()
    assert moved <= 1e-6, f"{name}: step mates' responses reached members across the cut ({moved:.2e})"
    served, _ = predict_stepwise(model, collate([h]))
    assert np.allclose(base, served[0].numpy(), atol=1e-5), f"{name}: windows differ from serving"


@pytest.mark.parametrize("name", names())
def test_windows_of_a_mixed_batch_equal_serving(name, make_histories):
    """Learners cut inside steps at different windows, one step longer than a window, requests
    without a response: every window position, in the loss or not, is what serving predicts."""
    torch.manual_seed(0)
    model = create(name, n_items=30, n_concepts=12, **family(name).tiny_config).eval()
    learners, _ = make_histories([45, 30, 12, 45], step_prob=0.6, seed=11)
    learners[3] = straddling_learner(2, (5, 30), length=45, seed=12)  # 25 positions, more than a chunk
    for h in learners[:2]:
        h.responses[::7] = NO_RESPONSE
    hist = collate(learners)
    with torch.no_grad():
        parts = list(forward_windows(model, hist, chunk=10))
    cuts = torch.tensor([w.shape[1] for _, _, w in parts]).cumsum(0)[:-1].tolist()
    assert any(bool(((hist.step_start[:, c] < c) & hist.mask[:, c]).any()) for c in cuts), "no cut inside a step"
    joined = torch.cat([lp for lp, _, _ in parts], dim=1).exp()
    served, _ = predict_stepwise(model, hist)
    m = hist.mask
    assert torch.allclose(joined[m], served[m], atol=1e-5), \
        f"{name}: windows differ from serving by {(joined[m] - served[m]).abs().max():.2e}"
    assert torch.equal(torch.cat([k for _, k, _ in parts], dim=1), hist.applied)


def test_refit_replays_the_selected_schedule_on_more_data():
    from ktstream.training.trainer import refit

    torch.manual_seed(0)
    # On CPU, where this figure was set: CUDA's LSTM kernels give other numbers (0.946 on an H100).
    cfg = TrainConfig(epochs=5, batch_tokens=640, lr=1e-2, chunk=15, patience=2, lr_decay=0.5, progress=False,
                      device="cpu")
    train, valid = skill_learners(40, 0), skill_learners(20, 1)
    selected = fit(create("dkt", n_items=20, n_concepts=6, dim=8, hidden=16), train, valid, cfg)
    assert all(h["lr"] <= cfg.lr for h in selected.history)
    model = refit(create("dkt", n_items=20, n_concepts=6, dim=8, hidden=16), train + valid, selected, cfg)
    test = skill_learners(20, 2)
    y, p, _ = score(test, predict_histories(model, test))
    assert auc(y, p[:, 1]) > 0.95


def test_position_batches_stay_within_budget_and_cover_every_learner_once():
    from ktstream.training.trainer import _batches

    rng = np.random.default_rng(0)
    lengths = np.concatenate([rng.integers(1, 30, 300), rng.integers(100, 1300, 20)])
    hs = [[0] * int(n) for n in lengths]
    batches = _batches(hs, 32, np.random.default_rng(1), tokens=1600)
    assert sorted(id(h) for b in batches for h in b) == sorted(id(h) for h in hs), "each learner exactly once"
    for b in batches:
        padded = len(b) * max(len(h) for h in b)
        assert padded <= 1600 or len(b) == 1, (len(b), padded)
    short = [b for b in batches if max(len(h) for h in b) < 30]
    assert max(len(b) for b in short) > 32, "short learners are grouped by positions, not 32 at a time"


@pytest.mark.parametrize("lengths,batch_size,max_positions", [
    ([5, 300, 10, 200, 20, 7, 7, 7, 4000, 650], 4, 600),
    (list(range(1, 200, 3)), 64, 3200),
    ([10] * 50, 8, None),
])
def test_eval_batches_cover_every_learner_once_within_both_bounds(lengths, batch_size, max_positions):
    batches = list(eval_batches(lengths, batch_size, max_positions, chunk=400))
    assert sorted(i for b in batches for i in b) == list(range(len(lengths)))
    for b in batches:
        width = max(min(lengths[i], 400) for i in b)
        assert len(b) <= batch_size
        assert max_positions is None or len(b) == 1 or len(b) * width <= max_positions, (b, width)


@pytest.mark.parametrize("name", ["dkt", "akt"])
def test_predictions_do_not_depend_on_how_evaluation_batches_learners(name):
    """Bounding the positions of an evaluation batch (the CPU's default) splits batches; every
    prediction stays what one batch of all learners gives (no prediction depends on its batch mates)."""
    torch.manual_seed(0)
    model = create(name, n_items=20, n_concepts=6, **family(name).tiny_config).eval()
    rng = np.random.default_rng(4)
    learners = [random_learner(rng, int(n), 20, 6, 2, learner_id=f"u{i}")
                for i, n in enumerate(rng.integers(3, 90, size=24))]
    together = predict_histories(model, learners, len(learners), "cpu", chunk=40, max_positions=None)
    bounded = predict_histories(model, learners, len(learners), "cpu", chunk=40, max_positions=120)
    assert len(list(eval_batches([len(h) for h in learners], len(learners), 120, 40))) > 5
    for a, b in zip(together, bounded):
        np.testing.assert_allclose(a, b, atol=1e-6)
