"""Attention families (SAKT, AKT, simpleKT): windows, options, exact-zero masking, routing, caches.

The shared contract suite runs on the tiny configs; these tests add every option
(time-decay relation, head routing, fp16 cache, the position variants), history
lengths around the window (1, W-1, W, 3W), clockless histories and prediction
requests."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch

from ktstream.data.histories import collate
from ktstream.models import create, family, kvcache
from ktstream.models.attention import (POSITIONS, RELATIVE_BUCKETS, SOFTMAX_MIN_COLUMNS, HeadRouter, WindowAttention,
                                       alibi_slopes, relative_buckets, softmax_of_columns, window)
from ktstream.models.stepwise import predict_stepwise
from ktstream.serving import StackBuffer, WindowState, arena as arena_module, layout_for, stack_states, window_arena

N_ITEMS, N_CONCEPTS, W = 30, 12, 8
FAMILIES = ["sakt", "akt", "simplekt"]
OPTIONS = {"plain": {}, "time_decay": {"time_decay": True, "relation_dim": 4},
           "routing": {"heads": 4, "shared_heads": 1, "routed_topk": 2},
           "both": {"heads": 4, "shared_heads": 1, "routed_topk": 2, "time_decay": True, "relation_dim": 4}}
OPTIONS.update({position: {"position": position} for position in POSITIONS if position != "monotonic"})
OPTIONS["context+both"] = {**OPTIONS["both"], "position": "context"}


def build(name, K=2, seed=0, **options):
    torch.manual_seed(seed)
    config = {**family(name).tiny_config, "window": W, **options}
    return create(name, n_items=N_ITEMS, n_concepts=N_CONCEPTS, n_categories=K, **config).eval()


def states_equal(a, b, atol=1e-5):
    return all(torch.allclose(a[k].double(), b[k].double(), atol=atol, equal_nan=True) for k in a)


def check_equivalence(model, hist, atol=1e-5):
    with torch.no_grad():
        log_probs, batch_state = model(hist)
    served, served_state = predict_stepwise(model, hist)
    m = hist.mask
    gap = (served[m] - log_probs.exp()[m]).abs().max()
    assert gap <= atol, f"{model.name}: serving differs from training by {gap:.2e}"
    return batch_state, served_state


@pytest.mark.parametrize("name,option", itertools.product(FAMILIES, OPTIONS))
def test_train_serve_equivalence_around_the_window(name, option, make_histories):
    model = build(name, **OPTIONS[option])
    _, hist = make_histories([1, W - 1, W, 3 * W], N_ITEMS, N_CONCEPTS, 2, seed=11)
    batch_state, served_state = check_equivalence(model, hist)
    assert states_equal(batch_state, served_state), f"{name}/{option}: final caches differ"
    assert batch_state["count"].tolist() == [1, W - 1, W, 3 * W]


@pytest.mark.parametrize("name", FAMILIES)
def test_equivalence_without_clock_and_with_prediction_requests(name, make_histories):
    model = build(name, K=3, **OPTIONS["both"])
    _, hist = make_histories([3 * W, 2 * W + 1], N_ITEMS, N_CONCEPTS, 3, seed=12)
    hist = hist.replace(times=torch.full_like(hist.times, float("nan")), responses=hist.responses.clone())
    hist.responses[0, 5::4] = -1  # requests without outcome: predicted, never appended
    batch_state, served_state = check_equivalence(model, hist)
    assert states_equal(batch_state, served_state)
    assert batch_state["count"][0] == int((hist.responses[0] >= 0).sum())


@pytest.mark.parametrize("name,option", itertools.product(FAMILIES, ["time_decay", "routing"]))
def test_chunks_with_carried_cache_equal_one_pass(name, option, make_histories):
    model = build(name, **OPTIONS[option])
    _, hist = make_histories([3 * W + 2, 2 * W, 5], N_ITEMS, N_CONCEPTS, 2, seed=13, step_prob=0.0)
    with torch.no_grad():
        full, full_state = model(hist)
        parts, state = [], None
        for start, stop in [(0, 5), (5, 6), (6, W + 9), (W + 9, 3 * W + 2)]:
            out, state = model(hist.window(start, stop), state)
            parts.append(out)
    m = hist.mask
    assert torch.allclose(torch.cat(parts, 1)[m], full[m], atol=1e-5)
    assert states_equal(state, full_state)


@pytest.mark.parametrize("name,option", itertools.product(FAMILIES, ["plain", "both"]))
def test_current_response_and_later_do_not_reach_earlier_predictions(name, option, make_histories):
    model = build(name, **OPTIONS[option])
    _, hist = make_histories([3 * W, 3 * W], N_ITEMS, N_CONCEPTS, 2, seed=14)
    with torch.no_grad():
        base, _ = model(hist)
        for t in [0, W - 1, W, 2 * W + 3]:
            changed = hist.replace(responses=hist.responses.clone(), items=hist.items.clone(),
                                   concepts=hist.concepts.clone(), times=hist.times.clone())
            changed.responses[:, t:] = 1 - changed.responses[:, t:]
            changed.items[:, t + 1:] = (changed.items[:, t + 1:] + 5) % (N_ITEMS - 2) + 2
            changed.concepts[:, t + 1:] = 0
            changed.times[:, t + 1:] += 9e5
            out, _ = model(changed)
            assert torch.allclose(out[:, : t + 1], base[:, : t + 1], atol=1e-6, rtol=0), f"{name}: leak at {t}"


@pytest.mark.parametrize("name", FAMILIES)
def test_nothing_beyond_the_receptive_field_matters_and_the_window_does(name, make_histories):
    model = build(name, **OPTIONS["time_decay"])
    _, hist = make_histories([4 * W + 3], N_ITEMS, N_CONCEPTS, 2, seed=15, step_prob=0.0)
    T, field = hist.shape[1], model.receptive_field()
    old = hist.replace(responses=hist.responses.clone())
    old.responses[:, : T - 1 - field] = 1 - old.responses[:, : T - 1 - field]
    recent = hist.replace(responses=hist.responses.clone())
    recent.responses[:, T - 4: T - 1] = 1 - recent.responses[:, T - 4: T - 1]
    with torch.no_grad():
        base, _ = model(hist)
        assert torch.allclose(model(old)[0][:, -1], base[:, -1], atol=1e-6, rtol=0)
        assert not torch.allclose(model(recent)[0][:, -1], base[:, -1], atol=1e-6)


def record_attention(model):
    """Every attention call of the next forward: (module, window, weights)."""
    calls = []
    hooks = [m.register_forward_hook(lambda mod, args, out: calls.append((mod, args[3], out[1])))
             for m in model.modules() if isinstance(m, WindowAttention)]
    return calls, hooks


@pytest.mark.parametrize("name,option", itertools.product(FAMILIES, ["plain", "both"]))
def test_masked_positions_get_exactly_zero_weight(name, option, make_histories):
    assert_exact_masking(build(name, **OPTIONS[option]), make_histories)


def assert_exact_masking(model, make_histories):
    """Every attention call of every layer: the window is the step/window semantics and every weight
    outside it is exactly 0; each row sums to 1 (one softmax)."""
    _, hist = make_histories([3 * W, W - 1], N_ITEMS, N_CONCEPTS, 2, seed=16, step_prob=0.4)
    calls, hooks = record_attention(model)
    with torch.no_grad():
        model(hist)
    for h in hooks:
        h.remove()
    T = hist.shape[1]
    j = torch.arange(T)
    ss = hist.step_start.unsqueeze(-1)  # (B, T, 1)
    retrieval = hist.mask.unsqueeze(1) & (j >= ss - W) & (j < ss)  # what a prediction may read
    encoding = hist.mask.unsqueeze(1) & (j >= j.view(-1, 1) - W) & (j <= j.view(-1, 1))  # an appended position
    assert len(calls) == sum(1 for m in model.modules() if isinstance(m, WindowAttention)) + \
        (len(model.encoders[model.query_encoder]) if model.query_encoder in model.encoders else 0)
    for module, win, w in calls:
        keys = w[..., 1: 1 + T]  # (B, H, T, T): without the null slot and a query's own slot
        appending = bool(win.allowed.diagonal(dim1=1, dim2=2).any())  # encoder over interactions
        expected = encoding if appending else retrieval
        real = hist.mask.unsqueeze(-1)  # padded query rows are never read
        assert torch.equal(win.allowed & real, expected & real), "window differs from the step/window semantics"
        assert bool((keys.masked_select(~win.allowed.unsqueeze(1)) == 0).all()), "masked key with weight != 0"
        assert torch.allclose(w.sum(-1), torch.ones_like(w[..., 0]), atol=1e-5)


@pytest.mark.parametrize("name", FAMILIES)
def test_first_interaction_predicts_from_an_empty_cache(name, make_histories):
    model = build(name, **OPTIONS["both"])
    _, hist = make_histories([5, 5], N_ITEMS, N_CONCEPTS, 2, seed=17)
    state = model.init_state(2)
    probs = model.predict(state, hist.at(0))
    assert torch.isfinite(probs).all() and torch.allclose(probs.sum(-1), torch.ones(2))
    _, info = model.predict(state, hist.at(0), describe=True)
    assert torch.equal(info["attention"], torch.zeros(2, W)) and torch.allclose(info["attention_null"], torch.ones(2))


@pytest.mark.parametrize("name", FAMILIES)
def test_describe_reports_weights_over_the_cached_past(name, make_histories):
    model = build(name, **OPTIONS["routing"])
    _, hist = make_histories([W + 3, 2], N_ITEMS, N_CONCEPTS, 2, seed=18, step_prob=0.0)
    _, state = predict_stepwise(model, hist)
    _, info = model.predict(state, hist.at(0), describe=True)
    assert torch.allclose(info["attention"].sum(-1) + info["attention_null"], torch.ones(2), atol=1e-5)
    assert torch.allclose(info["attention_heads"].mean(1), info["attention"], atol=1e-6)
    assert info["attention_positions"][0].tolist() == list(range(3, W + 3))
    assert info["attention_positions"][1].tolist() == [-1] * (W - 2) + [0, 1]
    assert bool((info["attention"][1, : W - 2] == 0).all())  # empty slots
    assert bool((info["attention_entropy"] >= 0).all()) and bool((info["head_diversity"] >= -1e-6).all())
    gates = info["route_gates"]  # 1 shared + top-2 of 3 routed heads on, one head exactly off
    assert gates.shape == (2, 4) and ((gates > 0).sum(-1) == 3).all() and (gates[:, 0] == 1).all()


@pytest.mark.parametrize("name,window", itertools.product(FAMILIES, [W, 40, 80]))
def test_described_for_messages_is_what_messages_carry(name, window, make_histories):
    """predict(describe=True, max_values=64), the engine's call, leaves out only the window-wide entries a
    prediction message would drop anyway (more than 64 numbers per learner): the messages are the same."""
    from ktstream.engine.messages import describe_rows
    from ktstream.schema import MAX_EXTRA_VALUES

    model = build(name, **{**OPTIONS["routing"], "window": window})  # 4 heads: H * W = 32, 160 or 320 numbers
    _, hist = make_histories([window + 3, 2], N_ITEMS, N_CONCEPTS, 2, seed=19, step_prob=0.0)
    _, state = predict_stepwise(model, hist)
    probs, part = model.predict(state, hist.at(0), describe=True, max_values=MAX_EXTRA_VALUES)
    assert torch.equal(probs, model.predict(state, hist.at(0)))
    _, full = model.predict(state, hist.at(0), describe=True)
    left_out = {k for k, v in full.items() if v[0].numel() > MAX_EXTRA_VALUES}
    assert left_out == {W: set(), 40: {"attention_heads"}, 80: {"attention", "attention_heads", "attention_positions"}}[window]
    assert set(part) == set(full) - left_out
    assert describe_rows(part) == describe_rows(full)


@pytest.mark.parametrize("name", ["akt", "simplekt", "sakt"])
def test_routing_is_token_wise_and_never_sees_responses(name, make_histories):
    model = build(name, **OPTIONS["routing"])
    _, hist = make_histories([2 * W, 2 * W], N_ITEMS, N_CONCEPTS, 2, seed=19)
    t = W + 2
    other = hist.replace(items=hist.items.clone(), concepts=hist.concepts.clone(), responses=1 - hist.responses)
    keep = torch.arange(hist.shape[1]) == t
    other.items[:, ~keep] = (other.items[:, ~keep] + 3) % (N_ITEMS - 2) + 2
    other.concepts[:, ~keep] = (other.concepts[:, ~keep] + 1) % N_CONCEPTS

    def gates(h):
        seen = []
        hooks = [m.register_forward_hook(lambda mod, args, out: seen.append(out))
                 for m in model.modules() if isinstance(m, HeadRouter)]
        with torch.no_grad():
            model(h)
        for hk in hooks:
            hk.remove()
        return seen

    a, b = gates(hist), gates(other)
    assert a and len(a) == len(b)
    for ga, gb in zip(a, b):  # every router call of every layer: (B, H, T, 1)
        assert torch.equal(ga[:, :, t], gb[:, :, t]), "a position's routing moved with other positions"
        assert not torch.equal(ga, gb)


@pytest.mark.parametrize("name", FAMILIES)
def test_fp16_cache_halves_storage_and_stays_close(name, make_histories):
    full, half = build(name), build(name, cache_dtype="float16")
    _, hist = make_histories([3 * W, W], N_ITEMS, N_CONCEPTS, 2, seed=20)
    with torch.no_grad():
        reference, _ = full(hist)
    served, state = predict_stepwise(half, hist)
    assert all(state[k].dtype == torch.float16 for k in half.cache_dims())
    clock = 8 * W + 8  # float64 times and the count stay as they are
    assert kvcache.nbytes(state) - clock == (kvcache.nbytes(full.init_state(1)) - clock) // 2
    gap = (served[hist.mask] - reference.exp()[hist.mask]).abs().max()
    assert gap < 5e-3, f"fp16 storage moved predictions by {gap:.2e}"  # storage rounding only (documented)


@pytest.mark.parametrize("name", FAMILIES)
def test_time_decay_uses_the_clock_and_tolerates_its_absence(name, make_histories):
    model = build(name, **OPTIONS["time_decay"])
    _, hist = make_histories([2 * W, W], N_ITEMS, N_CONCEPTS, 2, seed=21)
    stretched = hist.replace(times=hist.times[:, :1] + (hist.times - hist.times[:, :1]) * 30)
    clockless = hist.replace(times=torch.full_like(hist.times, float("nan")))
    with torch.no_grad():
        assert not torch.allclose(model(hist)[0], model(stretched)[0], atol=1e-4)
    model.train()
    out, _ = model(clockless)
    out[hist.mask].sum().backward()
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    assert torch.isfinite(out).all() and all(torch.isfinite(g).all() for g in grads)


def test_unseen_items_get_their_concepts_representation():
    model = build("akt")
    with torch.no_grad():
        model.rasch.difficulty.weight.normal_()
    concepts = torch.tensor([[[3, 4]]])
    unknown = model.embed_question(torch.tensor([[1]]), concepts)
    known = model.embed_question(torch.tensor([[7]]), concepts)
    assert torch.allclose(unknown, model.rasch.concept(concepts).mean(-2))
    assert not torch.allclose(known, unknown)


def test_a_cached_learner_is_independent_of_batch_order(make_histories):
    model = build("akt", **OPTIONS["both"])
    learners, _ = make_histories([2 * W, 3, 3 * W], N_ITEMS, N_CONCEPTS, 2, seed=22)
    order = np.array([2, 0, 1])
    a, _ = predict_stepwise(model, collate(learners))
    b, _ = predict_stepwise(model, collate([learners[i] for i in order]))
    assert torch.allclose(a[2, : 3 * W], b[0, : 3 * W], atol=1e-6)


@pytest.mark.parametrize("cache_dtype", ["float32", "float16"])
def test_caches_are_appended_in_place_in_the_arena_only(cache_dtype, make_histories):
    """``update_rows`` on previous states writes into its layout's arena only: previous states that
    view other memory (here rows of one batch, as a decoded store blob may) are copied into rows
    and never written; a state in the arena moves on one slot within its row, a retry from the
    same state writes the same slot again, and when the row's spare slots are used up the window
    moves to another row. Every state equals ``update``'s and no earlier state changes."""
    model = build("sakt", cache_dtype=cache_dtype)
    layout = layout_for(model)
    spare = window_arena.spare_slots(W)
    T = W + 2 + spare + 3
    _, hist = make_histories([T + 1] * 3, N_ITEMS, N_CONCEPTS, 2, seed=23)
    made = []
    with torch.inference_mode():
        _, batch = predict_stepwise(model, hist.window(0, W + 2))
        before = {k: v.clone() for k, v in batch.items()}
        rows = [{k: v[b:b + 1] for k, v in batch.items()} for b in range(3)]
        for t in range(W + 2, T):
            stacked = stack_states(rows)
            expected = model.update(stacked, hist.at(t))
            layout.update_rows(stacked, hist.at(t), rows)  # staged, then dropped (an abort)
            new = layout.update_rows(stacked, hist.at(t), rows)
            assert all(isinstance(r, WindowState) for r in new)
            assert all(states_equal(r, {k: v[b:b + 1] for k, v in expected.items()}, atol=0)
                       for b, r in enumerate(new))
            for old, r in zip(rows, new):
                if t == W + 2:  # copied out of the batch
                    assert r.first == 0
                elif old.first + W < W + spare:  # in place: same row, one slot on
                    assert r.row is old.row and r.first == old.first + 1
                else:  # spare slots used up: another row
                    assert r.row is not old.row and r.first == 0
            made += [(r, {k: v.clone() for k, v in r.items()}) for r in new]
            rows = new
        assert all(torch.equal(batch[k], before[k]) for k in batch), "wrote into memory it does not own"
        assert all(all(torch.equal(s[k], v) for k, v in values.items()) for s, values in made), "a state changed"
    assert {r.first for r in rows} == {1}  # copied in, ``spare`` appends in place, moved, one more


@pytest.mark.parametrize("updates", ["in its first row", "after a move"])
def test_arena_rows_are_reused_only_when_nothing_refers_to_them(updates, make_histories):
    """A row goes back to the arena when the last state or tensor made from it goes (the cache
    evicting a learner, the engine dropping a staged state), and a new learner taking it sees
    empty slots, not the earlier learner's: whether the earlier window was appended in that row
    only (slots from W - 1 on) or moved into it (the slots before too)."""
    model = build("sakt")
    layout = layout_for(model)
    T = W - 1 if updates == "in its first row" else window_arena.spare_slots(W) + 3  # moved, then one append
    _, hist = make_histories([T + 1, T + 1], N_ITEMS, N_CONCEPTS, 2, seed=24)
    with torch.inference_mode():
        rows = [model.init_state(1)] * 2
        for t in range(T):
            rows = layout.update_rows(stack_states(rows), hist.at(t), rows)
        assert all(r.first == (T - 1 if updates == "in its first row" else 1) for r in rows)
        arena, taken = layout.arena(), {r.row.index for r in rows}
        assert len(taken) == 2 and not taken & set(arena.free)
        view = rows[0]["retriever_0_k"]
        del rows
        assert len(taken & set(arena.free)) == 1, "a row was freed while a view of it lives"
        del view
        assert taken <= set(arena.free)
        start = [model.init_state(1)] * 2
        new = layout.update_rows(stack_states(start), hist.at(T), start)
        expected = model.update(stack_states(start), hist.at(T))
    assert {r.row.index for r in new} == taken  # the freed rows, taken again
    assert all(states_equal(r, {k: v[b:b + 1] for k, v in expected.items()}, atol=0) for b, r in enumerate(new))


def test_an_arena_grows_without_changing_any_state(make_histories):
    """More learners than reserved rows: the arena grows, every state still equals ``update``'s and
    tensors read before the growth still read what they did."""
    model = build("sakt")
    layout = layout_for(model)
    layout._arena = window_arena.WindowArena(model.cache_dims(), W, torch.float32, rows=2)
    _, hist = make_histories([W + 2] * 5, N_ITEMS, N_CONCEPTS, 2, seed=26)
    with torch.inference_mode():
        rows = [model.init_state(1)] * 5
        first = layout.update_rows(stack_states(rows[:1]), hist.select([0]).at(0), rows[:1])
        early = {k: (v, v.clone()) for k, v in first[0].items()}
        for t in range(W + 2):
            expected = model.update(stack_states(rows), hist.at(t))
            rows = layout.update_rows(stack_states(rows), hist.at(t), rows)
            assert all(states_equal(r, {k: v[b:b + 1] for k, v in expected.items()}, atol=0)
                       for b, r in enumerate(rows))
    assert len(layout.arena().used) >= 8
    assert all(torch.equal(view, copy) for view, copy in early.values())


def _huge_pages_allowed(address: int) -> bool | None:
    """THPeligible of the mapping holding ``address`` (/proc/self/smaps); None where the kernel does not say."""
    try:
        lines = open("/proc/self/smaps").read().splitlines()
    except OSError:
        return None
    inside = False
    for line in lines:
        head = line.split()[0]
        if "-" in head and not head.endswith(":"):
            start, end = (int(x, 16) for x in head.split("-"))
            inside = start <= address < end
        elif inside and head == "THPeligible:":
            return line.split()[1] == "1"
    return None


def test_arena_memory_is_zeroed_plain_pages():
    """Arena arrays start as zeros, are writable, and are kept off transparent huge pages: a first
    write into a huge page zeroes (and may compact) 2 MB in place, which stalled the engine for
    tens of milliseconds on every batch of new learners (see ktstream.serving.arena.zeros)."""
    a = arena_module.zeros((4096, 250, 64), np.float32)  # 256 MB of address space, as an arena reserves
    assert a.shape == (4096, 250, 64) and a.flags.c_contiguous and a.flags.writeable
    a[17, 3] = 1.5
    assert a[17, 3, 0] == 1.5 and not a[16].any() and not a[18].any()
    middle = a.__array_interface__["data"][0] + a.nbytes // 2
    eligible = _huge_pages_allowed(middle)
    if eligible is None:
        pytest.skip("the kernel does not report THPeligible in /proc/self/smaps")
    assert not eligible, "arena memory may be backed by transparent huge pages"


@pytest.mark.parametrize("name,option", itertools.product(FAMILIES, OPTIONS))
def test_a_batch_cut_to_its_filled_slots_serves_as_the_whole_window(name, option, make_histories):
    """``filled_slots``: learners with short histories stacked without their empty leading slots
    (what the engine's runner does) predict, describe and update as from whole windows; a batch of
    learners with no history at all is cut to no slot."""
    model = build(name, **OPTIONS[option])
    layout = layout_for(model)
    _, hist = make_histories([W + 2, W + 2, W + 2], N_ITEMS, N_CONCEPTS, 2, seed=25)
    with torch.inference_mode():
        for applied in ([0, 0, 0], [1, 4, 2], [0, W - 2, 3]):  # learners' history lengths
            rows = [predict_stepwise(model, hist.select([b]).window(0, n))[1] if n else model.init_state(1)
                    for b, n in enumerate(applied)]
            whole = stack_states(rows)
            assert whole["count"].tolist() == applied
            tail = layout.filled_slots(rows)
            assert tail is not None and set(tail.values()) == {max(applied)}
            cut = StackBuffer().stack(rows, tail)
            assert cut["time"].shape[1] == max(applied)
            query = hist.at(W)
            p_whole, d_whole = model.predict(whole, query, describe=True)
            p_cut, d_cut = model.predict(cut, query, describe=True)
            assert torch.allclose(p_cut, p_whole, atol=1e-6)
            assert d_cut.keys() == d_whole.keys()
            assert all(d_cut[k].shape == d_whole[k].shape and torch.allclose(d_cut[k], d_whole[k], atol=1e-6)
                       for k in d_whole)
            expected = model.update(whole, query)
            for update in (False, True):
                batch = StackBuffer().stack(rows, layout.filled_slots(rows, update=update))
                for b, r in enumerate(layout.update_rows(batch, query, rows)):
                    assert states_equal(r, {k: v[b:b + 1] for k, v in expected.items()}, atol=1e-6)
            assert states_equal(model.update(cut, query), expected, atol=1e-6)


def test_stack_buffer_cuts_windows_to_their_last_slots():
    rows = [{"w": torch.arange(12.0).view(1, 6, 2) + 100 * b, "time": torch.arange(6.0, dtype=torch.float64).view(1, 6),
             "n": torch.tensor([b])} for b in range(3)]
    buf = StackBuffer()
    whole = buf.stack(rows)
    assert torch.equal(whole["w"], torch.cat([r["w"] for r in rows]))
    cut = buf.stack(rows, {"w": 2, "time": 0})  # the same buffers, reused
    assert torch.equal(cut["w"], torch.cat([r["w"] for r in rows])[:, 4:]) and cut["w"].is_contiguous()
    assert cut["time"].shape == (3, 0) and torch.equal(cut["n"], torch.tensor([0, 1, 2]))
    assert torch.equal(buf.stack(rows[:2])["w"], torch.cat([r["w"] for r in rows[:2]]))


@pytest.mark.parametrize("name", FAMILIES)
def test_blocked_forward_equals_one_block(name, make_histories):
    model = build(name, **OPTIONS["both"])
    _, hist = make_histories([5 * W, 3 * W + 1, 2], N_ITEMS, N_CONCEPTS, 2, seed=23, step_prob=0.5)
    hist = hist.replace(responses=hist.responses.clone())
    hist.responses[1, 3::5] = -1
    with torch.no_grad():
        whole, whole_state = model(hist)
        model.query_block = 5  # blocks smaller than the window, steps crossing them
        blocked, blocked_state = model(hist)
    assert torch.allclose(blocked[hist.mask], whole[hist.mask], atol=1e-6)
    assert states_equal(blocked_state, whole_state, atol=1e-6)


def test_explain_heatmap_rows_are_the_served_attention(make_histories, tmp_path):
    from ktstream.cli.main import main
    from ktstream.data.eventlog import write_events
    from ktstream.models.stepwise import attention_map

    model = build("akt", **OPTIONS["routing"])
    _, hist = make_histories([3 * W], N_ITEMS, N_CONCEPTS, 2, seed=24, step_prob=0.3)
    heat, infos = attention_map(model, hist)
    assert np.allclose(heat.sum(1), 1.0, atol=1e-5)
    for t in range(3 * W):
        ss = int(hist.step_start[0, t])
        outside = np.ones(3 * W, dtype=bool)
        outside[max(0, ss - W): ss] = False
        assert (heat[t, 1:][outside] == 0).all(), f"row {t} reads outside its window"
    records = [{"event_id": f"e{i}", "learner_id": "u" if i < 30 else "v", "item_id": f"q{i % 7}",
                "concept_ids": [f"c{i % 3}"], "response": i % 2, "event_time": 1_700_000_000_000 + 60_000 * i,
                "seq": i} for i in range(40)]
    write_events(records, tmp_path / "events.jsonl")
    out = tmp_path / "att.png"
    assert main(["explain", str(tmp_path / "events.jsonl"), "--learner", "u", "--model", "sakt",
                 "--model-arg", "dim=8", "--model-arg", "heads=2", "--model-arg", "window=8", "-o", str(out)]) == 0
    assert out.stat().st_size > 1000


@pytest.mark.parametrize("width", [1, 2, SOFTMAX_MIN_COLUMNS - 1, SOFTMAX_MIN_COLUMNS, 40])
def test_softmax_of_columns_is_the_softmax_of_the_concatenation(width):
    """Narrow softmaxes are computed over -inf columns added to reach SOFTMAX_MIN_COLUMNS (torch's
    CPU kernel is slow under it): the same weights, masked entries exactly 0, the same gradients."""
    torch.manual_seed(0)
    null = torch.randn(3, 2, 4, 1, requires_grad=True)
    logits = torch.randn(3, 2, 4, width - 1).masked_fill(torch.rand(3, 2, 4, width - 1) < 0.3, float("-inf"))
    logits.requires_grad_(True)
    got = softmax_of_columns([null, logits])
    want = torch.softmax(torch.cat([null, logits], -1), -1)
    assert got.shape == want.shape and torch.allclose(got, want, atol=1e-7)
    assert torch.equal(got == 0, want == 0)
    g = torch.randn_like(want)
    (got * g).sum().backward()
    grads = null.grad.clone(), logits.grad.clone()
    null.grad = logits.grad = None
    (want * g).sum().backward()
    assert torch.allclose(grads[0], null.grad, atol=1e-6) and torch.allclose(grads[1], logits.grad, atol=1e-6)


# -- position variants (option ``position``) ---------------------------------------------------------------


@pytest.mark.parametrize("name,position", itertools.product(FAMILIES, POSITIONS))
def test_position_variants_mask_exactly_and_round_trip_their_config(name, position, make_histories):
    """Every variant, with routing and the time-decay relation: masked keys exactly 0 in every layer, one
    softmax per row; ``config()`` names the variant and rebuilds the same model."""
    model = build(name, **{**OPTIONS["both"], "position": position})
    assert_exact_masking(model, make_histories)
    config = model.config()
    assert config["position"] == position
    again = create(name, **config).eval()
    again.load_state_dict(model.state_dict())
    _, hist = make_histories([2 * W, 5], N_ITEMS, N_CONCEPTS, 2, seed=30)
    with torch.no_grad():
        assert torch.equal(again(hist)[0], model(hist)[0])


@pytest.mark.parametrize("name,position", itertools.product(FAMILIES, POSITIONS))
def test_position_variants_in_chunks_and_blocks_equal_one_pass(name, position, make_histories):
    """Training in chunks with the carried cache, and in query blocks smaller than the window, gives the
    one-pass outputs and final cache (the context distance reads keys of the cache and the chunk)."""
    model = build(name, position=position)
    _, hist = make_histories([3 * W + 2, 2 * W, 5], N_ITEMS, N_CONCEPTS, 2, seed=31, step_prob=0.3)
    m = hist.mask
    with torch.no_grad():
        full, full_state = model(hist)
        parts, state = [], None
        for start, stop in [(0, 5), (5, 6), (6, W + 9), (W + 9, 3 * W + 2)]:
            out, state = model(hist.window(start, stop), state)
            parts.append(out)
        model.query_block = 5
        blocked, blocked_state = model(hist)
    assert torch.allclose(torch.cat(parts, 1)[m], full[m], atol=1e-5) and states_equal(state, full_state)
    assert torch.allclose(blocked[m], full[m], atol=1e-6) and states_equal(blocked_state, full_state, atol=1e-6)


def test_position_variants_differ_and_monotonic_is_the_default(make_histories):
    """The default is the monotonic decay (no ``position`` given: the same outputs). ALiBi and the context
    distance change the predictions; the relative table starts as the monotonic decay (with a bucket per
    distance, the same outputs) and changes them once it moves. An unknown name is refused."""
    _, hist = make_histories([3 * W], N_ITEMS, N_CONCEPTS, 2, seed=32)
    relative = build("sakt", position="relative")
    with torch.no_grad():
        default = build("sakt")(hist)[0]
        out = {p: build("sakt", position=p)(hist)[0] for p in POSITIONS}
        assert torch.allclose(relative(hist)[0], default, atol=1e-6)
        relative.retriever[0].attn.relative[3:] -= 1.0  # distances 3.. one logit down
        out["relative"] = relative(hist)[0]
    assert torch.equal(out["monotonic"], default)
    for p in POSITIONS[1:]:
        assert not torch.allclose(out[p], default, atol=1e-4), p
    with pytest.raises(ValueError, match="position"):
        build("sakt", position="absolute")


def _bias_of(module: WindowAttention, dist: torch.Tensor) -> torch.Tensor:
    """The position bias (1, H, 1, S) of one query at the given key distances, no clock."""
    S = dist.shape[0]
    win = window(torch.full((1, 1), int(dist.max()) + 1), torch.full((1, 1), float("nan")),
                 (int(dist.max()) + 1 - dist).view(1, S), torch.ones(1, S, dtype=torch.bool),
                 torch.full((1, S), float("nan"), dtype=torch.float64), int(dist.max()) + 1, include_self=True)
    H = module.heads
    zeros = torch.zeros(1, H, 1, S)
    return module.position_bias(win, zeros, torch.zeros(1, H, 1, 1), None)


@pytest.mark.parametrize("heads", [1, 2, 4, 8])
def test_alibi_slopes_are_fixed_powers_of_two(heads):
    """m_h = 2^(-8h/H), h = 1..H (Press et al.): H=8 gives 1/2 .. 1/256; the bias is -m_h d and is not a
    parameter (nothing to learn, nothing in the checkpoint)."""
    slopes = alibi_slopes(heads)
    assert torch.equal(slopes, torch.tensor([2.0 ** (-8 * h / heads) for h in range(1, heads + 1)]))
    if heads == 8:
        assert torch.equal(slopes, 0.5 ** torch.arange(1.0, 9.0))
    module = WindowAttention(8 * heads, heads, position="alibi")
    assert not any("slope" in n for n, _ in module.named_parameters()) and "slopes" not in module.state_dict()
    dist = torch.arange(0, 12)
    assert torch.allclose(_bias_of(module, dist)[0, :, 0], -slopes.view(-1, 1) * dist.float(), atol=0)


def test_relative_buckets_clip_at_the_window_and_space_logarithmically():
    """Windows up to the bucket count: one bucket per distance. Longer ones (T5): distances 0..15 one
    bucket each, then log-spaced buckets, non-decreasing, every bucket used, the window in the last."""
    assert torch.equal(relative_buckets(W), torch.arange(W + 1))
    assert torch.equal(relative_buckets(RELATIVE_BUCKETS - 1), torch.arange(RELATIVE_BUCKETS))
    b = relative_buckets(200)
    exact = RELATIVE_BUCKETS // 2
    assert b.shape == (201,) and torch.equal(b[:exact], torch.arange(exact))
    assert bool((b.diff() >= 0).all()) and bool((b.diff() <= 1).all())
    assert set(b.tolist()) == set(range(RELATIVE_BUCKETS)) and int(b[-1]) == RELATIVE_BUCKETS - 1
    assert int(b[exact]) == exact and int(b[2 * exact]) == exact + 4  # log2(2) / log2(200/16) * 16 = 4.4
    sizes = torch.bincount(b)
    assert bool((sizes[exact:-1].diff() >= 0).all())  # farther buckets hold more distances


@pytest.mark.parametrize("window_size", [W, 200])
def test_relative_bias_is_the_learned_entry_of_each_distance_bucket(window_size):
    """The bias of distance d for head h is the table entry (bucket(d), h); it starts as the monotonic
    decay at each bucket's nearest distance and learns (a gradient reaches every used entry)."""
    torch.manual_seed(0)
    module = WindowAttention(16, 2, position="relative", max_distance=window_size)
    bucket = relative_buckets(window_size)
    with torch.no_grad():
        module.relative.normal_()
    dist = torch.arange(0, window_size + 1)
    bias = _bias_of(module, dist)[0, :, 0]  # (H, S)
    assert torch.equal(bias, module.relative[bucket].T)
    bias.sum().backward()
    assert bool((module.relative.grad != 0).all())
    fresh = WindowAttention(16, 2, position="relative", max_distance=window_size)
    nearest = torch.tensor([float((bucket == k).nonzero()[0]) for k in range(int(bucket.max()) + 1)])
    assert torch.allclose(fresh.relative[:, 0], -torch.nn.functional.softplus(torch.tensor(-3.0)) * nearest)


def _context_reference(module: WindowAttention, x, k, v, win, self_kv=None) -> torch.Tensor:
    """AKT's context-aware attention weights by direct loops, O(S^2) per query (B, H, Tq, 1 + S [+ 1]);
    ``k`` and ``self_kv`` are projected keys/values, as the module takes them."""
    B, Tq, _ = x.shape
    H, dk, S = module.heads, module.dk, k.shape[1]
    split = lambda t: t.view(*t.shape[:-1], H, dk)  # noqa: E731
    q = split((module.k if module.q is None else module.q)(x))  # (B, Tq, H, dk)
    kk = split(k)  # keys come projected (what a cache stores: ``kv``)
    nk = module.null_k.view(H, dk)
    sk = split(self_kv[0]) if self_kv is not None else None
    theta = torch.nn.functional.softplus(module.theta)
    out = torch.zeros(B, H, Tq, 1 + S + (self_kv is not None), dtype=torch.float64)
    for b, h, t in itertools.product(range(B), range(H), range(Tq)):
        visible = [j for j in range(S) if bool(win.allowed[b, t, j])]
        raw = {j: float(q[b, t, h] @ kk[b, j, h]) / math.sqrt(dk) for j in visible}
        null = float(q[b, t, h] @ nk[h]) / math.sqrt(dk)
        own = float(q[b, t, h] @ sk[b, t, h]) / math.sqrt(dk) if sk is not None else None
        columns = [null, *raw.values()] + ([own] if own is not None else [])
        first = dict(zip(["null", *visible] + (["own"] if own is not None else []),
                         torch.softmax(torch.tensor(columns, dtype=torch.float64), 0).tolist()))
        logits = {"null": null}
        for j in visible:
            d = float(win.dist[b if win.dist.shape[0] > 1 else 0, t, j])
            between = sum(first[i] for i in visible if float(win.dist[b if win.dist.shape[0] > 1 else 0, t, i]) < d)
            between += first.get("own", 0.0)  # the query's own slot (distance 0) lies between it and every key
            logits[j] = raw[j] - float(theta[h]) * d * between
        if own is not None:
            logits["own"] = own
        weights = torch.softmax(torch.tensor(list(logits.values()), dtype=torch.float64), 0)
        for key, wgt in zip(logits, weights.tolist()):
            col = 0 if key == "null" else (1 + S if key == "own" else 1 + key)
            out[b, h, t, col] = wgt
    return out


@pytest.mark.parametrize("with_self", [False, True])
def test_context_distance_equals_a_direct_reference(with_self):
    """The context-aware distance: d(t, j) = |t - j| times the query's first-pass weight (softmax of the
    dot products alone, "no history" slot included) on the visible keys between j and t; the weights
    equal a loop over every (query, key) pair, including a query's own slot (AKT's question encoder)."""
    torch.manual_seed(3)
    D, H, S = 8, 2, 7
    module = WindowAttention(D, H, kq_same=True, position="context").double()
    with torch.no_grad():
        module.theta.copy_(torch.tensor([0.5, 1.5]))
    pos = torch.tensor([[0, 1, 2, 3, 4, 5, 6], [0, 1, 2, 3, 3, 4, 5]])  # learner 1: key 3 not applied
    valid = torch.tensor([[True] * 7, [True, True, True, False, True, True, True]])
    q_pos = torch.tensor([[1, 3, 5, 7], [2, 4, 4, 6]])  # queries anchored at these counts
    win = window(q_pos, torch.full((2, 4), float("nan"), dtype=torch.float64), pos, valid,
                 torch.full((2, S), float("nan"), dtype=torch.float64), 4, include_self=False)
    x, k, v = torch.randn(2, 4, D, dtype=torch.float64), torch.randn(2, S, D, dtype=torch.float64), \
        torch.randn(2, S, D, dtype=torch.float64)
    self_kv = (torch.randn(2, 4, D, dtype=torch.float64), torch.randn(2, 4, D, dtype=torch.float64)) if with_self \
        else None
    with torch.no_grad():
        _, w = module(x, k, v, win, self_kv=self_kv)
        expected = _context_reference(module, x, k, v, win, self_kv)
    assert torch.allclose(w, expected, atol=1e-12)
    assert bool((w[..., 1: 1 + S].masked_select(~win.allowed.unsqueeze(1)) == 0).all())
    module.position = "monotonic"  # the same parameters with the plain distance give other weights
    with torch.no_grad():
        assert not torch.allclose(module(x, k, v, win, self_kv=self_kv)[1], w, atol=1e-3)


@pytest.mark.parametrize("position", POSITIONS)
def test_position_variants_train_with_finite_gradients(position, make_histories):
    """A training step on clockless histories: finite outputs and gradients; the learned position
    parameters (theta, the relative table) receive gradient, the context distance's first pass none."""
    model = build("akt", position=position).train()
    _, hist = make_histories([2 * W, W], N_ITEMS, N_CONCEPTS, 2, seed=33)
    hist = hist.replace(times=torch.full_like(hist.times, float("nan")))
    out, _ = model(hist)
    out[hist.mask].sum().backward()
    assert torch.isfinite(out).all() and all(torch.isfinite(p.grad).all() for p in model.parameters()
                                             if p.grad is not None)
    learned = {"monotonic": "theta", "context": "theta", "relative": "relative", "alibi": None}[position]
    named = [p for n, p in model.named_parameters() if n.endswith(f"attn.{learned}")]
    assert (learned is None) == (not named)
    assert all(p.grad is not None and bool((p.grad != 0).any()) for p in named)
