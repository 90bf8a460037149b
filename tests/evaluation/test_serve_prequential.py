"""The prequential serving pass predicts what the per-event serving path predicts, at every scored event."""

import numpy as np
import pytest
import torch

from ktstream.data.histories import build_vocabularies, collate, encode
from ktstream.evaluation.protocols import serve_prequential
from ktstream.models import create, family, names
from ktstream.models.stepwise import predict_stepwise

C0 = 1_000_060


def interleaved_log():
    """Four learners whose events interleave in time; ties in time within a learner (one step of several
    events, one of them straddling nothing and one sitting exactly at C0), a learner that ends before C0,
    one that starts after it, and prediction requests (no response)."""
    rng = np.random.default_rng(7)
    recs, seq = [], 0
    for u, (first, n) in enumerate([(0, 40), (3, 35), (1, 20), (70, 15)]):
        t = 1_000_000 + first
        for i in range(n):
            if rng.random() > 0.3:  # else: a tie with the previous event, the same step
                t += int(rng.integers(1, 4))
            if u == 0 and i == 20:
                t = C0  # a step that starts exactly at the cut-off
            q = int(rng.integers(0, 9))
            resp = None if rng.random() < 0.05 else int(rng.random() < 0.6)
            recs.append({"event_id": f"u{u}-{i}", "learner_id": f"u{u}", "item_id": f"q{q}",
                         "concept_ids": [f"c{q % 3}", f"c{q % 4}"][: 1 + q % 2], "response": resp,
                         "event_time": t, "seq": seq})
            seq += 1
    rng.shuffle(recs)  # file order is not time order
    return recs


@pytest.mark.parametrize("name", names())
def test_serve_prequential_matches_per_event_serving_path(name):
    recs = interleaved_log()
    items, concepts = build_vocabularies(recs)
    hs = encode(recs, items, concepts)
    cls = family(name)
    torch.manual_seed(0)
    model = create(name, n_items=len(items), n_concepts=len(concepts), **cls.tiny_config).eval()
    scored = [h.times * 1000.0 >= C0 for h in hs]
    assert any(s.all() for s in scored) and any(not s.any() for s in scored)
    assert any(s.any() and not s.all() for s in scored)
    reference, _ = predict_stepwise(model, collate(hs))
    fast = serve_prequential(model, hs, scored, batch=3, chunk=7)  # several batches and windows
    n = 0
    for b, (h, s) in enumerate(zip(hs, scored)):
        want = reference[b, : len(h)].numpy()[s]
        np.testing.assert_allclose(fast[b][s], want, atol=1e-5, rtol=0)
        n += int(s.sum())
    assert n > 20
