"""save / load: one call each, vocabularies and probe items included, in the checkpoint format serving reads."""

from __future__ import annotations

import numpy as np
import pytest

import ktstream
from ktstream.models.checkpoint import load_checkpoint
from tests.api.conftest import tiny


def test_a_saved_model_loads_and_predicts_the_same(tmp_path, events, vocab):
    model = tiny("sakt", vocab)
    folder = ktstream.save(model, vocab, tmp_path / "ckpt", version="v7")
    back = ktstream.load(folder)
    assert (back.version, back.vocab, back.fit) == ("v7", vocab, None)
    assert np.array_equal(ktstream.predict(model, vocab, events).probs, back.predict(events).probs)
    assert back.save(tmp_path / "again") and ktstream.load(tmp_path / "again").vocab == vocab


def test_the_folder_is_a_serving_checkpoint(tmp_path, events, vocab):
    ktstream.save(tiny("dkt", vocab), vocab, tmp_path / "ckpt")
    model, items, concepts, version = load_checkpoint(tmp_path / "ckpt")  # what `ktstream serve` reads
    assert (model.name, items.ids, concepts.ids, version) == ("dkt", vocab.items.ids, vocab.concepts.ids, "dkt")


def test_a_checkpoint_without_probe_items_needs_them_given(tmp_path, events, vocab):
    folder = ktstream.save(tiny("dkt", vocab), vocab, tmp_path / "ckpt")
    (folder / "probes.json").unlink()
    back = ktstream.load(folder)
    assert back.vocab.probes == {}
    tracer = back.tracer()
    with pytest.raises(ValueError, match="no probe items"):
        tracer.mastery("u0", ["c1"])
    assert set(tracer.mastery("u0", probes={"c1": ["q1", "q2"]})) == {"c1"}
