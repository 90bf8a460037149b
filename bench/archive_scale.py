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
- epoch (``--epoch``): one fine-tuning epoch of DKT (its default configuration) on CPU over those batches,
  with ``--torch-threads`` threads;
- floor (``--floor``): DuckDB's own ORDER BY of the same rows and columns, no deduplication: what the
  scan stage cannot go below while DuckDB sorts the archive.
- cycle (``--cycle``): the data side of one Trainer cycle at C = day 300, H = 14 days: its windows with
  the training window streamed (``build_windows_from_archive(train_buffer_events=--budget)``), then the
  leakage gate's data checks over them (split_disjoint, windowed_after_split, vocab_from_train,
  repeated_rows), each reading the training window pass by pass; cycle_held: the same windows held in
  memory (``train_buffer_events=None``), no checks.

C is day 300 of the archive's 365. Every stage reports its wall time and its process's CPU time (user +
system, DuckDB's threads included), from after its imports, and the load average when it ends: on a
shared machine events per CPU-second is the figure that compares. Usage::

    python bench/archive_scale.py --events 10000000 --floor
    python bench/archive_scale.py --events 1000000 --epoch
    python bench/archive_scale.py --events 100000000
    python bench/archive_scale.py --events 10000000 --cycle --only cycle_held cycle
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
STAGES = ("generate", "floor", "scan", "windows", "batches", "epoch", "cycle_held", "cycle")


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def scan_config(args):
    from ktstream.data.columnar import ScanConfig

    return ScanConfig(memory_limit=args.memory_limit, threads=args.threads,
                      temp_directory=str(Path(args.folder).parent / (Path(args.folder).name + "-duckdb-tmp")))


def cutoff_ms() -> int:
    from ktstream.data.synthetic_archive import START_MS

    return START_MS + 300 * DAY_MS


def vocabularies(args):
    from ktstream.data.columnar import connect
    from ktstream.finetune.windows import archive_vocabularies

    return archive_vocabularies(args.folder, cutoff_ms(), cutoff_ms(), None, connect(scan_config(args)))


def stage(args) -> dict:
    """One stage in this process, its wall and CPU time taken from after the imports."""
    import torch  # noqa: F401 (imported before the clocks start, as are the modules below)

    import ktstream.data.synthetic_archive  # noqa: F401
    import ktstream.finetune.stream  # noqa: F401
    import ktstream.training.trainer  # noqa: F401

    started, cpu_started = time.time(), cpu_seconds()
    result = _run_stage(args, started)
    return {**result, "cpu_seconds": cpu_seconds() - cpu_started}


def _run_stage(args, started: float) -> dict:
    import numpy as np
    import torch

    from ktstream.data.columnar import COLUMNS, ORDERS, _files_sql, archive_files, connect, encode_table, \
        learner_tables, scan
    from ktstream.data.histories import collate
    from ktstream.data.synthetic_archive import write_synthetic_archive
    from ktstream.finetune.finetune import FinetuneConfig
    from ktstream.finetune.stream import ArchiveTrainingData
    from ktstream.models import create
    from ktstream.training.trainer import _train_epoch

    if args.stage == "generate":
        out = write_synthetic_archive(args.folder, args.events, seed=0)
        return {"events": out["rows"], **out, "seconds": time.time() - started}
    if args.stage == "floor":
        sql = (f"SELECT {', '.join(COLUMNS)} FROM {_files_sql(archive_files(args.folder))} "
               f"ORDER BY {ORDERS['learner'].replace('fidx, frow', 'file_index, file_row_number')}")
        rows = sum(b.num_rows for b in connect(scan_config(args)).sql(sql).to_arrow_reader(262_144))
        return {"events": rows, "seconds": time.time() - started}
    if args.stage == "scan":
        rows = sum(b.num_rows for b in scan(args.folder, order="learner", cfg=scan_config(args)))
        return {"events": rows, "seconds": time.time() - started}
    if args.stage == "windows":
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
    if args.stage in ("cycle", "cycle_held"):
        return _cycle(args, started)
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
    torch.manual_seed(0)
    torch.set_num_threads(args.torch_threads)
    model = create("dkt", n_items=len(items), n_concepts=len(concepts), n_categories=2)
    cfg = FinetuneConfig(epochs=1, device="cpu", progress=False).train_config()
    opt = torch.optim.Adam(model.parameters(), lr=cfg.lr)
    loss, count = _train_epoch(model, opt, data, cfg, np.random.default_rng(0), torch.device("cpu"), "epoch", False)
    return {"events": count, "train_loss": loss / max(count, 1), "model": model.config(),
            "seconds": time.time() - started}


def _cycle(args, started: float) -> dict:
    from ktstream.finetune.promotion import gate_data
    from ktstream.finetune.windows import build_windows_from_archive
    from ktstream.leakage import GateConfig
    from ktstream.leakage.expansion import repeated_rows_check
    from ktstream.leakage.protocol import split_disjoint, vocab_from_train, windowed_after_split

    streamed = args.stage == "cycle"
    data = build_windows_from_archive(args.folder, cutoff_ms(), 14 * DAY_MS, cfg=scan_config(args),
                                      train_buffer_events=args.budget if streamed else None)
    out = {"events": data.counts["train_events"] + data.counts["select_events"] + data.counts["judge_events"],
           **data.counts, "windows_seconds": time.time() - started, "windows_peak_rss_mb": peak_rss_mb()}
    if streamed:
        gate = gate_data(data)
        for check in (split_disjoint, windowed_after_split, vocab_from_train, repeated_rows_check):
            t0 = time.time()
            r = check(gate, GateConfig())
            out[check.__name__] = {"status": r.status, "seconds": time.time() - t0}
    return {**out, "seconds": time.time() - started}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--events", type=int, default=10_000_000)
    parser.add_argument("--folder", default=None, help="the archive (default /tmp/ktstream-archive-<events>)")
    parser.add_argument("--memory-limit", default="3GB", help="DuckDB's memory limit (it spills past it)")
    parser.add_argument("--threads", type=int, default=None, help="DuckDB's threads (default: one per core)")
    parser.add_argument("--budget", type=int, default=2_000_000, help="training positions held per buffer")
    parser.add_argument("--epoch", action="store_true", help="also one fine-tuning epoch (DKT, CPU)")
    parser.add_argument("--torch-threads", type=int, default=1, help="torch's threads in the epoch stage")
    parser.add_argument("--floor", action="store_true", help="also DuckDB's ORDER BY alone (no deduplication)")
    parser.add_argument("--cycle", action="store_true", help="also a Trainer cycle's windows and data checks")
    parser.add_argument("--only", nargs="+", choices=STAGES, help="run these stages only")
    parser.add_argument("--stage", choices=STAGES, help=argparse.SUPPRESS)
    parser.add_argument("--out", default="runs/archive_scale")
    args = parser.parse_args()
    args.folder = args.folder or f"/tmp/ktstream-archive-{args.events}"
    if args.stage:  # one stage, in this process: its figures as one JSON line
        result = stage(args)
        print(json.dumps({**result, "peak_rss_mb": peak_rss_mb(), "load_average": os.getloadavg()[0]}))
        return
    results = {}
    todo = [s for s in STAGES if (s != "epoch" or args.epoch) and (s != "floor" or args.floor)
            and (not s.startswith("cycle") or args.cycle)]
    if Path(args.folder).exists():
        todo.remove("generate")
    if args.only:
        todo = [s for s in todo if s in args.only]
    cores = args.threads or os.cpu_count()
    for name in todo:
        cmd = [sys.executable, __file__, "--stage", name, *sys.argv[1:]]
        out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.strip().splitlines()[-1]
        r = json.loads(out)
        r["events_per_s"] = r["events"] / r["seconds"]
        r["events_per_s_per_core"] = r["events_per_s"] / cores
        r["events_per_cpu_second"] = r["events"] / max(r["cpu_seconds"], 1e-9)
        results[name] = r
        print(f"{name:9s} {r['events']:>12,} events {r['seconds']:8.1f} s {r['events_per_s']:>12,.0f} events/s "
              f"(wall/{cores} cores {r['events_per_s_per_core']:,.0f}; per CPU-second "
              f"{r['events_per_cpu_second']:,.0f})  peak RSS {r['peak_rss_mb']:,.0f} MB  "
              f"load {r['load_average']:.1f}", flush=True)
    Path(args.out).mkdir(parents=True, exist_ok=True)
    path = Path(args.out) / f"{args.events}.json"
    if args.only and path.exists():  # the other stages' figures stay
        results = {**json.loads(path.read_text())["stages"], **results}
    path.write_text(json.dumps({"events": args.events, "cores": cores,
                                                                     "memory_limit": args.memory_limit,
                                                                     "budget": args.budget, "stages": results},
                                                                    indent=1))


if __name__ == "__main__":
    main()
