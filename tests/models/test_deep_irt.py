"""Deep-IRT (family "deep-irt"): the paper's link, its explained numbers, and its relation to Deep-GPCM.

Is Deep-IRT the K=2 case of Deep-GPCM? Not as Deep-GPCM stands: Deep-GPCM at K=2 is the 2PL
model sigmoid(alpha (theta - beta)) with a learned discrimination alpha = softplus(.) per item,
unbounded linear theta and beta, and theta anchored to a learner with no history. Deep-IRT,
sigmoid(3.0 * tanh(.) - tanh(.)), is that model under a stated constraint: alpha fixed at 1,
no anchor, ability scale 3.0, and a tanh on the ability and difficulty networks. The test below
builds Deep-GPCM under exactly that constraint, with every shared weight copied across, and
asserts equal probabilities within 1e-6 on both paths; and that without the constraint (the
learned alpha left as it is) they differ.
"""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from ktstream.models import create, family
from ktstream.models.deep_irt import ABILITY_SCALE
from ktstream.models.stepwise import predict_stepwise

N_ITEMS, N_CONCEPTS = 30, 12
TINY = family("deep-irt").tiny_config


def _scramble(module: nn.Module, seed: int, scale: float = 1.5) -> None:
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * scale)


def _gpcm_like(irt) -> nn.Module:
    """Deep-GPCM (K=2, unanchored, ability scale 3, one-hot response embedding: the DKVMN one) holding
    ``irt``'s weights; its learned alpha not yet fixed."""
    gpcm = create("deep-gpcm", n_items=N_ITEMS, n_concepts=N_CONCEPTS, n_categories=2, anchored=False,
                  ability_scale=ABILITY_SCALE, response_embedding="one_hot", **TINY).eval()
    weights = irt.state_dict()
    renamed = {k.replace("interaction.concept.weight", "interaction.concept")
                .replace("interaction.item.weight", "interaction.item"): v for k, v in weights.items()}
    missing, unexpected = gpcm.load_state_dict(renamed, strict=False)
    assert not unexpected and sorted(missing) == ["head.alpha_net.bias", "head.alpha_net.weight"], (missing, unexpected)
    return gpcm


def _constrained(gpcm) -> nn.Module:
    """The constraint: alpha = softplus(0 * key + log(e - 1)) = 1, tanh on theta's and beta's networks."""
    with torch.no_grad():
        gpcm.head.alpha_net.weight.zero_()
        gpcm.head.alpha_net.bias.fill_(math.log(math.e - 1.0))
    gpcm.head.theta_net = nn.Sequential(gpcm.head.theta_net, nn.Tanh())
    gpcm.head.beta_net = nn.Sequential(gpcm.head.beta_net, nn.Tanh())
    return gpcm


@pytest.fixture
def irt():
    torch.manual_seed(0)
    model = create("deep-irt", n_items=N_ITEMS, n_concepts=N_CONCEPTS, **TINY).eval()
    _scramble(model, 1)
    return model


def test_deep_irt_is_deep_gpcm_with_k2_under_the_stated_constraint(irt, make_histories):
    _, hist = make_histories([40, 25, 33], N_ITEMS, N_CONCEPTS, 2, seed=3)
    free = _gpcm_like(irt)
    with torch.no_grad():
        p_irt = irt(hist)[0].exp()
        p_free = free(hist)[0].exp()
    m = hist.mask
    assert (p_irt[m] - p_free[m]).abs().max() > 1e-2, "the learned alpha and the missing tanh should matter"
    gpcm = _constrained(free)
    with torch.no_grad():
        p_gpcm = gpcm(hist)[0].exp()
    assert torch.allclose(p_irt[m], p_gpcm[m], atol=1e-6), (p_irt[m] - p_gpcm[m]).abs().max()
    served_irt, _ = predict_stepwise(irt, hist)
    served_gpcm, _ = predict_stepwise(gpcm, hist)
    assert torch.allclose(served_irt[m], served_gpcm[m], atol=1e-6)


def test_prediction_is_sigmoid_of_three_abilities_minus_difficulty(irt, make_histories):
    """The described ability and difficulty give the prediction through the paper's formula, bounded as
    the tanh bounds them; the difficulty is the item's, the same for every learner."""
    _, hist = make_histories([30, 30, 30], N_ITEMS, N_CONCEPTS, 2, seed=4)
    _, state = predict_stepwise(irt, hist)
    query = hist.at(7)
    query.items[:] = query.items[0]
    query.concepts[:] = query.concepts[0]
    with torch.inference_mode():
        probs, extras = irt.predict(state, query, describe=True)
    theta, beta = extras["ability"], extras["difficulty"]
    assert theta.shape == beta.shape == (3,)
    assert torch.allclose(probs[:, 1], torch.sigmoid(3.0 * theta - beta), atol=1e-6)
    assert bool((theta.abs() < 1).all() and (beta.abs() < 1).all())
    assert torch.allclose(beta, beta[:1].expand(3)), "the difficulty must not depend on the learner"
    assert theta.std() > 1e-4, "the ability must depend on the learner's memory"


def test_partial_credit_thresholds_are_ordered_and_bounded(make_histories):
    torch.manual_seed(2)
    model = create("deep-irt", n_items=N_ITEMS, n_concepts=N_CONCEPTS, n_categories=4, **TINY).eval()
    _scramble(model, 5, scale=1.0)
    _, hist = make_histories([20, 20], N_ITEMS, N_CONCEPTS, 4, seed=5)
    _, state = predict_stepwise(model, hist)
    with torch.inference_mode():
        probs, extras = model.predict(state, hist.at(5), describe=True)
    betas = extras["thresholds"]
    assert betas.shape == (2, 3) and bool((betas.diff(dim=-1) > 0).all()) and bool((betas.abs() < 1).all())
    assert torch.allclose(extras["difficulty"], betas.mean(-1))
    assert torch.allclose(probs.sum(-1), torch.ones(2), atol=1e-6)
