"""CL4KT (ktstream.models.cl4kt): each augmentation gives a valid history drawn from its span only;
nothing at or after a span's end reaches its views or the contrastive loss, and nothing at or after a
target's step reaches the target's prediction; the contrastive term adds to the loss and trains the encoder."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from ktstream.data.vocab import UNKNOWN
from ktstream.models import create, family
from ktstream.models.cl4kt import spans, views
from tests.models.test_contract import N_CONCEPTS, N_ITEMS, flipped

NONE = dict(crop_prob=0.0, permute_prob=0.0, mask_prob=0.0, replace_prob=0.0)


def build(seed: int = 0, **options):
    torch.manual_seed(seed)
    return create("cl4kt", n_items=N_ITEMS, n_concepts=N_CONCEPTS, **{**family("cl4kt").tiny_config, **options})


@pytest.fixture
def batch(make_histories):
    _, hist = make_histories([40, 25, 33, 2, 1], N_ITEMS, N_CONCEPTS, 2, seed=5)
    hist.times = torch.cumsum(torch.rand(hist.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(1)),
                              1) * 60 + 1.7e9  # clocks, so the test sees where times come from
    return hist


def checked(batch, src, **probs):
    """Views of ``src`` with ``probs``; asserts what every augmentation keeps: a left-aligned valid
    history, every slot's question, response and time those of a position of its own learner's span."""
    g = torch.Generator().manual_seed(7)
    v = views(batch, src, **{**NONE, **probs}, generator=g)
    h, B = v.histories, src.shape[0]
    n = (src >= 0).sum(1)
    valid = h.mask
    assert torch.equal(valid, torch.arange(src.shape[1]) < valid.sum(1, keepdim=True)), "left-aligned"
    assert torch.equal(h.step_start, torch.arange(src.shape[1]).expand_as(h.step_start))
    assert bool((h.responses[valid] >= 0).all() & (h.responses[valid] < 2).all())
    assert bool((h.items >= 0).all() & (h.items < N_ITEMS).all() & (h.concepts >= 0).all()
                & (h.concepts < N_CONCEPTS).all())
    for b in range(B):
        span = set(src[b, : int(n[b])].tolist())
        for j in range(int(valid[b].sum())):
            r, t, q = (int(x[b, j]) for x in (v.responses, v.times, v.questions))
            assert r in span and t in span and (q in span or q == -1), (b, j)
            assert h.responses[b, j] == batch.responses[b, r] and h.times[b, j] == batch.times[b, t]
            if q >= 0:
                assert h.items[b, j] == batch.items[b, q] and torch.equal(h.concepts[b, j], batch.concepts[b, q])
        times = h.times[b, valid[b]]
        assert bool((times[1:] >= times[:-1]).all()), "a view's clock runs forward"
    return v, n


def test_each_augmentation_gives_a_valid_history_from_its_span(batch):
    src = spans(batch, 30, torch.Generator().manual_seed(0))
    n_applied = batch.applied.sum(1)
    n = (src >= 0).sum(1)
    assert torch.equal(n, n_applied.clamp(max=30))
    for b in range(src.shape[0]):  # a run of consecutive applied positions
        applied = batch.applied[b].nonzero().squeeze(1).tolist()
        run = src[b, : int(n[b])].tolist()
        assert run == applied[applied.index(run[0]): applied.index(run[0]) + len(run)] if run else True

    plain, _ = checked(batch, src)
    assert torch.equal(plain.responses, src) and torch.equal(plain.questions, src)

    cropped, _ = checked(batch, src, crop_prob=0.5)
    kept = cropped.histories.mask.sum(1)
    assert torch.equal(kept, torch.ceil(0.5 * n.double()).long().clamp(min=1).minimum(n))
    for b in range(src.shape[0]):  # a contiguous part of the span
        run, part = src[b, : int(n[b])].tolist(), cropped.responses[b, : int(kept[b])].tolist()
        i = run.index(part[0]) if part else 0
        assert part == run[i : i + len(part)]

    permuted, _ = checked(batch, src, permute_prob=0.5)
    moved = 0
    for b in range(src.shape[0]):
        got, run = permuted.responses[b, : int(n[b])], src[b, : int(n[b])]
        assert sorted(got.tolist()) == sorted(run.tolist())
        where = (got != run).nonzero().squeeze(1)
        moved += len(where)
        if len(where):
            assert int(where.max() - where.min()) < math.floor(0.5 * int(n[b])), "one run is shuffled"
        assert torch.equal(permuted.times[b, : int(n[b])], run), "times stay in their slots"
    assert moved > 0

    masked, _ = checked(batch, src, mask_prob=0.4)
    hidden = (masked.questions == -1) & masked.histories.mask
    assert 0 < int(hidden.sum()) < int(n.sum())
    assert bool((masked.histories.items[hidden] == UNKNOWN).all() & (masked.histories.concepts[hidden] == 0).all())

    replaced, _ = checked(batch, src, replace_prob=0.4)
    assert int(((replaced.questions != replaced.responses) & replaced.histories.mask).sum()) > 0


def test_nothing_at_or_after_a_span_end_reaches_its_views_or_the_contrastive_loss(batch):
    """Views of the runs before ``stop``, made with the same random draws, are the same whatever the
    learners did at or after ``stop`` (responses, items, clocks); so is the contrastive loss."""
    stop = 20
    src = spans(batch.window(0, stop), 12, torch.Generator().manual_seed(0))
    assert int(src.max()) < stop
    changed = batch.replace(responses=batch.responses.clone(), items=batch.items.clone(), times=batch.times.clone())
    changed.responses[:, stop:] = flipped(changed.responses[:, stop:])
    changed.items[:, stop:] = (changed.items[:, stop:] + 5) % (N_ITEMS - 2) + 2
    changed.times[:, stop:] += 1e5
    probs = dict(crop_prob=0.3, permute_prob=0.3, mask_prob=0.2, replace_prob=0.3)
    for name, a in views(batch, src, **probs, generator=torch.Generator().manual_seed(3)).__dict__.items():
        b = getattr(views(changed, src, **probs, generator=torch.Generator().manual_seed(3)), name)
        same = [torch.equal(x, y) or torch.allclose(x, y, equal_nan=True)
                for x, y in ((a.__dict__[k], b.__dict__[k]) for k in a.__dict__)] if name == "histories" \
            else [torch.equal(a, b)]
        assert all(same), name
    model = build().eval()
    loss = model.contrastive_loss(batch, src, torch.Generator().manual_seed(3))
    assert loss > 0
    assert torch.equal(loss, model.contrastive_loss(changed, src, torch.Generator().manual_seed(3)))


@pytest.mark.parametrize("t", [3, 17, 30])
def test_a_targets_prediction_loss_reads_nothing_at_or_after_its_step(t, make_histories):
    model = build().eval()
    _, hist = make_histories([40, 40], N_ITEMS, N_CONCEPTS, 2, seed=6, step_prob=0.5)
    B, T = hist.shape
    dq = torch.zeros(B, T, model.dim, requires_grad=True)
    dy = torch.zeros(B, T, model.dim, requires_grad=True)
    question, interaction = model.embed_question, model.embed_interaction
    model.embed_question = lambda items, concepts: question(items, concepts) + dq
    model.embed_interaction = lambda items, concepts, responses, q: interaction(items, concepts, responses, q) + dy
    log_probs, _ = model(hist)
    F.nll_loss(log_probs[:, t], hist.responses[:, t].clamp(min=0), reduction="sum").backward()
    for b in range(B):
        start = int(hist.step_start[b, t])
        assert dy.grad[b, :start].abs().sum() > 0 or start == 0
        assert torch.equal(dy.grad[b, start:], torch.zeros_like(dy.grad[b, start:])), (b, t)
        others = [j for j in range(start, T) if j != t]
        assert torch.equal(dq.grad[b, others], torch.zeros_like(dq.grad[b, others])), (b, t)


def test_the_contrastive_term_adds_to_the_loss_and_trains_the_encoder(batch):
    model = build().train()
    keep = batch.applied
    calls = []

    def base_loss(b):
        calls.append(b)
        log_probs, _ = model(b)
        return F.nll_loss(log_probs[keep], b.responses[keep], reduction="sum"), int(keep.sum())

    torch.manual_seed(1)
    loss, count = model.training_loss(batch, base_loss)
    torch.manual_seed(1)
    nll, same = base_loss(batch)
    assert len(calls) == 2 and calls[0] is batch, "the NLL term is the trainer's, on the batch as given"
    assert count == same and loss > nll
    model.zero_grad()
    model.contrastive_loss(batch).backward()
    for name in ("retriever.0.attn.k.weight", "retriever.0.attn.v.weight", "rasch.concept.weight"):
        assert model.get_parameter(name).grad.abs().sum() > 0, name
    off = build(cl_weight=0.0).train()
    torch.manual_seed(1)
    assert torch.equal(off.training_loss(batch, lambda b: (torch.tensor(1.5), 3))[0], torch.tensor(1.5))


def test_config_rebuilds_the_model_and_options_are_checked():
    model = build(crop_prob=0.1, hard_negatives=False, heads=4, dim=8)
    again = create("cl4kt", **model.config())
    again.load_state_dict(model.state_dict())
    assert again.config() == model.config() and again.config()["heads"] == 4 and again.cl == model.cl
    for bad in (dict(crop_prob=1.0), dict(mask_prob=0.6, replace_prob=0.5), dict(temperature=0.0), dict(cl_span=1)):
        with pytest.raises(ValueError):
            build(**bad)
