"""CORE (ktstream.models.core) around a recurrent and a windowed base: the served prediction is TE - NDE
as the paper writes it, the wrapper computes its base's prediction, serving equals training beyond the
window, and the training loss is the three terms it documents."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from ktstream.models import create, family
from ktstream.models.stepwise import predict_stepwise
from ktstream.serving import WindowedCacheLayout, layout_for
from tests.models.test_contract import N_CONCEPTS, N_ITEMS, with_requests

BASES = {"dkt": family("dkt").tiny_config, "sakt": family("sakt").tiny_config,
         "simplekt": family("simplekt").tiny_config}


def build(base: str, K: int = 2, seed: int = 0):
    torch.manual_seed(seed)
    model = create("core", n_items=N_ITEMS, n_concepts=N_CONCEPTS, n_categories=K, base=base,
                   base_config=BASES[base], bias_dim=8, bias_hidden=8)
    with torch.no_grad():
        model.constant.fill_(0.7)  # a counterfactual constant away from its initial 0
    return model.eval()


@pytest.mark.parametrize("K", [2, 4])
@pytest.mark.parametrize("base", ["dkt", "sakt"])
def test_the_prediction_is_total_minus_natural_direct_effect(base, K, make_histories):
    model = build(base, K)
    _, hist = make_histories([20, 9], N_ITEMS, N_CONCEPTS, K, seed=1)
    with torch.no_grad():
        got, _ = model(hist)
        base_lp, _ = model.base(hist)
        z_k = base_lp - base_lp.mean(-1, keepdim=True)
        z_q = model.bias(model.question(hist.items, hist.concepts))
        te = torch.log(torch.sigmoid(z_k + z_q))
        nde = torch.log(torch.sigmoid(0.7 + z_q))
    expected = F.softmax(te - nde, -1)
    assert torch.allclose(got.exp(), expected, atol=1e-6)
    assert not torch.allclose(got.exp(), F.softmax(te, -1), atol=1e-3), "the direct effect was not subtracted"


@pytest.mark.parametrize("base", ["dkt", "sakt"])
def test_with_the_bias_branch_zeroed_it_serves_its_base_through_the_fusion(base, make_histories):
    """Z_q = 0 and c = 0: p = sigmoid(logit(p_base) / 2) for K = 2, p_base from a separate instance of the
    base family holding the wrapper's base weights (the wrapper really runs its base)."""
    model = build(base)
    with torch.no_grad():
        model.bias[-1].weight.zero_()
        model.bias[-1].bias.zero_()
        model.constant.zero_()
    alone = create(base, n_items=N_ITEMS, n_concepts=N_CONCEPTS, **BASES[base]).eval()
    alone.load_state_dict(model.base.state_dict())
    _, hist = make_histories([25, 12], N_ITEMS, N_CONCEPTS, 2, seed=2)
    with torch.no_grad():
        got, _ = model(hist)
        p_base = alone(hist)[0].exp()[..., 1]
    assert torch.allclose(got.exp()[..., 1], torch.sigmoid(torch.logit(p_base) / 2), atol=1e-6)
    served, _ = predict_stepwise(model, hist)
    assert torch.allclose(served[..., 1][hist.mask], torch.sigmoid(torch.logit(p_base) / 2)[hist.mask], atol=1e-5)


@pytest.mark.parametrize("base", ["sakt", "simplekt"])
def test_a_windowed_base_serves_as_it_trains_beyond_the_window(base, make_histories):
    model = build(base)
    assert model.state_kind == "windowed" and model.receptive_field() == model.base.receptive_field()
    T = 3 * model.receptive_field() + 5
    _, hist = with_requests(make_histories([T, 1, T // 2], N_ITEMS, N_CONCEPTS, 2, seed=3))
    with torch.no_grad():
        log_probs, state = model(hist)
    served, served_state = predict_stepwise(model, hist)
    m = hist.mask
    assert torch.allclose(served[m], log_probs.exp()[m], atol=1e-5)
    assert all(torch.allclose(state[k].double(), served_state[k].double(), atol=1e-5) for k in state)
    layout = layout_for(model)  # the serving layer lays the base's cache out
    assert type(layout) is WindowedCacheLayout
    with torch.inference_mode():
        rows = layout.update_rows(served_state, hist.at(T - 1))
        batched = model.update(served_state, hist.at(T - 1))
    assert all(torch.allclose(r[k].double(), batched[k][b:b + 1].double(), rtol=0, atol=0, equal_nan=True)
               for b, r in enumerate(rows) for k in batched)


@pytest.mark.parametrize("base", ["dkt", "sakt"])
def test_config_rebuilds_the_same_model(base):
    model = build(base)
    again = create("core", **model.config())
    again.load_state_dict(model.state_dict())  # strict: the same parameters under the same names
    assert again.config() == model.config() and again.state_kind == model.state_kind
    with pytest.raises(ValueError, match="must not hold"):
        create("core", n_items=5, n_concepts=5, base_config={"n_items": 5})


def test_the_training_loss_is_the_fused_nll_the_bias_nll_and_the_counterfactual_term(make_histories):
    """With a plain (unchunked) base loss: NLL of softmax(TE) + NLL of softmax(Z_q) + cross-entropy of
    softmax(NDE) against softmax(TE), each summed over the scored positions; the last reaches c only."""
    model = build("dkt")
    model.train()
    model.base.drop.p = model.base.out[2].p = model.base.lstm.dropout = 0.0  # deterministic
    learners, hist = with_requests(make_histories([15, 8], N_ITEMS, N_CONCEPTS, 2, seed=4))
    keep = hist.applied

    def base_loss(batch):
        log_probs, _ = model(batch)
        return F.nll_loss(log_probs[keep], batch.responses[keep], reduction="sum"), int(keep.sum())

    loss, count = model.training_loss(hist, base_loss)
    with torch.no_grad():
        base_lp, _ = model.base(hist)
        z_q = model.bias(model.question(hist.items, hist.concepts))
        te = F.logsigmoid(base_lp - base_lp.mean(-1, keepdim=True) + z_q)
        nde = F.logsigmoid(model.constant + z_q)
        y = hist.responses[keep]
        expected = (F.cross_entropy(te[keep], y, reduction="sum") + F.cross_entropy(z_q[keep], y, reduction="sum")
                    - (F.softmax(te[keep], -1) * F.log_softmax(nde[keep], -1)).sum())
    assert count == int(keep.sum()) and torch.allclose(loss, expected, atol=1e-4)
    loss.backward()
    assert model.constant.grad is not None and model.constant.grad != 0
    assert all(p.grad is not None for p in model.base.parameters() if p.requires_grad)
    assert model._kl is None, "forward must serve the debiased prediction again after training_loss"
    with torch.no_grad():
        after, _ = model.eval()(hist)
    assert torch.allclose(after.exp(), F.softmax(te - nde, -1), atol=1e-5)
