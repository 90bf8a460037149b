"""ATKT (family "atkt"): the paper's interaction layout, the causal window its attention reads, and the
adversarial term ``training_loss`` adds (the contract suite covers both paths and causality)."""

from __future__ import annotations

import torch

from ktstream.models import create, family
from ktstream.models.atkt import _Adversary
from ktstream.models.stepwise import predict_stepwise
from ktstream.training.trainer import _loss

N_ITEMS, N_CONCEPTS = 30, 12
TINY = family("atkt").tiny_config


def build(**kw):
    torch.manual_seed(0)
    return create("atkt", n_items=N_ITEMS, n_concepts=N_CONCEPTS, **{**TINY, **kw}).eval()


def test_interaction_is_question_then_answer_when_correct_and_answer_then_question_when_wrong():
    model = build()
    S, A = TINY["skill_dim"], TINY["answer_dim"]
    q = torch.randn(2, S)
    x = model._interaction(q, torch.tensor([1, 0]))
    a = model.answer.weight
    assert torch.equal(x[0], torch.cat([q[0], a[1]])) and torch.equal(x[1], torch.cat([a[0], q[1]]))
    assert x.shape == (2, S + A)


def test_attention_reads_the_last_window_of_hidden_states_and_sums_to_one(make_histories):
    model = build(window=4)
    _, hist = make_histories([3, 12], N_ITEMS, N_CONCEPTS, 2, seed=1, step_prob=0.0)
    _, state = predict_stepwise(model, hist)
    with torch.inference_mode():
        _, extras = model.predict(state, hist.at(2), describe=True)
        _, empty = model.predict(model.init_state(1), hist.at(0).take(slice(0, 1)), describe=True)
    assert extras["attention_positions"].tolist() == [[-1, 0, 1, 2], [8, 9, 10, 11]]
    w = extras["attention"]
    assert w[0, 0] == 0 and bool((w[:, 1:] > 0).all())
    assert torch.allclose(w.sum(-1), torch.ones(2)) and torch.allclose(extras["attention_null"], torch.zeros(2))
    assert float(empty["attention_null"][0]) == 1.0 and float(empty["attention"].abs().sum()) == 0.0


def test_adversarial_term_is_beta_times_the_loss_on_perturbed_embeddings(make_histories):
    _, hist = make_histories([20, 14, 9], N_ITEMS, N_CONCEPTS, 2, seed=2, step_prob=0.3)
    base = lambda m: (lambda b: _loss(m, b, 8))  # noqa: E731  (several windows: several forwards)
    model = build(dropout=0.0, epsilon=2.0, beta=0.5)
    clean, n = base(model)(hist)
    seen = []
    original = _Adversary.__call__

    def spy(self, x):
        out = original(self, x)
        if self.perturbations is not None:
            seen.append(out - x)
        return out

    _Adversary.__call__ = spy
    try:
        total, n2 = model.training_loss(hist, base(model))
    finally:
        _Adversary.__call__ = original
    assert n2 == n and model._adversary is None
    assert len(seen) >= 3, "every forward of the batch is perturbed"
    # epsilon * g / ||g|| per learner and forward; 0 where the embeddings reach no scored prediction (the
    # short forward that predicts a cut step's members from the carried state feeds the LSTM only)
    norms = torch.cat([r.flatten(1).norm(dim=1) for r in seen])
    assert bool((((norms - 2.0).abs() < 1e-4) | (norms == 0)).all()) and int((norms > 0).sum()) >= 3, norms
    adversarial = (total - clean) / 0.5
    assert adversarial > clean, "a step along the loss gradient raises the loss"
    again, _ = base(model)(hist)
    assert torch.equal(again, clean), "training_loss leaves forward unperturbed"
    off, _ = build(dropout=0.0, epsilon=2.0, beta=0.0).training_loss(hist, base(model))
    assert torch.equal(off, clean)


def test_queries_in_blocks_read_what_one_block_reads(make_histories):
    """Long chunks attend in blocks of ``query_block`` queries over a slice of the keys (memory
    O(T (block + W))): the same predictions and final state, also after a carried state."""
    model = build(window=5)
    _, hist = make_histories([70, 41, 66], N_ITEMS, N_CONCEPTS, 2, seed=3, step_prob=0.3)
    with torch.no_grad():
        first, state = model(hist.window(0, 20))
        whole = model._forward(hist.window(20, 70), state, block=1000)
        blocked = model._forward(hist.window(20, 70), state, block=7)
    assert whole[2] is not None and blocked[2] is None
    assert torch.allclose(whole[0], blocked[0], atol=1e-6)
    for k in whole[1]:
        assert torch.equal(whole[1][k], blocked[1][k]), k
