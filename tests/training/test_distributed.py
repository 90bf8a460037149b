"""Data-parallel training (torch.distributed, gloo, 2 CPU processes) ends at the one-process weights.

Both runs see the same global batches; each rank trains on half of every batch and the gradients are
summed over ranks after dividing the loss by the global prediction count, so every step is the
one-process step computed in two pieces. The pieces add up in another order, so the weights agree to
rounding: in float64, within 1e-9 after two epochs of Adam. Dropout is off and ``chunk`` longer than any
history: dropout masks are drawn per rank, and truncated back-propagation cuts windows where a batch's
learners allow (so where a rank's share allows), either of which makes another, equally valid, run.
The test process is rank 0; rank 1 is a spawned process.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from ktstream.data.histories import build_vocabularies, encode
from ktstream.data.simulate import simulate
from ktstream.models import create
from ktstream.training.distributed import DataParallel, leave
from ktstream.training.trainer import TrainConfig, fit

TOLERANCE = 1e-9


def _data():
    recs = simulate(n_learners=24, n_items=30, n_concepts=6, mean_length=40, seed=3)
    items, concepts = build_vocabularies(recs)
    hs = encode(recs, items, concepts)
    return hs[:18], hs[18:], len(items), len(concepts)


def _train(parallel: DataParallel | None) -> dict[str, torch.Tensor]:
    train, valid, n_items, n_concepts = _data()
    torch.manual_seed(0)
    model = create("dkt", n_items=n_items, n_concepts=n_concepts, n_categories=2, dim=8, hidden=12,
                   dropout=0.0).double()
    cfg = TrainConfig(epochs=2, batch_tokens=300, lr=1e-2, patience=5, chunk=10_000, device="cpu", progress=False)
    fit(model, train, valid, cfg, parallel=parallel)
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def _rank(rank: int, world: int, init_file: str) -> dict[str, torch.Tensor]:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        return _train(DataParallel(rank, world))
    finally:
        leave()


def test_two_gloo_processes_end_at_the_one_process_weights(tmp_path):
    init = str(tmp_path / "init")
    other = mp.get_context("spawn").Process(target=_rank, args=(1, 2, init))
    other.start()
    threads = torch.get_num_threads()
    try:
        parallel = _rank(0, 2, init)
    finally:
        other.join(timeout=120)
        torch.set_num_threads(threads)
    assert other.exitcode == 0, f"rank 1 failed (exit code {other.exitcode})"
    single = _train(None)
    assert single.keys() == parallel.keys()
    worst = max(float((single[k].double() - parallel[k].double()).abs().max()) for k in single)
    assert worst <= TOLERANCE, f"data-parallel weights differ from one process by {worst:g}"
    moved = _train_untrained()
    assert max(float((single[k].double() - moved[k].double()).abs().max()) for k in single) > 1e-3, "training moved"


def _train_untrained() -> dict[str, torch.Tensor]:
    _, _, n_items, n_concepts = _data()
    torch.manual_seed(0)
    model = create("dkt", n_items=n_items, n_concepts=n_concepts, n_categories=2, dim=8, hidden=12,
                   dropout=0.0).double()
    return {k: v.detach().clone() for k, v in model.state_dict().items()}
