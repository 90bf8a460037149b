"""Capacity figures for sizing a deployment: events/s per engine, latency per batch, bytes per learner.

Runs the real engine loop (``ktstream.service.build_engine``: decode,
validate, waves, model, staged state, commit) over in-memory records, so the
figures exclude the broker and the network: they are the engine's ceiling on
one node. Kafka adds its own latency (``kafka.linger_ms``, the fetch) on top.

    python deploy/capacity.py --family dkt --learners 2000 --threads 1
    python deploy/capacity.py --checkpoint /path/to/checkpoint --threads 2

Prints one block of figures; docs/operations.md explains how to turn them into
replica counts, CPU requests and ``engine.cache_max_bytes``.
"""

from __future__ import annotations

import argparse
import json
import resource
import time
import zlib

import numpy as np
import torch

from ktstream.config import load_settings
from ktstream.core import Record
from ktstream.data.histories import build_vocabularies
from ktstream.data.simulate import simulate
from ktstream.engine.records import MemorySink, MemorySource
from ktstream.engine.replay import replay_order
from ktstream.models import create
from ktstream.models.checkpoint import ServingModel, load_checkpoint
from ktstream.service import build_engine


def records_for(events: list[dict], topic: str, partitions: int) -> list[Record]:
    """Kafka-like records keyed by learner, partitioned by a hash of the key (as the producer does)."""
    offsets = [0] * partitions
    out = []
    for r in events:
        p = zlib.crc32(r["learner_id"].encode()) % partitions
        out.append(Record(topic, p, offsets[p], r["learner_id"].encode(), json.dumps(r).encode(), 0))
        offsets[p] += 1
    return out


def serving_model(args: argparse.Namespace, events: list[dict]) -> ServingModel:
    if args.checkpoint:
        model, items, concepts, version = load_checkpoint(args.checkpoint)
        return ServingModel(model, items, concepts, version)
    items, concepts = build_vocabularies(events)
    torch.manual_seed(0)  # untrained weights: the cost of a prediction does not depend on their values
    model = create(args.family, n_items=len(items), n_concepts=len(concepts), n_categories=2).eval()
    return ServingModel(model, items, concepts, f"capacity-{args.family}")


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--family", default="dkt", help="model family at its default size (ignored with --checkpoint)")
    ap.add_argument("--checkpoint", default=None, help="a checkpoint folder to measure instead")
    ap.add_argument("--learners", type=int, default=2000)
    ap.add_argument("--mean-length", type=int, default=30, help="events per learner")
    ap.add_argument("--threads", type=int, default=1, help="engine.torch_threads")
    ap.add_argument("--max-batch", type=int, default=1000, help="engine.max_batch")
    ap.add_argument("--partitions", type=int, default=6)
    args = ap.parse_args(argv)

    torch.set_num_threads(args.threads)
    events = replay_order(simulate(n_learners=args.learners, mean_length=args.mean_length, seed=1,
                                   start_spread_ms=60_000))
    settings = load_settings(None, engine={"max_batch": args.max_batch, "torch_threads": args.threads},
                             model={"family": args.family})
    serving = serving_model(args, events)
    source, sink = MemorySource(records_for(events, settings.kafka.topics.events, args.partitions)), MemorySink()
    engine = build_engine(settings, serving, source, sink)
    batch_seconds = []
    started, cpu_started = time.perf_counter(), time.process_time()
    while source.pending:
        t0 = time.perf_counter()
        engine.step()
        batch_seconds.append(time.perf_counter() - t0)
    elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu_started
    learners = len(engine.cache)
    figures = {
        "model": serving.model.name, "version": serving.version, "threads": args.threads,
        "events": len(events), "learners": learners, "seconds": round(elapsed, 2),
        "events_per_second": round(len(events) / elapsed, 1),
        # per CPU-second of this process: robust to other load on a shared machine
        "events_per_cpu_second": round(len(events) / cpu, 1),
        "batch_seconds_p50": round(float(np.percentile(batch_seconds, 50)), 4),
        "batch_seconds_p99": round(float(np.percentile(batch_seconds, 99)), 4),
        "state_bytes_per_learner": round(engine.cache.bytes / max(learners, 1), 1),
        "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }
    print(json.dumps(figures, indent=2))
    return figures


if __name__ == "__main__":
    main()
