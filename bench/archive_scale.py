"""Archive-scale benchmark: synthetic archives of 10M and 100M events through archive -> windows -> batches.

Each stage runs in a process of its own and prints events/s and that process's peak RSS (DuckDB's memory
included: it runs in the process):

- generate: write the synthetic archive (``ktstream.data.synthetic_archive``; skipped when it exists);
- scan: read, deduplicate by (learner, event id) and order by learner and time (DuckDB), every row
  streamed through as Arrow batches;
- windows: the vocabularies of the events < C (first-seen order) and every learner's training history
  (< C) encoded as arrays, table by table;
- batches: the training window as the trainer sees it (``ArchiveTrainingData``: segments of 200, buffers
  of ``--budget`` positions, batches of 1,600 positions, each collated into tensors);
- epoch (``--epoch``): one fine-tuning epoch of DKT on CPU over those batches.

C is day 300 of the archive's 365. Usage::

    python bench/archive_scale.py --events 10000000 --epoch
    python bench/archive_scale.py --events 100000000
Writes runs/archive_scale/<events>.json.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

DAY_MS = 86_400_000
STAGES = ("generate", "scan", "windows", "batches", "epoch")


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def scan_config(args):
    from ktstream.data.columnar import ScanConfig

    return ScanConfig(memory_limit=args.memory_limit, threads=args.threads,
                      temp_directory=str(Path(args.folder).parent / "h9_duckdb_tmp"))


def cutoff_ms() -> int:
    from ktstream.data.synthetic_archive import START_MS

    return START_MS + 300 * DAY_MS


def vocabularies(args):
    from ktstream.data.columnar import connect
    from ktstream.finetune.windows import archive_vocabularies

    return archive_vocabularies(args.folder, cutoff_ms(), cutoff_ms(), None, connect(scan_config(args)))


def stage(args) -> dict:
    started = time.time()
    if args.stage == "generate":
        from ktstream.data.synthetic_archive import write_synthetic_archive

        out = write_synthetic_archive(args.folder, args.events, seed=0)
        return {"events": out["rows"], **out, "seconds": time.time() - started}
    if args.stage == "scan":
        from ktstream.data.columnar import scan

        rows = sum(b.num_rows for b in scan(args.folder, order="learner", cfg=scan_config(args)))
        return {"events": rows, "seconds": time.time() - started}
    if args.stage == "windows":
        import numpy as np

        from ktstream.data.columnar import connect, encode_table, learner_tables, scan

        items, concepts = vocabularies(args)
        vocab_s = time.time() - started
        cfg = scan_config(args)
        reader = scan(args.folder, end_ms=cutoff_ms(), order="learner", cfg=cfg, con=connect(cfg))
        learners = positions = 0
        for table in learner_tables(reader, 500_000):
            for h in encode_table(table, items, concepts, arrow_ids=True):
                learners += 1
                positions += int(np.searchsorted(h.times, cutoff_ms() / 1000.0, side="left"))
        return {"events": positions, "learners": learners, "items": len(items) - 2, "vocab_seconds": vocab_s,
                "seconds": time.time() - started}
    from ktstream.data.histories import collate
    from ktstream.finetune.stream import ArchiveTrainingData

    import numpy as np

    items, concepts = vocabularies(args)
    data = ArchiveTrainingData(args.folder, cutoff_ms(), items, concepts, segment=200, budget_events=args.budget,
                               cfg=scan_config(args))
    if args.stage == "batches":
        n_batches = positions = 0
        for hs in data.batches(32, np.random.default_rng(0), 1600):
            batch = collate(hs)
            n_batches += 1
            positions += int(batch.mask.sum())
        return {"events": positions, "batches": n_batches, "seconds": time.time() - started}
    import torch

    from ktstream.finetune.finetune import FinetuneConfig
    from ktstream.models import create
    from ktstream.training.trainer import _train_epoch

    torch.manual_seed(0)
    torch.set_num_threads(args.threads or os.cpu_count())
    model = create("dkt", n_items=len(items), n_concepts=len(concepts), n_categories=2)
    cfg = FinetuneConfig(epochs=1, device="cpu", progress=False).train_config()
    opt = torch.optim.Adam(model.parameters(), lr=cfg.lr)
    loss, count = _train_epoch(model, opt, data, cfg, np.random.default_rng(0), torch.device("cpu"), "epoch", False)
    return {"events": count, "train_loss": loss / max(count, 1), "model": model.config(),
            "seconds": time.time() - started}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--events", type=int, default=10_000_000)
    parser.add_argument("--folder", default=None, help="the archive (default /tmp/ktstream-archive-<events>)")
    parser.add_argument("--memory-limit", default="3GB", help="DuckDB's memory limit (it spills past it)")
    parser.add_argument("--threads", type=int, default=None, help="DuckDB's threads (default: one per core)")
    parser.add_argument("--budget", type=int, default=2_000_000, help="training positions held per buffer")
    parser.add_argument("--epoch", action="store_true", help="also one fine-tuning epoch (DKT, CPU)")
    parser.add_argument("--stage", choices=STAGES, help=argparse.SUPPRESS)
    parser.add_argument("--out", default="runs/archive_scale")
    args = parser.parse_args()
    args.folder = args.folder or f"/tmp/ktstream-archive-{args.events}"
    if args.stage:  # one stage, in this process: its figures as one JSON line
        result = stage(args)
        print(json.dumps({**result, "peak_rss_mb": peak_rss_mb()}))
        return
    results = {}
    todo = [s for s in STAGES if s != "epoch" or args.epoch]
    if Path(args.folder).exists():
        todo.remove("generate")
    cores = args.threads or os.cpu_count()
    for name in todo:
        cmd = [sys.executable, __file__, "--stage", name, *sys.argv[1:]]
        out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.strip().splitlines()[-1]
        r = json.loads(out)
        r["events_per_s"] = r["events"] / r["seconds"]
        r["events_per_s_per_core"] = r["events_per_s"] / cores
        results[name] = r
        print(f"{name:9s} {r['events']:>12,} events {r['seconds']:8.1f} s {r['events_per_s']:>12,.0f} events/s "
              f"({r['events_per_s_per_core']:,.0f} per core)  peak RSS {r['peak_rss_mb']:,.0f} MB", flush=True)
    Path(args.out).mkdir(parents=True, exist_ok=True)
    (Path(args.out) / f"{args.events}.json").write_text(json.dumps({"events": args.events, "cores": cores,
                                                                     "memory_limit": args.memory_limit,
                                                                     "budget": args.budget, "stages": results},
                                                                    indent=1))


if __name__ == "__main__":
    main()
