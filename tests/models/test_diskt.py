"""DisKT: the two streams, the contradiction flags (decided when an interaction is applied, kept out
of the contradiction attention with weight exactly 0), serving with flags as trained, the
attention maps the gate reads, the streams' distance term."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from ktstream.data.histories import Interactions, collate
from ktstream.models import create, family
from ktstream.models.attention import POSITIONS
from ktstream.models.stepwise import predict_stepwise
from tests.conftest import random_learner

N_ITEMS, N_CONCEPTS = 30, 12


def build(**options):
    torch.manual_seed(0)
    return create("diskt", n_items=N_ITEMS, n_concepts=N_CONCEPTS,
                  **{**family("diskt").tiny_config, "dropout": 0.0, **options}).eval()


def histories(lengths=(40, 3, 25), seed=0, step_prob=0.2, K=2):
    rng = np.random.default_rng(seed)
    return collate([random_learner(rng, n, N_ITEMS, N_CONCEPTS, K, step_prob=step_prob, learner_id=f"u{i}")
                    for i, n in enumerate(lengths)])


def test_each_interaction_enters_one_stream():
    model = build()
    y = torch.randn(1, 4, model.dim)
    r = torch.tensor([[1, 0, 1, 0]])
    f, u = model.streams(y, r)
    assert torch.equal(f[0, 0], y[0, 0]) and torch.equal(f[0, 1], model.absent[0].detach())
    assert torch.equal(u[0, 1], y[0, 1]) and torch.equal(u[0, 0], model.absent[1].detach())
    four = build(n_categories=4)  # ordinal: the upper half of the categories is the familiar stream
    assert four.familiar(torch.tensor([0, 1, 2, 3])).tolist() == [False, False, True, True]


def test_flags_follow_the_knowledge_only_prediction_of_the_observed_response():
    hist = histories(step_prob=0.0)
    with torch.no_grad():
        none = build(contradiction=0.0)(hist)[1]["contra_flag"]
        some = build(contradiction=0.5)(hist)[1]["contra_flag"]
    assert float(none.sum()) == 0.0
    assert 0 < float(some.sum()) < some.numel()
    model = build(contradiction=0.5)  # the rule, recomputed from the knowledge read of each interaction
    with torch.no_grad():
        q = model.embed_question(hist.items, hist.concepts)
        y = model.embed_interaction(hist.items, hist.concepts, hist.responses, q)
        ks = model._append(None, q, y, torch.arange(hist.shape[1]).expand(hist.shape), hist.mask, hist.times)
        x, _ = model._retrieve(ks, q, torch.arange(hist.shape[1]).expand(hist.shape), hist.times, hist.shape[1])
        zero = torch.zeros_like(x)
        h = torch.cat([x - model.difficulty(hist.items, hist.concepts), zero, q], -1)
        p_seen = torch.softmax(model.head(h), -1).gather(-1, hist.responses.clamp(min=0).unsqueeze(-1))[..., 0]
        model._entries(ks, q, y, hist.items, hist.concepts, hist.responses, torch.arange(hist.shape[1]).expand(
            hist.shape), hist.times, None)
    flags = ks.new["contra_flag"][..., 0]
    assert torch.equal(flags.bool()[hist.mask], (p_seen < 0.5)[hist.mask])


def test_flagged_interactions_get_exactly_zero_contradiction_weight():
    model, hist = build(contradiction=0.5, window=12), histories(step_prob=0.0)
    maps = model.attention_maps(hist)
    contra = [m for m in maps if m["name"].startswith("contradiction")]
    assert len(contra) == 1 and contra[0]["keys"] == "past"
    with torch.no_grad():  # the flag of every position (the final state keeps the window's only)
        q = model.embed_question(hist.items, hist.concepts)
        y = model.embed_interaction(hist.items, hist.concepts, hist.responses, q)
        pos = torch.arange(hist.shape[1]).expand(hist.shape)
        ks = model._append(None, q, y, pos, hist.mask, hist.times)
        model._entries(ks, q, y, hist.items, hist.concepts, hist.responses, pos, hist.times, None)
    flagged = ks.new["contra_flag"][..., 0].bool() & hist.mask  # (B, T)
    assert bool(flagged.any())
    w = contra[0]["weights"]  # (B, H, T, T)
    assert bool((w.masked_fill(~flagged.view(w.shape[0], 1, 1, -1), 0.0) == 0).all())
    j = torch.arange(hist.shape[1])
    future = (j.view(1, -1) >= j.view(-1, 1)).view(1, 1, *w.shape[-2:])
    assert bool((w.masked_fill(~future, 0.0) == 0).all())
    unflagged_past = ~flagged.view(w.shape[0], 1, 1, -1) & ~future & hist.mask.view(w.shape[0], 1, -1, 1)
    assert bool((w[unflagged_past.expand_as(w)] > 0).any())


@pytest.mark.parametrize("contradiction, K, position", [(0.5, 2, "monotonic"), (0.3, 4, "monotonic"),
                                                       *((0.5, 2, p) for p in POSITIONS if p != "monotonic")])
def test_serving_matches_training_with_flags_and_steps(contradiction, K, position):
    model = build(contradiction=contradiction, n_categories=K, position=position)
    hist = histories(lengths=(3 * model.receptive_field() + 5, 9, 30), seed=2, step_prob=0.3, K=K)
    with torch.no_grad():
        log_probs, state = model(hist)
    assert float(state["contra_flag"].sum()) > 0
    served, served_state = predict_stepwise(model, hist)
    m = hist.mask
    assert torch.allclose(served[m], log_probs.exp()[m], atol=1e-5)
    for k in state:
        assert torch.allclose(state[k].double(), served_state[k].double(), atol=1e-5), k


def test_keys_are_read_at_their_own_position_where_steps_share_a_start():
    """With steps, a key's read differs from its query's read (step mates before it are in it): the
    gate labels that pass "through_self", and serving (which appends one at a time) agrees."""
    model, hist = build(), histories(step_prob=0.5)
    names = [(m["name"], m["keys"]) for m in model.attention_maps(hist)]
    assert [k for n, k in names if "(keys)" in n] == ["through_self"] * len(model.retriever)
    flat = histories(step_prob=0.0)
    assert all(k == "past" for _, k in [(m["name"], m["keys"]) for m in model.attention_maps(flat)])


def test_describe_reports_the_flagged_share_of_the_window():
    model, hist = build(contradiction=0.5), histories(lengths=(20,), step_prob=0.0)
    state = model.init_state(1)
    for t in range(20):
        one = Interactions(hist.items[:, t], hist.concepts[:, t], hist.responses[:, t], hist.times[:, t])
        state = model.update(state, one)
    probs, extras = model.predict(state, one, describe=True)
    share = float(state["contra_flag"][0, :, 0].sum()) / 8
    assert extras["contradiction_flags"].shape == (1,) and abs(float(extras["contradiction_flags"]) - share) < 1e-6


def test_training_loss_adds_the_streams_distance():
    model = build(reg=0.5)
    model.train()
    hist = histories(step_prob=0.0)
    base = (torch.tensor(3.0), 10)
    loss, n = model.training_loss(hist, lambda b: base)
    assert n == 10 and float(loss.detach()) > 3.0
    assert float(build(reg=0.0).training_loss(hist, lambda b: base)[0]) == 3.0


def test_update_needs_the_window_and_config_round_trips():
    model = build(contradiction=0.3, reg=0.0)
    assert model.appends_from_cache
    with pytest.raises(NotImplementedError):
        model.cache_entries(None)
    assert create("diskt", **model.config()).config() == model.config()
