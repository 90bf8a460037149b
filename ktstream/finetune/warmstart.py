"""Warm start: the serving model, grown to a vocabulary extended with ids first seen before the cutoff.

`build_windows` appends ids first seen before C after the serving model's ids,
so an old id keeps its index. Every parameter whose shape depends on the
vocabulary sizes is found by probing (a model built with one more item, or one
more concept, shows which dimensions grow and by how many rows per id: an
(item, response) table grows by K rows per item). Rows of old ids are copied;
the rows of a new id start as copies of the unknown id's rows (index 1), the
rows that served it until now, so the warm-started model predicts a new id
exactly as the serving model did before fine-tuning teaches it more. Every
other parameter is copied unchanged.

Tables are laid out id-major (row = id * m + r) in every ktstream family; an
id-minor layout would be caught by the probe only if its sizes differ, so a
new family must keep the id-major layout (docs/finetuning.md).
"""

from __future__ import annotations

from typing import Any

import torch

from ktstream.data.vocab import UNKNOWN
from ktstream.finetune.exceptions import FinetuneError
from ktstream.models import create
from ktstream.models.base import KTModel


def _shapes(family: str, config: dict[str, Any]) -> dict[str, torch.Size]:
    with torch.device("meta"):
        model = create(family, **config)
    return {k: v.shape for k, v in model.state_dict().items()}


def vocab_dims(family: str, config: dict[str, Any]) -> dict[str, dict[int, tuple[str, int]]]:
    """{parameter: {dim: ("n_items" | "n_concepts", rows per id)}} for every vocabulary-sized dim."""
    plain = _shapes(family, config)
    out: dict[str, dict[int, tuple[str, int]]] = {}
    for key in ("n_items", "n_concepts"):
        grown = _shapes(family, {**config, key: config[key] + 1})
        for name, shape in plain.items():
            for d, (a, b) in enumerate(zip(shape, grown[name])):
                if a != b:
                    if d in out.get(name, {}):
                        raise FinetuneError(f"{family}.{name} dim {d} depends on both items and concepts")
                    out.setdefault(name, {})[d] = (key, b - a)
    return out


def _grow(old: torch.Tensor, dim: int, old_ids: int, new_ids: int, per_id: int) -> torch.Tensor:
    """Rows of ids < old_ids copied; rows of each new id copied from the unknown id's rows."""
    assert old.shape[dim] == old_ids * per_id, f"dim {dim}: {old.shape[dim]} rows for {old_ids} ids x {per_id}"
    index = torch.arange(new_ids * per_id)
    ids, r = index // per_id, index % per_id
    source = torch.where(ids < old_ids, index, UNKNOWN * per_id + r)
    return old.index_select(dim, source.to(old.device))


def warm_start(model: KTModel, n_items: int, n_concepts: int) -> tuple[KTModel, dict[str, Any]]:
    """A copy of ``model`` sized for the extended vocabularies (old ids first), and what grew."""
    config = model.config()
    if n_items < config["n_items"] or n_concepts < config["n_concepts"]:
        raise FinetuneError(f"a warm start only grows vocabularies: {config['n_items']} -> {n_items} items, "
                            f"{config['n_concepts']} -> {n_concepts} concepts")
    dims = vocab_dims(model.name, config)
    sizes = {"n_items": (config["n_items"], n_items), "n_concepts": (config["n_concepts"], n_concepts)}
    new = create(model.name, **{**config, "n_items": n_items, "n_concepts": n_concepts})
    state = {}
    for name, tensor in model.state_dict().items():
        t = tensor.detach().clone()
        for d, (key, per_id) in dims.get(name, {}).items():
            t = _grow(t, d, sizes[key][0], sizes[key][1], per_id)
        state[name] = t
    new.load_state_dict(state)
    new.to(next(model.parameters()).device)
    info = {"items": list(sizes["n_items"]), "concepts": list(sizes["n_concepts"]),
            "grown_parameters": sorted(dims)}
    return new.train(model.training), info
