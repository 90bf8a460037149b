"""State rebuild for a hot swap: replaying a learner's raw window through the new model's serving path
gives a state that predicts exactly as the new model's forward over that window (every family)."""

from __future__ import annotations

import pytest
import torch

from ktstream.data.histories import build_vocabularies, collate, encode_learner
from ktstream.data.simulate import simulate
from ktstream.serving import rebuild_state, rebuild_states
from ktstream.models import create, family, names

ATOL = 1e-8  # float64: the serving path and the batched forward differ only in summation order (~1e-10)


def new_model(name: str, n_items: int, n_concepts: int):
    torch.manual_seed(1)
    model = create(name, n_items=n_items, n_concepts=n_concepts, n_categories=2, **family(name).tiny_config)
    return model.double().eval()


def window(learner: str = "u0", length: int = 40, seed: int = 0) -> list[dict]:
    recs = [r for r in simulate(n_learners=3, n_items=20, n_concepts=5, mean_length=length, seed=seed, step_prob=0.3)
            if r["learner_id"] == "u0"]
    recs = [{**r, "learner_id": learner, "event_id": f"{learner}-{i}"} for i, r in enumerate(recs)]
    t = recs[-1]["event_time"] + 60_000
    # the window ends with an open step of two members sharing a bundle id
    return recs + [{**recs[0], "event_id": f"{learner}-b{j}", "event_time": t + j, "step_id": "bundle-9",
                    "item_id": f"q{3 + j}", "response": j % 2} for j in range(2)]


def forward_probs(model, recs, items, concepts) -> torch.Tensor:
    h = encode_learner(recs[0]["learner_id"], recs, items, concepts)
    with torch.no_grad():
        log_probs, _ = model(collate([h]))
    return log_probs[0, -1].exp()


def query_of(recs, items, concepts):
    h = collate([encode_learner(recs[0]["learner_id"], recs, items, concepts)])
    return h.at(len(recs) - 1)


@pytest.mark.parametrize("name", names())
def test_rebuilt_state_predicts_as_forward_over_the_window(name):
    recs = window()
    items, concepts = build_vocabularies(recs)
    model = new_model(name, len(items), len(concepts))
    rebuilt = rebuild_state(model, recs, items, concepts)
    assert rebuilt.applied == len(recs) and rebuilt.step_key == ("s", "bundle-9")
    assert rebuilt.last_event_time_ms == max(r["event_time"] for r in recs)
    # next event opens a new step: predicted from the rebuilt state
    nxt = {**recs[0], "event_id": "next", "event_time": recs[-1]["event_time"] + 5_000, "item_id": "q7"}
    nxt.pop("step_id", None)
    with torch.no_grad():
        served = model.predict(rebuilt.state, query_of(recs + [nxt], items, concepts))[0]
    assert torch.allclose(served, forward_probs(model, recs + [nxt], items, concepts), atol=ATOL, rtol=0)
    # a late member of the open step: predicted from the state at the step's start
    mate = {**recs[-1], "event_id": "mate", "item_id": "q11"}
    with torch.no_grad():
        served = model.predict(rebuilt.step_state, query_of(recs + [mate], items, concepts))[0]
    assert torch.allclose(served, forward_probs(model, recs + [mate], items, concepts), atol=ATOL, rtol=0)


def test_batched_rebuild_matches_one_learner_at_a_time():
    windows = {f"u{i}": window(f"u{i}", length=20 + 15 * i, seed=i) for i in range(3)}
    items, concepts = build_vocabularies(r for w in windows.values() for r in w)
    model = new_model("dkt", len(items), len(concepts))
    together = rebuild_states(model, windows, items, concepts)
    for lid, recs in windows.items():
        alone = rebuild_state(model, recs, items, concepts)
        for k in alone.state:
            assert torch.allclose(together[lid].state[k], alone.state[k], atol=ATOL, rtol=0)
            assert torch.allclose(together[lid].step_state[k], alone.step_state[k], atol=ATOL, rtol=0)


def test_prediction_requests_do_not_change_the_rebuilt_state():
    recs = window()
    items, concepts = build_vocabularies(recs)
    model = new_model("dkt", len(items), len(concepts))
    request = {k: v for k, v in recs[5].items() if k != "response"}
    with_request = recs[:6] + [{**request, "event_id": "req"}] + recs[6:]
    a, b = rebuild_state(model, recs, items, concepts), rebuild_state(model, with_request, items, concepts)
    assert b.applied == a.applied and all(torch.equal(a.state[k], b.state[k]) for k in a.state)


def test_empty_window_gives_the_initial_state_and_counts_rebuilds():
    items, concepts = build_vocabularies(window())
    model = new_model("dkt", len(items), len(concepts))

    class Count:
        n = 0

        def inc(self, k=1):
            self.n += k

    counter = Count()
    out = rebuild_states(model, {"nobody": [], "u0": window()}, items, concepts, counter=counter)
    assert counter.n == 2 and out["nobody"].applied == 0 and out["nobody"].step_state is None
    assert all(torch.equal(v, model.init_state(1)[k]) for k, v in out["nobody"].state.items())
