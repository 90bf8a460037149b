"""sparseKT's selection: at most k keys per query and head among the visible ones, the
soft-threshold's cumulative mass, exact zeros on masked keys in short rows (where the published
top-k put weight), and both variants served as trained."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from ktstream.data.histories import collate
from ktstream.models import create, family
from ktstream.models.attention import NEG_INF, POSITIONS
from ktstream.models.sparsekt import select_mass, select_topk
from ktstream.models.stepwise import predict_stepwise
from tests.conftest import random_learner
from tests.leakage.leaky_sparsekt import PublishedTopKAttention

N_ITEMS, N_CONCEPTS = 30, 12


def build(**options):
    torch.manual_seed(0)
    return create("sparsekt", n_items=N_ITEMS, n_concepts=N_CONCEPTS,
                  **{**family("sparsekt").tiny_config, "dropout": 0.0, **options}).eval()


def histories(lengths=(40, 3, 25), seed=0, step_prob=0.2):
    rng = np.random.default_rng(seed)
    return collate([random_learner(rng, n, N_ITEMS, N_CONCEPTS, 2, step_prob=step_prob, learner_id=f"u{i}")
                    for i, n in enumerate(lengths)])


def retriever_weights(model, hist):
    """The retriever layers' weights (B, H, T, 1 + T) over the chunk's own positions (no state), one block."""
    calls = []
    hooks = [b.attn.register_forward_hook(lambda m, a, o: calls.append(o[1])) for b in model.retriever]
    model.query_block = hist.shape[1]
    try:
        with torch.no_grad():
            model(hist)
    finally:
        for h in hooks:
            h.remove()
    return calls


def visible_keys(hist, window: int) -> torch.Tensor:
    """(B, T, T) the keys each query may read: applied, before its step, within the window."""
    applied = (hist.mask & (hist.responses >= 0)).long()
    pos = applied.cumsum(1) - applied
    anchor = pos.gather(1, hist.step_start)
    d = anchor.unsqueeze(-1) - pos.unsqueeze(1)
    return applied.bool().unsqueeze(1) & (d >= 1) & (d <= window)


def test_topk_keeps_at_most_k_visible_keys_per_query_and_head():
    model, hist = build(window=12, k=3), histories()
    visible = visible_keys(hist, 12)
    for w in retriever_weights(model, hist):
        keys = w[..., 1:]  # (B, H, T, T)
        nonzero = (keys > 0).sum(-1)  # (B, H, T)
        expected = visible.sum(-1).clamp(max=3).unsqueeze(1).expand_as(nonzero)
        m = hist.mask.unsqueeze(1).expand_as(nonzero)
        assert torch.equal(nonzero[m], expected[m])  # min(k, visible), so also never more than k
        assert bool((keys.masked_fill(visible.unsqueeze(1), 0.0) == 0).all())  # nothing outside the visible keys
        assert torch.allclose(w.sum(-1)[m], torch.ones(int(m.sum())), atol=1e-6)


def test_a_row_with_fewer_than_k_visible_keys_puts_exactly_zero_on_masked_keys():
    logits = torch.tensor([[0.5, NEG_INF, 2.0, NEG_INF, NEG_INF, NEG_INF]])  # 2 visible, k = 4
    kept = select_topk(logits, 4)
    assert torch.equal(torch.isfinite(kept), torch.isfinite(logits))
    model, hist = build(window=12, k=5), histories(step_prob=0.0)
    visible = visible_keys(hist, 12)
    short = (visible.sum(-1) < 5) & hist.mask  # rows 0..4 of each learner
    assert bool(short.any())
    for w in retriever_weights(model, hist):
        keys = w[..., 1:].permute(0, 2, 1, 3)[short]  # (rows, H, T)
        assert bool((keys.masked_fill(visible[short].unsqueeze(1), 0.0) == 0.0).all())
    for blk in model.retriever:  # the published selection on the same model reads masked keys there
        blk.attn.__class__ = PublishedTopKAttention
    leaked = [w[..., 1:].permute(0, 2, 1, 3)[short].masked_fill(visible[short].unsqueeze(1), 0.0).max()
              for w in retriever_weights(model, hist)]
    assert max(float(v) for v in leaked) > 0.01


def test_soft_threshold_keeps_the_smallest_prefix_reaching_the_mass():
    torch.manual_seed(1)
    logits = torch.randn(4, 3, 5, 9)
    visible = torch.rand(4, 1, 5, 9) < 0.7
    masked = logits.masked_fill(~visible, NEG_INF)
    for threshold in (0.3, 0.8, 1.0):
        kept = torch.isfinite(select_mass(masked, threshold))
        assert not bool((kept & ~visible).any())
        p = torch.softmax(masked, -1).nan_to_num(0.0)  # mass among visible keys
        rows = visible.expand_as(masked).any(-1)
        mass = (p * kept).sum(-1)
        assert bool((mass[rows] >= threshold - 1e-6).all())  # reaches the threshold
        smallest = p.masked_fill(~kept, float("inf")).min(-1).values
        assert bool((mass[rows] - smallest[rows] < threshold).all())  # without its smallest key it would not
        # the kept keys are the largest ones: no dropped visible key outweighs a kept one
        dropped = p.masked_fill(kept | ~visible.expand_as(p), -1.0).max(-1).values
        assert bool((dropped[rows] <= smallest[rows]).all())


def test_soft_threshold_model_keeps_part_of_the_window():
    model, hist = build(window=12, sparse="soft", threshold=0.5), histories()
    visible = visible_keys(hist, 12)
    w = retriever_weights(model, hist)[0][..., 1:]
    counts, seen = (w > 0).sum(-1), visible.sum(-1).unsqueeze(1).expand(-1, w.shape[1], -1)
    m = hist.mask.unsqueeze(1).expand_as(counts) & (seen > 3)
    assert bool((counts[m] >= 1).all()) and bool((counts[m] < seen[m]).any())
    assert bool((w.masked_fill(visible.unsqueeze(1), 0.0) == 0).all())


@pytest.mark.parametrize("options", [{"sparse": "topk", "k": 2}, {"sparse": "soft", "threshold": 0.6},
                                     *({"k": 2, "position": p} for p in POSITIONS if p != "monotonic")])
def test_serving_matches_training_beyond_the_window(options):
    model = build(**options)
    hist = histories(lengths=(3 * model.receptive_field() + 5, 7, 20), seed=3)
    with torch.no_grad():
        log_probs, state = model(hist)
    served, served_state = predict_stepwise(model, hist)
    m = hist.mask
    assert torch.allclose(served[m], log_probs.exp()[m], atol=1e-5)
    for k in state:
        assert torch.allclose(state[k].double(), served_state[k].double(), atol=1e-5), k


def test_config_round_trips_and_rejects_unknown_modes():
    model = build(sparse="soft", threshold=0.7, k=4)
    again = create("sparsekt", **model.config())
    assert again.config() == model.config()
    assert again.retriever[0].attn.sparse_mode == "soft" and again.retriever[0].attn.sparse_threshold == 0.7
    with pytest.raises(ValueError):
        build(sparse="entmax")
