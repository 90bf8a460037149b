"""A trained model with what it needs to read events: its vocabularies, saved and loaded in one call each.

``Vocab`` holds the item and concept vocabularies (built from the training events only, invariant 5)
and, per concept, its probe items: the items tagged with it in the training events, the most attempted
first, which per-concept mastery is read through (ktstream.serving.mastery). ``save`` writes the
checkpoint folder every other command reads (``config.json`` with both vocabularies, and
``weights.safetensors``: ktstream.models.checkpoint) plus ``probes.json``; ``load`` reads it back, so
``ktstream serve`` can serve what a notebook saved and the reverse (a folder without probes.json loads
with no probe items; mastery then needs concepts' items given).

>>> import tempfile, torch, ktstream
>>> events = ktstream.simulate(n_learners=4, mean_length=6, seed=1)
>>> vocab = Vocab.build(events)
>>> torch.manual_seed(0) and None
>>> model = ktstream.models.create("dkt", n_items=len(vocab.items), n_concepts=len(vocab.concepts), dim=8, hidden=8)
>>> folder = save(model, vocab, tempfile.mkdtemp(), version="toy")
>>> back = load(folder)
>>> back.version, back.vocab == vocab, all(torch.equal(a, b) for a, b in zip(model.parameters(),
...                                                                        back.model.parameters()))
('toy', True, True)
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable

from ktstream.data.histories import build_vocabularies
from ktstream.data.vocab import Vocabulary
from ktstream.models.base import KTModel
from ktstream.models.checkpoint import load_checkpoint, save_checkpoint
from ktstream.serving.mastery import probe_items

if TYPE_CHECKING:
    from ktstream.api.tracer import Tracer
    from ktstream.api.training import Evaluation, Predictions
    from ktstream.training.trainer import FitResult

PROBES = "probes.json"
#: Probe items kept per concept.
PROBES_PER_CONCEPT = 10


@dataclass(frozen=True)
class Vocab:
    """Item and concept vocabularies of a model, and each concept's probe items (see the module)."""

    items: Vocabulary
    concepts: Vocabulary
    probes: dict[str, list[str]] = field(default_factory=dict)

    @classmethod
    def build(cls, train_events: Iterable[dict[str, Any]], per_concept: int = PROBES_PER_CONCEPT) -> "Vocab":
        """Vocabularies and probe items of (canonical records of) the *training* events only."""
        records = list(train_events)
        items, concepts = build_vocabularies(records)
        return cls(items, concepts, probe_items(records, per_concept))

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, Vocab) and self.items.ids == other.items.ids
                and self.concepts.ids == other.concepts.ids and self.probes == other.probes)

    def __repr__(self) -> str:
        return f"Vocab({len(self.items.ids)} items, {len(self.concepts.ids)} concepts)"


@dataclass
class Trained:
    """A model with its vocabularies and version; ``fit`` is the training run's record (None once loaded).

    The methods are the module functions with this model filled in.
    """

    model: KTModel
    vocab: Vocab
    version: str
    fit: "FitResult | None" = None

    def evaluate(self, events: Any, **options: Any) -> "Evaluation":
        from ktstream.api.training import evaluate

        return evaluate(self.model, self.vocab, events, **options)

    def predict(self, events: Any) -> "Predictions":
        from ktstream.api.training import predict

        return predict(self.model, self.vocab, events)

    def tracer(self, **options: Any) -> "Tracer":
        from ktstream.api.tracer import Tracer

        return Tracer(self.model, self.vocab, version=self.version, **options)

    def save(self, path: str | Path) -> Path:
        return save(self.model, self.vocab, path, self.version)

    def __repr__(self) -> str:
        fitted = "" if self.fit is None else f", best epoch {self.fit.best_epoch} ({self.fit.selection_metric} " \
                                              f"{self.fit.best_valid:.4f} on validation)"
        return f"Trained({self.model.name!r}, version {self.version!r}, {self.vocab!r}{fitted})"


def check_pair(model: Any, vocab: Any) -> None:
    """A TypeError unless ``model`` is a model and ``vocab`` its ``Vocab`` (the message says how to pass a
    ``Trained``)."""
    if isinstance(model, Trained):
        raise TypeError("pass trained.model, trained.vocab (or call the Trained's own method, e.g. "
                        "trained.evaluate(events), trained.tracer(), trained.save(path))")
    if not isinstance(model, KTModel) or not isinstance(vocab, Vocab):
        raise TypeError(f"expected a model (ktstream.models.KTModel) and its Vocab, got {type(model).__name__} and "
                        f"{type(vocab).__name__}")


def save(model: KTModel, vocab: Vocab, path: str | Path, version: str | None = None) -> Path:
    """Write ``model`` and ``vocab`` to the checkpoint folder ``path`` (made if need be); returns it.
    ``version`` labels it (default: the family's name)."""
    check_pair(model, vocab)
    folder = save_checkpoint(path, model, vocab.items, vocab.concepts, version or model.name)
    (folder / PROBES).write_text(json.dumps(vocab.probes, indent=1), encoding="utf-8")
    return folder


def load(path: str | Path) -> Trained:
    """A checkpoint folder (``save``'s, ``ktstream train --out``'s, a registry version's) as a ``Trained``."""
    model, items, concepts, version = load_checkpoint(path)
    probes_file = Path(path) / PROBES
    probes = json.loads(probes_file.read_text(encoding="utf-8")) if probes_file.is_file() else {}
    return Trained(model, Vocab(items, concepts, probes), version)
