"""Tiny real evaluation runs for the report tests: ``benchmark`` on simulated learners, saved like the CLI does.

Each run is the protocol the CLI runs (``ktstream.evaluation.protocols``), on a
few dozen simulated learners and tiny model sizes, so a report test takes
seconds: results.json, the selected model as a checkpoint, the test events.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from ktstream.data.eventlog import write_events
from ktstream.evaluation.protocols import benchmark
from ktstream.models import family
from ktstream.models.checkpoint import save_checkpoint
from ktstream.training.trainer import TrainConfig


def split(records: list[dict]) -> tuple[list, list, list]:
    """Learners split 3:1:1 by their order of appearance (deterministic)."""
    order = {lid: i for i, lid in enumerate(dict.fromkeys(r["learner_id"] for r in records))}
    part = lambda r: order[r["learner_id"]] % 5  # noqa: E731
    return ([r for r in records if part(r) >= 2], [r for r in records if part(r) == 1],
            [r for r in records if part(r) == 0])


def make_run(folder: Path, name: str, records: list[dict], epochs: int = 2) -> dict:
    """``ktstream evaluate benchmark ... --out folder --checkpoint folder/ckpt`` on ``records``, in-process."""
    torch.set_num_threads(1)
    train, valid, test = split(records)
    artifacts: dict = {}
    result = benchmark(name, train, valid, test, TrainConfig(epochs=epochs, patience=2, progress=False),
                       dict(family(name).tiny_config), artifacts)
    result.update(dataset="simulated", fold=1, rows="as given", random_labels=False, minutes=0.01)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "results.json").write_text(json.dumps(result, indent=2, default=float))
    save_checkpoint(folder / "ckpt", artifacts["model"], artifacts["items"], artifacts["concepts"], f"{name}-test")
    write_events(test, folder / "test.jsonl")
    return {"folder": folder, "result": result, "test": test, **artifacts}


@pytest.fixture(scope="session")
def binary_run(tmp_path_factory):
    from ktstream.data.simulate import simulate

    return make_run(tmp_path_factory.mktemp("dkt"), "dkt", simulate(n_learners=80, mean_length=40, seed=0))


@pytest.fixture(scope="session")
def attention_run(tmp_path_factory):
    from ktstream.data.simulate import simulate

    return make_run(tmp_path_factory.mktemp("sakt"), "sakt", simulate(n_learners=40, mean_length=25, seed=1), 1)


@pytest.fixture(scope="session")
def ordinal_run(tmp_path_factory):
    from ktstream.data.simulate_gpcm import simulate

    records, _ = simulate(n_learners=40, n_items=30, n_categories=3, length=(20, 30), seed=0)
    return make_run(tmp_path_factory.mktemp("gpcm"), "deep-gpcm", records, 1)
