"""The contract every registered model family must pass (the River test_estimators idea):
train/serve equivalence, causality, batch independence, step semantics, state carry-over.

Histories hold prediction requests (positions without a response, ``NO_RESPONSE``), as the event
schema allows: both paths predict them and apply nothing."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from ktstream.data.histories import NO_RESPONSE, collate
from ktstream.models import create, family, names
from ktstream.models.stepwise import predict_stepwise

N_ITEMS, N_CONCEPTS = 30, 12
CATEGORIES = [2, 4]


def build(name: str, n_categories: int = 2, seed: int = 0):
    torch.manual_seed(seed)
    cls = family(name)
    model = create(name, n_items=N_ITEMS, n_concepts=N_CONCEPTS, n_categories=n_categories, **cls.tiny_config)
    return model.eval()


def with_requests(made, share: float = 0.15, seed: int = 0):
    """``make_histories``' (learners, histories) with a ``share`` of the positions turned into
    prediction requests (no response), the first position of each learner among them."""
    learners, _ = made
    rng = np.random.default_rng(seed)
    for h in learners:
        h.responses = np.where(rng.random(len(h)) < share, NO_RESPONSE, h.responses)
        h.responses[0] = NO_RESPONSE
    return learners, collate(learners)


def flipped(responses: torch.Tensor) -> torch.Tensor:
    """Every response changed (0 <-> 1, K=2); requests stay requests."""
    return torch.where(responses >= 0, 1 - responses, responses)


def horizon(model) -> int:
    """A length beyond the model's window, so the tests cross it."""
    field = model.receptive_field()
    return 3 * field + 5 if field else 70


@pytest.mark.parametrize("K", CATEGORIES)
@pytest.mark.parametrize("name", names())
def test_serving_matches_training(name, K, make_histories):
    model = build(name, K)
    T = horizon(model)
    _, hist = with_requests(make_histories([T, 1, T // 2, T - 1], N_ITEMS, N_CONCEPTS, K, seed=1))
    assert bool(((hist.responses == NO_RESPONSE) & hist.mask).any())
    with torch.no_grad():
        batch_log_probs, batch_state = model(hist)
    served, served_state = predict_stepwise(model, hist)
    m = hist.mask
    assert torch.allclose(served[m], batch_log_probs.exp()[m], atol=1e-5), \
        f"{name}: serving path differs from training path by {(served[m] - batch_log_probs.exp()[m]).abs().max():.2e}"
    assert torch.allclose(served[m].sum(-1), torch.ones(int(m.sum())), atol=1e-5)
    if batch_state is not None:
        for k in batch_state:
            assert torch.allclose(batch_state[k], served_state[k], atol=1e-5), f"{name}: final state {k} differs"


@pytest.mark.parametrize("name", names())
def test_prediction_ignores_current_and_future(name, make_histories):
    model = build(name)
    T = horizon(model)
    learners, hist = with_requests(make_histories([T, T], N_ITEMS, N_CONCEPTS, 2, seed=2, step_prob=0.0))
    with torch.no_grad():
        base, _ = model(hist)
        for t in [0, 1, T // 3, T - 1]:
            for answered in (False, True):  # t's response changed, or t turned from request to answer and back
                changed = hist.replace(responses=hist.responses.clone(), items=hist.items.clone(),
                                       times=hist.times.clone())
                changed.responses[:, t:] = flipped(changed.responses[:, t:])
                if answered:
                    r = hist.responses[:, t]
                    changed.responses[:, t] = torch.where(r >= 0, NO_RESPONSE, 1)
                changed.items[:, t + 1:] = (changed.items[:, t + 1:] + 7) % (N_ITEMS - 2) + 2
                changed.times[:, t + 1:] += 3600.0
                out, _ = model(changed)
                assert torch.allclose(out[:, : t + 1], base[:, : t + 1], atol=1e-6), \
                    f"{name}: prediction at or before {t} moved when position {t}'s response or later changed"


@pytest.mark.parametrize("name", names())
def test_step_members_do_not_see_each_other(name, make_histories):
    model = build(name)
    learners, hist = with_requests(make_histories([40, 40], N_ITEMS, N_CONCEPTS, 2, seed=3, step_prob=0.5))
    ss = hist.step_start[0]
    t = int(next(i for i in range(1, 40) if ss[i] < i))  # a position inside a multi-interaction step
    start = int(ss[t])
    changed = hist.replace(responses=hist.responses.clone())
    changed.responses[:, start:t] = flipped(changed.responses[:, start:t])
    with torch.no_grad():
        a, _ = model(hist)
        b, _ = model(changed)
    assert torch.allclose(a[0, t], b[0, t], atol=1e-6), f"{name}: a step's own responses leaked into it"


@pytest.mark.parametrize("name", names())
def test_batch_mates_change_nothing(name, make_histories):
    model = build(name)
    learners, _ = with_requests(make_histories([50, 20, 35], N_ITEMS, N_CONCEPTS, 2, seed=4))
    others, _ = with_requests(make_histories([80, 3], N_ITEMS, N_CONCEPTS, 2, seed=5), share=0.3)
    with torch.no_grad():
        alone, _ = model(collate(learners[:1]))
        mixed, _ = model(collate([others[0], learners[0], others[1]]))
    assert torch.allclose(alone[0], mixed[1, :50], atol=1e-6), f"{name}: depends on batch mates"
    served_alone, _ = predict_stepwise(model, collate(learners[:1]))
    served_mixed, _ = predict_stepwise(model, collate([others[0], learners[0], others[1]]))
    assert torch.allclose(served_alone[0], served_mixed[1, :50], atol=1e-6)


@pytest.mark.parametrize("name", names())
def test_predict_does_not_mutate_state(name, make_histories):
    model = build(name)
    _, hist = make_histories([10, 10], N_ITEMS, N_CONCEPTS, 2, seed=6)
    _, state = predict_stepwise(model, hist)
    before = {k: v.clone() for k, v in state.items()}
    with torch.inference_mode():
        model.predict(state, hist.at(3))
        model.update(state, hist.at(3))
    for k in before:
        assert torch.equal(before[k], state[k]), f"{name}: predict/update mutated state[{k!r}]"


@pytest.mark.parametrize("name", names())
def test_a_described_prediction_is_the_prediction_and_per_learner_extras(name, make_histories):
    """``predict(..., describe=True)`` gives ``predict``'s probabilities and extras of leading dim B;
    ``max_values`` only leaves out entries of more numbers per learner."""
    model = build(name)
    _, hist = make_histories([12, 9, 12], N_ITEMS, N_CONCEPTS, 2, seed=8)
    _, state = predict_stepwise(model, hist)
    with torch.inference_mode():
        alone = model.predict(state, hist.at(8))
        probs, extras = model.predict(state, hist.at(8), describe=True)
        capped, few = model.predict(state, hist.at(8), describe=True, max_values=4)
    assert torch.equal(probs, alone) and torch.equal(capped, alone)
    assert all(v.shape[0] == 3 for v in extras.values()), name
    assert set(few) <= set(extras)
    for k, v in extras.items():
        if v[0].numel() <= 4:
            assert k in few and torch.equal(few[k], v), (name, k)


@pytest.mark.parametrize("name", [n for n in names() if family(n).carries_state])
def test_chunked_forward_with_carried_state_equals_full(name, make_histories):
    model = build(name)
    _, hist = with_requests(make_histories([60, 60, 60], N_ITEMS, N_CONCEPTS, 2, seed=7, step_prob=0.0))
    with torch.no_grad():
        full, full_state = model(hist)
        first, state = model(hist.window(0, 25))
        second, state = model(hist.window(25, 60), state)
    assert torch.allclose(torch.cat([first, second], 1), full, atol=1e-5)
    for k in full_state:
        assert torch.allclose(state[k], full_state[k], atol=1e-5)
