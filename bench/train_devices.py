"""Training speed and quality on CPU and CUDA, same code, same data, same seed.

Trains each model family at its default size on a data set's own fixed split
(train file for training, test file for selection) for ``--epochs`` epochs on
every device named: ``cpu``, ``cuda`` (fp32) and ``cuda+bf16`` (per-step bf16
autocast, what ``ktstream.finetune.fine_tune`` uses on CUDA), with
deterministic algorithms asked for. On CUDA it trains the first family a second
time and reports how far the weights moved (0.0: bit-identical).

    python bench/train_devices.py --dataset dkvmn_assist2015 --devices cpu,cuda,cuda+bf16 --epochs 1
Prints one line per (family, device), then each CUDA run's seconds per epoch
as a ratio to CPU's; ``--out`` writes the figures as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time

import torch

from connectors.datasets import DATASET_FORMATS, iter_events
from connectors.datasets.splits import split_files
from ktstream.data.histories import build_vocabularies, encode
from ktstream.models import create
from ktstream.training.trainer import TrainConfig, fit


def train_once(family: str, spec: str, train, valid, n_items: int, n_concepts: int, cfg: TrainConfig):
    """``spec``: a device, with ``+bf16`` for per-step bf16 autocast."""
    device, _, autocast = spec.partition("+")
    torch.manual_seed(cfg.seed)
    model = create(family, n_items=n_items, n_concepts=n_concepts)
    torch.use_deterministic_algorithms(True, warn_only=True)
    result = fit(model, train, valid, TrainConfig(**{**cfg.__dict__, "device": device, "autocast": autocast or None}))
    if device == "cuda":
        torch.cuda.synchronize()
    return model, result


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--dataset", default="dkvmn_assist2015")
    p.add_argument("--models", default="dkt,dkvmn,sakt")
    p.add_argument("--devices", default="cpu,cuda,cuda+bf16")
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--batch-tokens", type=int, default=TrainConfig.batch_tokens, help="positions per batch")
    p.add_argument("--threads", type=int, default=0, help="CPU threads for torch (0: torch's default)")
    p.add_argument("--out", default=None)
    args = p.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    files = split_files(args.dataset)
    fmt = DATASET_FORMATS[args.dataset]
    train_recs, valid_recs = list(iter_events(fmt, files.train)), list(iter_events(fmt, files.test))
    items, concepts = build_vocabularies(train_recs)
    train, valid = encode(train_recs, items, concepts), encode(valid_recs, items, concepts)
    cfg = TrainConfig(epochs=args.epochs, batch_tokens=args.batch_tokens, patience=args.epochs + 1, progress=False)
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    out = {"dataset": args.dataset, "train_positions": sum(len(h) for h in train), "torch": torch.__version__,
           "cpu_threads": torch.get_num_threads(), "cublas_workspace_config": os.environ.get("CUBLAS_WORKSPACE_CONFIG"),
           "cpu": platform.processor() or platform.machine(), "gpu": gpu, "train": cfg.__dict__, "runs": []}
    print(json.dumps({k: v for k, v in out.items() if k != "runs"}), flush=True)
    specs = [d for d in args.devices.split(",") if not d.startswith("cuda") or gpu]
    families = args.models.split(",")
    for family in families:
        for spec in specs:
            started = time.perf_counter()
            model, result = train_once(family, spec, train, valid, len(items), len(concepts), cfg)
            seconds = time.perf_counter() - started
            run = {"family": family, "device": spec, "seconds": round(seconds, 2),
                   "seconds_per_epoch": round(seconds / len(result.history), 2),
                   "positions_per_s": round(out["train_positions"] * len(result.history) / seconds),
                   "valid_auc": round(result.best_valid, 4), "best_epoch": result.best_epoch}
            if spec.startswith("cuda") and family == families[0]:
                again, _ = train_once(family, spec, train, valid, len(items), len(concepts), cfg)
                pairs = zip(model.state_dict().values(), again.state_dict().values())
                run["rerun_max_abs_weight_diff"] = max(float((a - b).abs().max()) for a, b in pairs)
            out["runs"].append(run)
            print(json.dumps(run), flush=True)
    by = {(r["family"], r["device"]): r for r in out["runs"]}
    for family in families:
        cpu = by.get((family, "cpu"))
        for spec in (s for s in specs if s != "cpu" and cpu):
            run = by[(family, spec)]
            print(f"{family}: CPU/{spec} seconds per epoch {cpu['seconds_per_epoch'] / run['seconds_per_epoch']:.2f}, "
                  f"valid AUC cpu {cpu['valid_auc']} {spec} {run['valid_auc']}")
    if args.out:
        with open(args.out, "w") as fh:
            json.dump(out, fh, indent=2)


if __name__ == "__main__":
    main()
