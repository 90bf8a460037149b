"""Many learners, bounded memory: the engine core over the SQLite store with the hot cache capped.

Drives the engine core (Processor + Engine + StateCache over a SqliteStore, no
Kafka) with a generated stream: phase 1 gives each of --learners distinct
learners one event (every state ends in the store; the cache holds at most
--cache-mb); the resident set is sampled throughout and printed against the cap.
Phase 2 replays one more event for --sample learners in random order with the
cold cache (each a store load); phase 3 does the same with a cache large enough
to hold them, after a warm-up pass. Prints events/s of both and their ratio.

The RSS check: the resident set grows by at most the cache cap plus what the
process needs besides the cache (the store's SQLite page caches, the C heap's
free lists, the interned-string table), printed as the overhead. With
``--id-chars N --concepts K --events E`` every learner id and each learner's
own K concept ids are N characters long and each learner sends E events, so
its raw window holds E records of long ids (a poison learner: K=64, N=250):
the cache must count those bytes for the bound to hold.

    python bench/bench_state.py --learners 1000000 --cache-mb 64
    python bench/bench_state.py --learners 20000 --cache-mb 64 --id-chars 250 --concepts 16 --events 3 --sample 0
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
import time

import torch

from ktstream.core import Record
from ktstream.data.vocab import Vocabulary
from ktstream.engine import StateCache
from ktstream.engine.engine import Engine
from ktstream.engine.processor import Processor
from ktstream.models import create, family
from ktstream.serving.runner import ModelRunner
from ktstream.state import SqliteStore

PARTS = 4


def rss_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


class GenSource:
    """Generated records, without holding the stream in memory; ``concepts`` names each learner's own
    concept ids (["c1"] when None)."""

    def __init__(self, learners, start_offsets, concepts=None):
        self.it, self.next, self.concepts = iter(learners), dict(start_offsets), concepts
        self.on_assigned = self.on_revoked = self.on_lost = lambda p: None
        self.done = False

    def poll(self, timeout_s, max_records):
        out = []
        for lid in self.it:
            p = hash(lid) % PARTS
            off = self.next[p]
            self.next[p] += 1
            ev = {"event_id": f"{lid[:40]}-{off}", "learner_id": lid, "item_id": f"q{off % 50}", "response": off % 2,
                  "concept_ids": self.concepts(lid) if self.concepts else ["c1"],
                  "event_time": 1_700_000_000_000 + off}
            out.append(Record("ev", p, off, lid.encode(), json.dumps(ev).encode(), 0))
            if len(out) == max_records:
                return out
        self.done = True
        return out

    def commit(self, offsets): pass
    def seek(self, offsets): raise NotImplementedError
    def assignment(self): return {("ev", p) for p in range(PARTS)}
    def lag(self): return {}
    def close(self): pass


class NullSink:
    def send(self, outputs): pass
    def flush(self, timeout_s): pass
    def close(self): pass


def drive(proc, learners, offsets, max_batch=1000, concepts=None) -> tuple[float, dict, float]:
    src = GenSource(learners, offsets, concepts)
    engine, peak, t0 = Engine(src, NullSink(), proc, max_batch=max_batch, poll_timeout_s=0.0), 0.0, time.perf_counter()
    n = 0
    while not src.done:
        b = engine.step()
        n += 0 if b is None else b.records
        if n % 50_000 < max_batch:
            peak = max(peak, rss_mb())
            if n % 200_000 < max_batch and n >= 200_000:
                print(f"  {n} events: RSS {rss_mb():.0f} MiB, cache {len(proc.cache)} learners", flush=True)
    return n / (time.perf_counter() - t0), src.next, max(peak, rss_mb())


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--learners", type=int, default=1_000_000)
    ap.add_argument("--cache-mb", type=float, default=64)
    ap.add_argument("--sample", type=int, default=20_000)
    ap.add_argument("--dir", default=None)
    ap.add_argument("--id-chars", type=int, default=0, help="pad learner and concept ids to this many characters")
    ap.add_argument("--concepts", type=int, default=1, help="concept ids per event, each learner its own")
    ap.add_argument("--events", type=int, default=1, help="events per learner in phase 1 (raw window records)")
    a = ap.parse_args()
    torch.set_num_threads(1)
    items, concepts = Vocabulary([f"q{i}" for i in range(50)]), Vocabulary(["c1"])
    torch.manual_seed(0)
    model = create("dkt", n_items=len(items), n_concepts=len(concepts), n_categories=2,
                   **family("dkt").tiny_config).eval()
    runner = ModelRunner(model, items, concepts, "bench", False)
    store = SqliteStore(a.dir or tempfile.mkdtemp(prefix="bench-state-"))
    for p in range(PARTS):
        store.open(("ev", p))
    cap = int(a.cache_mb * 2**20)
    base = rss_mb()
    proc = Processor(runner, StateCache(cap, store), "pred", "dead")
    pad = a.id_chars
    concepts = (lambda lid: [f"{lid[:24]}-c{j}-".ljust(pad, "c") for j in range(a.concepts)]) \
        if pad or a.concepts > 1 else None
    # lazy: the stream is not part of the engine's memory; each learner's events a batch apart
    chunk = 1000
    names = (f"u{i}-".ljust(pad, "u") for start in range(0, a.learners, chunk) for _ in range(a.events)
             for i in range(start, min(start + chunk, a.learners)))
    t0 = time.perf_counter()
    rate1, offsets, peak = drive(proc, names, {p: 0 for p in range(PARTS)}, concepts=concepts)
    stored = sum(store.count(("ev", p)) for p in range(PARTS))
    nbytes = sum(store.nbytes(("ev", p)) for p in range(PARTS))
    print(f"phase 1: {a.learners} learners, {rate1:.0f} events/s ({time.perf_counter() - t0:.0f} s); "
          f"stored {stored} learners, {nbytes / 2**20:.1f} MiB of tensors")
    print(f"RSS: start {base:.0f} MiB, peak {peak:.0f} MiB, growth {peak - base:.0f} MiB "
          f"vs cache cap {a.cache_mb:.0f} MiB (cache holds {len(proc.cache)} learners, "
          f"{proc.cache.bytes / 2**20:.1f} MiB accounted): overhead beyond the cap "
          f"{peak - base - a.cache_mb:.0f} MiB")
    if not a.sample:
        return
    sample = [f"u{i}-".ljust(pad, "u") for i in random.Random(0).sample(range(a.learners), min(a.sample, a.learners))]
    proc.cache = StateCache(cap, store)  # cold: none of the sample is cached
    cold, offsets, _ = drive(proc, sample, offsets, concepts=concepts)
    proc.cache = StateCache(1 << 40, store)
    drive(proc, sample, offsets, concepts=concepts)  # warm-up: loads them all
    warm, offsets, _ = drive(proc, sample, offsets, concepts=concepts)
    print(f"sample of {len(sample)}: cold cache (store loads) {cold:.0f} events/s, warm cache {warm:.0f} events/s, "
          f"warm/cold = {warm / cold:.2f}")


if __name__ == "__main__":
    main()
