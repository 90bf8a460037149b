"""Data-parallel training with torch.distributed: one global batch per step, its learners shared among ranks.

Every rank draws the same global batches (same seed, same data, same shuffle); rank r trains on learners
r, r + W, r + 2W, ... of each (W ranks). A step's loss is the sum of every rank's per-prediction losses
divided by the global count of predictions, so the all-reduced gradient (a sum over ranks) is the
gradient of the one-process loss on the whole batch: the same step, computed in W pieces. This is
DistributedDataParallel's algorithm (all-reduce of gradients after backward) written out in one
function, because ktstream's trainer drives a model's forward through ``model.training_loss`` and a
rank may hold no learner of a small global batch (it then contributes zero gradient and still takes
part in the all-reduce, where DDP's wrapper would need a forward). Parameters that no rank gave a
gradient keep ``grad = None``, as in one process, so Adam skips them alike.

Backends: ``gloo`` on CPU, ``nccl`` on CUDA (one GPU per rank, ``LOCAL_RANK``). Launched with torchrun,
which sets RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT::

    torchrun --nproc_per_node=2 -m ktstream.training.distributed                           # a check run, gloo
    torchrun --nproc_per_node=1 -m ktstream.training.distributed --backend nccl --device cuda
    python -m ktstream.training.distributed --backend none --save one.safetensors           # the reference

``bench/ddp_check.sh`` runs these and compares the weights they end at.

Each rank also computes the validation metric on the whole validation set (all ranks hold the same
weights, so they make the same early-stopping decision); rank 0 alone writes checkpoints.
"""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass
from typing import Sequence, TypeVar

import torch
import torch.distributed as dist

T = TypeVar("T")


@dataclass
class DataParallel:
    """This process's place among the ranks of the default process group."""

    rank: int
    world: int

    @classmethod
    def from_group(cls) -> "DataParallel":
        assert dist.is_initialized(), "torch.distributed.init_process_group must run first"
        return cls(dist.get_rank(), dist.get_world_size())

    def shard(self, batch: Sequence[T]) -> list[T]:
        """This rank's learners of a global batch.

        >>> DataParallel(1, 2).shard(list("abcde"))
        ['b', 'd']
        """
        return list(batch[self.rank :: self.world])

    def total(self, n: int, device: torch.device) -> int:
        """The sum of ``n`` over ranks (the global count of predictions in a step)."""
        t = torch.tensor([n], dtype=torch.float64 if device.type == "cpu" else torch.float32, device=device)
        dist.all_reduce(t)
        return int(t.item())

    def broadcast_parameters(self, model: torch.nn.Module) -> None:
        """Every rank starts from rank 0's weights."""
        for tensor in list(model.parameters()) + list(model.buffers()):
            dist.broadcast(tensor.data, src=0)

    def all_reduce_gradients(self, model: torch.nn.Module) -> None:
        """Sum each parameter's gradient over ranks, in one flat buffer; a parameter no rank gave a
        gradient keeps ``grad = None``."""
        params = [p for p in model.parameters() if p.requires_grad]
        if not params:
            return
        device = params[0].device
        has = torch.tensor([p.grad is not None for p in params], dtype=params[0].dtype, device=device)
        flat = torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1) for p in params])
        dist.all_reduce(has)
        dist.all_reduce(flat)
        offset = 0
        for p, given in zip(params, has.tolist()):
            n = p.numel()
            p.grad = flat[offset : offset + n].view_as(p).clone() if given else None
            offset += n


def _local_gpu() -> int:
    """This rank's GPU: torchrun's LOCAL_RANK, wrapped around the GPUs there are (ranks may share one)."""
    return int(os.environ.get("LOCAL_RANK", 0)) % max(torch.cuda.device_count(), 1)


def init(backend: str | None = None) -> DataParallel:
    """Join the process group torchrun describes (env://); gloo on CPU, nccl where CUDA is present."""
    backend = backend or ("nccl" if torch.cuda.is_available() else "gloo")
    if torch.cuda.is_available():
        torch.cuda.set_device(_local_gpu())
    dist.init_process_group(backend)
    return DataParallel.from_group()


def leave() -> None:
    """Leave the process group once every rank has finished: a rank that tears its connections down
    while another still completes its last collective can abort that one (gloo: "terminate called
    without an active exception", exit code -6), after its training had finished."""
    dist.barrier()
    dist.destroy_process_group()


def _check(args: argparse.Namespace) -> None:
    """A short run of DKT on a simulated stream, in float64 without dropout (so that every backend and
    world size trains the same weights to rounding); rank 0 saves them to ``--save``."""
    from safetensors.torch import save_file

    from ktstream.data.histories import build_vocabularies, encode
    from ktstream.data.simulate import simulate
    from ktstream.models import create
    from ktstream.training.trainer import TrainConfig, fit

    if args.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("--device cuda: this torch sees no CUDA device")
    parallel = init(args.backend) if args.backend != "none" else None
    device = f"cuda:{_local_gpu()}" if args.device == "cuda" else "cpu"
    recs = simulate(n_learners=args.learners, n_items=40, n_concepts=8, mean_length=60, seed=0)
    items, concepts = build_vocabularies(recs)
    hs = encode(recs, items, concepts)
    torch.manual_seed(0)
    model = create("dkt", n_items=len(items), n_concepts=len(concepts), n_categories=2, dim=16, hidden=24,
                   dropout=0.0).double()
    cfg = TrainConfig(epochs=args.epochs, batch_tokens=800, lr=1e-2, patience=args.epochs, chunk=10_000,
                      device=device, progress=False)
    result = fit(model, hs[: len(hs) * 3 // 4], hs[len(hs) * 3 // 4 :], cfg, parallel=parallel)
    rank, world = (parallel.rank, parallel.world) if parallel else (0, 1)
    checksum = sum(float(p.detach().double().sum()) for p in model.parameters())
    print(f"rank {rank}/{world} backend {dist.get_backend() if parallel else 'none'} device {device}: "
          f"best epoch {result.best_epoch} valid auc {result.best_valid:.6f} weight checksum {checksum:.12f}",
          flush=True)
    if args.save and rank == 0:
        save_file({k: v.detach().cpu().contiguous() for k, v in model.state_dict().items()}, args.save)
    if parallel:
        leave()


def _compare(paths: Sequence[str]) -> None:
    """The largest weight difference of each saved run from the first; exit 1 past 1e-9."""
    from safetensors.torch import load_file

    first = load_file(paths[0])
    worst = 0.0
    for path in paths[1:]:
        other = load_file(path)
        assert other.keys() == first.keys(), f"{path}: other parameters than {paths[0]}"
        diff = max(float((first[k] - other[k]).abs().max()) for k in first)
        worst = max(worst, diff)
        print(f"{path}: largest weight difference from {paths[0]} {diff:.3g}")
    raise SystemExit(0 if worst <= 1e-9 else f"weights differ by {worst:.3g} (> 1e-9)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=_check.__doc__)
    parser.add_argument("--backend", choices=["gloo", "nccl", "none"], default="gloo",
                        help="process group backend; none: one process, no group (the reference)")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--learners", type=int, default=64)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--save", help="rank 0 writes its final weights here (safetensors)")
    parser.add_argument("--compare", nargs="+", metavar="FILE", help="compare saved weights instead of training")
    args = parser.parse_args()
    _compare(args.compare) if args.compare else _check(args)
