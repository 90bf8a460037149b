"""A minimal model checkpoint: a directory with ``config.json`` and ``weights.safetensors``.

``config.json`` holds the family name, the model's ``config()`` (constructor
arguments), the item and concept vocabularies and a version string;
``weights.safetensors`` the parameters (safetensors, never pickle). The model
registry of the fine-tuning issue builds on this format.

>>> import tempfile, torch
>>> from ktstream.data.vocab import Vocabulary
>>> from ktstream.models import create
>>> torch.manual_seed(0) and None
>>> m = create("dkt", n_items=5, n_concepts=4, dim=8, hidden=8)
>>> d = tempfile.mkdtemp()
>>> _ = save_checkpoint(d, m, Vocabulary(["q1", "q2", "q3"]), Vocabulary(["c1", "c2"]), "v1")
>>> m2, items, concepts, version = load_checkpoint(d)
>>> version, items.encode("q2"), all(torch.equal(a, b) for a, b in zip(m.parameters(), m2.parameters()))
('v1', 3, True)
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from safetensors.torch import load_file, save_file

from ktstream.data.vocab import Vocabulary
from ktstream.exceptions import KTStreamError
from ktstream.models.base import KTModel
from ktstream.models.families import create

FORMAT = 1
CONFIG, WEIGHTS = "config.json", "weights.safetensors"


class CheckpointError(KTStreamError):
    """A checkpoint directory that is missing, incomplete or of an unknown format."""


@dataclass
class ServingModel:
    """A model ready to serve: the model, its item and concept vocabularies, its version (and, for a model
    fitted at start-up, its validation AUC)."""

    model: KTModel
    items: Vocabulary
    concepts: Vocabulary
    version: str
    valid_auc: float | None = None

    def save(self, directory: str | Path) -> Path:
        return save_checkpoint(directory, self.model, self.items, self.concepts, self.version)


def save_checkpoint(directory: str | Path, model: KTModel, items: Vocabulary, concepts: Vocabulary,
                    version: str) -> Path:
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    weights = {k: v.detach().cpu().clone().contiguous() for k, v in model.state_dict().items()}
    save_file(weights, str(directory / WEIGHTS))
    meta = {"format": FORMAT, "family": model.name, "config": model.config(), "version": version,
            "items": items.to_json(), "concepts": concepts.to_json()}
    (directory / CONFIG).write_text(json.dumps(meta, indent=1), encoding="utf-8")
    return directory


def load_checkpoint(directory: str | Path) -> tuple[KTModel, Vocabulary, Vocabulary, str]:
    """(model in eval mode, item vocabulary, concept vocabulary, version)."""
    directory = Path(directory)
    try:
        meta = json.loads((directory / CONFIG).read_text(encoding="utf-8"))
        weights = load_file(str(directory / WEIGHTS))
    except (OSError, ValueError) as exc:
        raise CheckpointError(f"cannot read checkpoint {directory}: {exc}") from exc
    if meta.get("format") != FORMAT:
        raise CheckpointError(f"checkpoint {directory} has format {meta.get('format')!r}; expected {FORMAT}")
    model = create(meta["family"], **meta["config"])
    model.load_state_dict(weights)
    return (model.eval(), Vocabulary.from_json(meta["items"]), Vocabulary.from_json(meta["concepts"]),
            str(meta["version"]))
