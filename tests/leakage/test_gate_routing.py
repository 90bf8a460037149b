"""Mixture-of-heads routing (the MoH variant: ``shared_heads`` always on, the top ``routed_topk`` of the
others per position) reads only the query position.

A position's head gates are a function of its own question embedding: perturbing the embeddings of
every other position (past or future) leaves the gates at t unchanged in every layer, responses
never reach them, and the serving path, which holds only the query, gives the training path's
gates. The leakage gate passes the MoH variant of every attention family on real data (ASSISTments
2009, AKT's fold 1) and fails a router pooled over the sequence (`leaky_routing`).
"""

from __future__ import annotations

import pytest
import torch

from ktstream.leakage import GateConfig, GateData, run_gate
from ktstream.models import create, family
from ktstream.models.attention import HeadRouter
from ktstream.models.stepwise import predict_stepwise
from ktstream.training.trainer import TrainConfig, fit
from tests.leakage.leaky_routing import MOH, pooled_router_model
from tests.leakage.caught import MODEL_CHECKS, assert_caught

FAMILIES = ["sakt", "simplekt", "akt"]
N_ITEMS, N_CONCEPTS, W = 30, 12, 8


def moh(name: str, seed: int = 0, **options):
    torch.manual_seed(seed)
    return create(name, n_items=N_ITEMS, n_concepts=N_CONCEPTS,
                  **{**family(name).tiny_config, "window": W, **MOH, **options}).eval()


def router_gates(model, hist, question_noise=None, interaction_noise=None) -> list[torch.Tensor]:
    """Every router call of one training forward, (B, H, T, 1) each, with noise (B, T, D) added to the
    question and/or interaction embeddings."""
    seen = []
    hooks = [m.register_forward_hook(lambda mod, args, out: seen.append(out))
             for m in model.modules() if isinstance(m, HeadRouter)]
    embed_q, embed_y = model.embed_question, model.embed_interaction
    if question_noise is not None:
        model.embed_question = lambda items, concepts: embed_q(items, concepts) + question_noise
    if interaction_noise is not None:
        model.embed_interaction = lambda *args: embed_y(*args) + interaction_noise
    try:
        with torch.no_grad():
            model(hist)
    finally:
        for h in hooks:
            h.remove()
        vars(model).pop("embed_question", None), vars(model).pop("embed_interaction", None)
    return seen


def moved_at(model, hist, t: int, side: str) -> tuple[float, float]:
    """The largest change of the gates at position t, and elsewhere, when every question embedding on
    ``side`` of t ("past", "future" or "both") is perturbed (the embedding at t is left alone)."""
    B, T = hist.shape
    j = torch.arange(T)
    where = {"past": j < t, "future": j > t, "both": j != t}[side]
    noise = torch.randn(B, T, model.dim, generator=torch.Generator().manual_seed(t)) * where.view(1, T, 1)
    base, other = router_gates(model, hist), router_gates(model, hist, question_noise=noise)
    assert base and len(base) == len(other)
    at = max(float((a[:, :, t] - b[:, :, t]).abs().max()) for a, b in zip(base, other))
    mask = where.view(1, 1, T, 1)
    rest = max(float(((a - b).abs() * mask).max()) for a, b in zip(base, other))
    return at, rest


@pytest.mark.parametrize("name", FAMILIES)
@pytest.mark.parametrize("side", ["past", "future", "both"])
def test_router_reads_only_its_own_position(name, side, make_histories):
    """Perturbing every other position's question embedding leaves each layer's gates at t exactly as
    they were (and moves the gates of the perturbed positions, so the perturbation reaches routers)."""
    model = moh(name)
    _, hist = make_histories([3 * W, 2 * W], N_ITEMS, N_CONCEPTS, 2, seed=41)
    T = hist.shape[1]
    for t in [0, W - 1, W + 3, T - 1]:
        if (side == "past" and t == 0) or (side == "future" and t == T - 1):
            continue
        at, rest = moved_at(model, hist, t, side)
        assert at == 0.0, f"{name}: gates at {t} moved by {at:.2e} when the {side} moved"
        assert rest > 1e-3, f"{name}: the perturbation did not reach the routers ({rest:.2e})"


@pytest.mark.parametrize("name", FAMILIES)
def test_router_never_reads_interactions_or_responses(name, make_histories):
    """Noise on every interaction embedding (responses included), and flipped responses, leave every
    gate of every layer unchanged."""
    model = moh(name)
    _, hist = make_histories([3 * W, 2 * W], N_ITEMS, N_CONCEPTS, 2, seed=42)
    base = router_gates(model, hist)
    noise = torch.randn(*hist.shape, model.dim, generator=torch.Generator().manual_seed(0))
    flipped = hist.replace(responses=torch.where(hist.responses >= 0, 1 - hist.responses, hist.responses))
    for other in (router_gates(model, hist, interaction_noise=noise), router_gates(model, flipped)):
        assert all(torch.equal(a, b) for a, b in zip(base, other))


@pytest.mark.parametrize("name", FAMILIES)
def test_serving_gates_are_the_training_gates_of_the_query_alone(name, make_histories):
    """``predict(describe=True)`` reports the last retriever layer's gates from the query alone: the same
    for a learner with any history or none, and the gates the training path gave that position."""
    model = moh(name)
    _, hist = make_histories([2 * W + 3, W], N_ITEMS, N_CONCEPTS, 2, seed=43, step_prob=0.0)
    trained = router_gates(model, hist)[-1]  # the last retriever layer's call (B, H, T, 1)
    _, state = predict_stepwise(model, hist)
    empty = model.init_state(2)
    for t in [0, W, 2 * W + 2]:
        query = hist.at(t)
        with torch.no_grad():
            _, full = model.predict(state, query, describe=True)
            _, none = model.predict(empty, query, describe=True)
        assert torch.equal(full["route_gates"], none["route_gates"])
        real = hist.mask[:, t]
        assert torch.allclose(full["route_gates"][real], trained[real, :, t, 0], atol=1e-6)


def test_a_pooled_router_is_caught(make_histories, random_learners):
    """The same checks on a router fed the sequence mean: the gates at t move with the future, and the
    gate's future_perturbation and serving_equivalence fail."""
    torch.manual_seed(0)
    model = pooled_router_model("sakt", N_ITEMS, N_CONCEPTS, window=W).eval()
    _, hist = make_histories([3 * W, 2 * W], N_ITEMS, N_CONCEPTS, 2, seed=41)
    at, _ = moved_at(model, hist, W, "future")
    assert at > 1e-4, f"the pooled router's gates did not move ({at:.2e})"
    checks = ("future_perturbation", "serving_equivalence")
    assert_caught(model, random_learners, checks, "the pooled router", gate_checks=checks, max_length=60)


@pytest.mark.parametrize("name", FAMILIES)
def test_moh_variant_passes_the_model_checks_on_real_data(name, real_slice):
    """The MoH variant, trained one epoch on the real slice: future_perturbation and the other model
    checks pass (the probe lengthens histories and gives them steps and clocks)."""
    data = real_slice
    torch.manual_seed(0)
    model = create(name, n_items=data.n_items, n_concepts=data.n_concepts, **{**family(name).tiny_config, **MOH})
    fitted = fit(model, data.train, data.valid, TrainConfig(epochs=1, lr=3e-3, device="cpu", progress=False))
    gated = GateData(data.train, data.valid, data.test, fit_result=fitted, n_items=data.n_items,
                     n_concepts=data.n_concepts)
    report = run_gate(model, gated, GateConfig(checks=MODEL_CHECKS, max_length=60))
    assert report.passed, report.table()
    assert report["future_perturbation"].status == "pass" and report["attention_masking"].status == "pass"
