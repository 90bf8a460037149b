"""Warm start: old ids keep their rows; a new id starts from the unknown id's rows, for every family."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from ktstream.data.histories import collate
from ktstream.data.vocab import UNKNOWN
from ktstream.finetune.exceptions import FinetuneError
from ktstream.finetune.warmstart import warm_start
from ktstream.models import create, family, names


def _model(name: str, seed: int = 0):
    torch.manual_seed(seed)
    try:
        return create(name, n_items=12, n_concepts=7, n_categories=3, **family(name).tiny_config).eval()
    except (ValueError, AssertionError):
        return create(name, n_items=12, n_concepts=7, n_categories=2, **family(name).tiny_config).eval()


@pytest.mark.parametrize("name", names())
def test_old_ids_predict_as_before_and_new_ids_as_unknown(name, make_histories):
    old = _model(name)
    new, info = warm_start(old, 20, 11)
    assert info["items"] == [12, 20] and info["concepts"] == [7, 11]
    learners, _ = make_histories([25, 18, 30], n_items=12, n_concepts=7, n_categories=old.n_categories, seed=3)
    batch = collate(learners)
    with torch.no_grad():
        before, _ = old(batch)
        after, _ = new.eval()(batch)
        assert torch.allclose(before, after, atol=1e-6), "old ids must keep their predictions"
        rng = np.random.default_rng(0)
        mask = torch.from_numpy(rng.random(batch.items.shape) < 0.4) & batch.mask
        with_new = batch.replace(items=torch.where(mask, torch.full_like(batch.items, 15), batch.items),
                                 concepts=torch.where(batch.concepts > 0, 9, 0))
        as_unknown = batch.replace(items=torch.where(mask, torch.full_like(batch.items, UNKNOWN), batch.items),
                                   concepts=torch.where(batch.concepts > 0, UNKNOWN, 0))
        assert torch.allclose(new(with_new)[0], old(as_unknown)[0], atol=1e-6), "a new id must start as unknown"


def test_base_model_is_left_untouched():
    old = _model("dkt")
    snapshot = {k: v.clone() for k, v in old.state_dict().items()}
    new, _ = warm_start(old, 30, 9)
    with torch.no_grad():
        for p in new.parameters():
            p.add_(1.0)
    assert all(torch.equal(snapshot[k], v) for k, v in old.state_dict().items())


def test_vocabularies_only_grow():
    with pytest.raises(FinetuneError, match="only grows"):
        warm_start(_model("dkt"), 5, 7)
