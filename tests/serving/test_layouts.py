"""The contract every serving layout must pass, on every registered family that declares it:
per-learner updates equal the model's batched ``update``; states built on previous ones leave
every earlier state as it was; a layout stacks its own states (mixed with plain ones) exactly
as ``stack_states`` would; rows are taken and given back; bytes are counted once per row."""

from __future__ import annotations

import gc

import numpy as np
import pytest
import torch

from ktstream.core import memory_nbytes
from ktstream.models import create, family, names
from ktstream.models.stepwise import predict_stepwise
from ktstream.serving import LAYOUTS, RowState, StackBuffer, layout_for, split_state, stack_states

N_ITEMS, N_CONCEPTS = 30, 12
CASES = [pytest.param(kind, name, id=f"{kind}-{name}") for kind in LAYOUTS for name in names()
         if family(name).state_kind == kind]


def build(name: str):
    torch.manual_seed(0)
    return create(name, n_items=N_ITEMS, n_concepts=N_CONCEPTS, **family(name).tiny_config).eval()


def horizon(model) -> int:
    """Steps past the model's window and an attention cache's spare slots."""
    field = model.receptive_field()
    return 3 * field + 40 if field else 45


def test_every_family_declares_a_layout_and_every_layout_serves_a_family():
    kinds = {family(n).state_kind for n in names()}
    assert kinds <= set(LAYOUTS), f"unknown state kinds {kinds - set(LAYOUTS)}"
    assert set(LAYOUTS) <= kinds, f"layouts no family uses (untested below): {set(LAYOUTS) - kinds}"
    model = build(names()[0])
    model.state_kind = "paged"
    with pytest.raises(ValueError, match="state_kind must be one of"):
        layout_for(model)


@pytest.mark.parametrize("kind,name", CASES)
def test_per_learner_updates_equal_the_batched_update(kind, name, make_histories):
    """``update_rows`` without previous states is ``update`` split per learner, each row owning its memory."""
    model = build(name)
    layout = layout_for(model)
    assert type(layout) is LAYOUTS[kind]
    _, hist = make_histories([12, 9, 12], N_ITEMS, N_CONCEPTS, 2, seed=8)
    _, state = predict_stepwise(model, hist)
    with torch.inference_mode():
        batched = model.update(state, hist.at(8))
        rows = layout.update_rows(state, hist.at(8))
    assert len(rows) == 3 and all(set(r) == set(batched) for r in rows)
    for b, row in enumerate(rows):
        for k, t in row.items():
            assert t.shape == batched[k][b:b + 1].shape and torch.equal(t, batched[k][b:b + 1]), (name, k)
            assert t.untyped_storage().nbytes() == t.numel() * t.element_size(), f"{name}: row {k} shares storage"


@pytest.mark.parametrize("kind,name", CASES)
def test_updates_built_on_previous_states_leave_every_earlier_state_as_it_was(kind, name, make_histories):
    """``update_rows`` given the learners' previous states, as the runner calls it, step after step: each
    step equals ``update``; no state made earlier changes, a retry from the same state (a batch aborted
    and processed again) included; no row views the stacked batch it was computed from. Where the
    layout appends entries, appending them gives the same states."""
    model = build(name)
    layout = layout_for(model)
    T = horizon(model)
    _, hist = make_histories([T, T, T], N_ITEMS, N_CONCEPTS, 2, seed=9)
    made = []  # (state, a copy of its values) for every state so far
    with torch.inference_mode():
        rows = split_state(model.init_state(3))
        for t in range(T):
            batch = stack_states(rows)
            layout.update_rows(stack_states(rows), hist.at(t), rows)  # staged, then dropped
            new = layout.update_rows(batch, hist.at(t), rows)
            expected = model.update(batch, hist.at(t))
            entries = layout.entries(hist.at(t))
            appended = None if entries is None else layout.append_entries(rows, entries)
            for b, row in enumerate(new):
                for k, v in row.items():
                    assert torch.equal(v, expected[k][b:b + 1]), f"{name}: step {t}, row {b}, {k}"
                    assert v.untyped_storage().data_ptr() != batch[k].untyped_storage().data_ptr(), (name, k)
                    if appended is not None:
                        assert torch.equal(appended[b][k], v), f"{name}: appended entries, step {t}, {k}"
            made += [(r, {k: v.clone() for k, v in r.items()}) for r in rows]
            rows = new
    for state, values in made:
        assert all(torch.equal(state[k], values[k]) for k in state), f"{name}: an earlier state changed"


@pytest.mark.parametrize("kind,name", CASES)
def test_kept_states_stack_as_plain_ones_and_their_rows_are_freed(kind, name, make_histories):
    """States a layout keeps in its memory stack (mixed with plain states, as new learners' are, and
    cut to the filled slots) exactly as ``stack_states`` would, and their rows go back to the
    arena once nothing refers to them; plain states alone stack into the buffer."""
    model = build(name)
    layout = layout_for(model)
    _, hist = make_histories([6, 6, 6], N_ITEMS, N_CONCEPTS, 2, seed=10)
    with torch.inference_mode():
        plain = split_state(model.init_state(3))
        rows = plain
        for t in range(5):
            rows = layout.update_rows(stack_states(rows), hist.at(t), rows)
        assert all(isinstance(r, RowState) for r in rows), f"{name}: the layout kept no state in its memory"
        mixed = [rows[0], model.init_state(1), rows[2]]
        buffer = StackBuffer()
        for states in (mixed, plain):
            tail = layout.filled_slots(states)
            stacked = layout.stack(states, tail, buffer)
            whole = stack_states([dict(s.items()) for s in states])
            if tail:
                whole = {k: v[:, v.shape[1] - tail[k]:] if k in tail else v for k, v in whole.items()}
            assert stacked.keys() == whole.keys()
            assert all(torch.equal(stacked[k], whole[k]) for k in whole), name
        arena = rows[0].row.arena
    taken = {r.row.index for r in rows}
    assert len(taken) == 3 and not taken & set(arena.free)
    del rows, mixed, states
    gc.collect()
    assert taken <= set(arena.free), f"{name}: rows not returned"
    with torch.inference_mode():
        again = layout.update_rows(stack_states(plain), hist.at(0), plain)
    assert {r.row.index for r in again} <= taken, f"{name}: freed rows not taken again first"


@pytest.mark.parametrize("kind,name", CASES)
def test_bytes_are_counted_once_per_row(kind, name, make_histories):
    """A kept state counts its whole row (spare slots included) once, also when another state (the
    one at the step's start) lives in the same row; a plain state counts its tensors."""
    model = build(name)
    layout = layout_for(model)
    _, hist = make_histories([4], N_ITEMS, N_CONCEPTS, 2, seed=11)
    with torch.inference_mode():
        plain = split_state(model.init_state(1))
        first = layout.update_rows(stack_states(plain), hist.at(0), plain)[0]
        second = layout.update_rows(stack_states([first]), hist.at(1), [first])[0]
    arena = first.row.arena
    extra = 8 if "count" in first else 0  # a window's count lives outside the row
    assert memory_nbytes(plain[0]) == sum(t.nbytes for t in plain[0].values())
    assert memory_nbytes(first) == arena.row_nbytes + extra
    assert arena.row_nbytes >= sum(np.prod(t.shape) * t.element_size() for k, t in first.items() if k != "count")
    shared = second.row is first.row
    assert memory_nbytes(second, first) == (1 if shared else 2) * (arena.row_nbytes + extra), name
