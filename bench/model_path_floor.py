"""How cheap DKT's model path could be with per-batch arrays: a floor, not an engine.

The engine's DKT path costs several times its torch work in per-event Python (docs/performance.md,
"Why DKT's ratios still fall short"). This measures what is left when that work is done per batch:
learners addressed as slots of preallocated (N, layers, hidden) tensors, waves found by each event's
occurrence rank in the batch, one predict and one update per wave, the engine's prediction message
and raw-window record per event (a list append) and the bookkeeping as columns indexed by slot. Decoding
is the engine's (``decode``), and so are the predictions: steps (a learner's events sharing an event
time are predicted from the state at the step's start) and prediction requests (never applied) as
in invariant 1. Left out, so a real design pays more: late events and duplicates, byte bounds of
windows and of the cache, working copies for roll-back, the durable store, metrics and garbage
collection's tuning.

Printed: CPU us per event of the floor, of the engine with DKT and of the engine's passthrough on the
same records (engine_offline's load), in one run, and each model path (its cost minus passthrough's).

    python bench/model_path_floor.py --events 100000 --repeat 3

``FloorProcessor`` puts the floor in the engine's loop in place of the processor, so that
``bench/bench_engine.py --floor`` drains the broker with it on each client beside the engine.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

from bench_engine import serving_models  # noqa: E402
from engine_offline import engine_for, records, run  # noqa: E402
from ktstream.config import load_settings  # noqa: E402
from ktstream.core import Output, Record  # noqa: E402
from ktstream.data.histories import NO_RESPONSE, Interactions, build_vocabularies  # noqa: E402
from ktstream.engine.decode import Decoded, decode  # noqa: E402
from ktstream.engine.messages import prediction  # noqa: E402
from ktstream.engine.processor import Batch, batch_for  # noqa: E402
from ktstream.engine.state_cache import StateCache  # noqa: E402
from ktstream.engine.swap import window_record  # noqa: E402
from ktstream.serving.runner import ModelRunner  # noqa: E402
from ktstream.service import tune_process  # noqa: E402


class SlotDKT:
    """DKT's serving path over learner slots: see the module docstring."""

    def __init__(self, serving, capacity: int, topic: str = "predictions"):
        self.model, self.topic = serving.model, topic
        self.runner = ModelRunner(serving.model, serving.items, serving.concepts, "v", describe=False)
        shape = (capacity, self.model.layers, self.model.hidden)
        self.h, self.c = torch.zeros(shape), torch.zeros(shape)
        self.step_h, self.step_c = torch.zeros(shape), torch.zeros(shape)  # state at the open step's start
        self.step_time = np.full(capacity, -2, np.int64)  # the open step's event time (-1: an event without one)
        self.slots: dict[str, int] = {}
        self.windows: list[list[tuple]] = []
        self.events = np.zeros(capacity, np.int64)
        self.last_offset = np.full(capacity, -1, np.int64)

    def step(self, batch: list[Record]) -> list[Output]:
        now = time.time_ns() // 1_000_000
        valid = [d for d in (decode(r, 65536, now + 300_000) for r in batch) if type(d) is Decoded]
        n = len(valid)
        slots, rank, seen = np.empty(n, np.intp), np.empty(n, np.intp), {}
        for i, d in enumerate(valid):
            s = self.slots.get(d.event.learner_id)
            if s is None:
                s = self.slots[d.event.learner_id] = len(self.windows)
                self.windows.append([])
            slots[i], rank[i] = s, seen.get(s, 0)
            seen[s] = rank[i] + 1
        times = np.fromiter((-1 if d.event_time_ms is None else d.event_time_ms for d in valid), np.int64, n)
        probs = self._run(self.runner.encode_decoded(valid), slots, rank, times).tolist()
        seqs = (self.events[slots] + rank + 1).tolist()
        outputs = []
        for d, p, s, seq in zip(valid, probs, slots.tolist(), seqs):
            outputs.append(prediction(self.topic, d, "dkt", "v", p, False, now)[0])
            self.windows[s].append(window_record(d, seq))
        np.add.at(self.events, slots, 1)
        self.last_offset[slots] = [d.record.offset for d in valid]
        return outputs

    def _run(self, query: Interactions, slots: np.ndarray, rank: np.ndarray, times: np.ndarray) -> torch.Tensor:
        """Wave after wave: predict from the state at each event's step start, apply the responses."""
        probs = torch.empty(len(slots), self.model.n_categories)
        applied = query.responses.numpy() != NO_RESPONSE
        with torch.inference_mode():
            query = self.model.prepare(query)
            for wave in range(int(rank.max(initial=-1)) + 1):
                rows = np.flatnonzero(rank == wave)
                at, t = slots[rows], times[rows]
                opens = (t != self.step_time[at]) | (t == -1)  # a new step starts at the current state
                if opens.any():
                    fresh = torch.from_numpy(at[opens])
                    self.step_h[fresh], self.step_c[fresh] = self.h[fresh], self.c[fresh]
                    self.step_time[at[opens]] = t[opens]
                index = torch.from_numpy(at)
                sub = query.take(torch.from_numpy(rows))
                probs[torch.from_numpy(rows)] = self.model.predict({"h": self.step_h[index]}, sub)
                upd = applied[rows]
                if upd.any():
                    index, keep = torch.from_numpy(at[upd]), torch.from_numpy(np.flatnonzero(upd))
                    new = self.model.update({"h": self.h[index], "c": self.c[index]}, sub.take(keep))
                    self.h[index], self.c[index] = new["h"], new["c"]
        return probs


class FloorProcessor:
    """``SlotDKT`` as the engine loop's processor: polling, producing and committing stay the engine's.
    Dead letters are left out (the bench's load has none)."""

    def __init__(self, serving, capacity: int, predictions: str):
        self.floor = SlotDKT(serving, capacity, predictions)
        self.cache = StateCache(1 << 20)  # the engine applies what a batch stages here: the floor stages nothing
        self.runner = SimpleNamespace(name="floor", version="-")
        self.stale = ()

    def decode(self, records: list[Record]) -> tuple[Batch, list[Record]]:
        return batch_for(records), records

    def process_decoded(self, batch: Batch, records: list[Record]) -> Batch:
        batch.outputs = self.floor.step(records)
        batch.predictions = len(batch.outputs)
        return batch

    def drop_oversized(self, batch: Batch, limit: int) -> int:
        return 0


def floor_cpu_us(serving, recs: list[Record], max_batch: int) -> float:
    """CPU us per event of SlotDKT over ``recs``; young collections between batches, as the engine's."""
    floor = SlotDKT(serving, len({r.key for r in recs}))
    gc.collect()
    gc.freeze()
    gc.disable()
    try:
        start = time.process_time()
        for i in range(0, len(recs), max_batch):
            floor.step(recs[i : i + max_batch])
            if gc.get_count()[0] > 2000:
                gc.collect(0)
        return (time.process_time() - start) / len(recs) * 1e6
    finally:
        gc.enable()
        gc.unfreeze()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--events", type=int, default=100_000)
    ap.add_argument("--mean-length", type=int, default=10)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--max-batch", type=int, default=1000)
    args = ap.parse_args()
    torch.set_num_threads(1)
    recs, load = records(args.events, args.mean_length)
    serving = serving_models(["dkt"], *build_vocabularies(load))
    tune_process(load_settings(None).engine)
    cpu: dict[str, list[float]] = {"floor": [], "dkt": [], "passthrough": []}
    for _ in range(args.repeat):
        cpu["floor"].append(floor_cpu_us(serving["dkt"], recs, args.max_batch))
        for cfg in ("dkt", "passthrough"):
            engine = engine_for(cfg, serving, list(recs), args.max_batch)
            start = time.process_time()
            done = run(engine, len(recs))
            cpu[cfg].append((time.process_time() - start) / done * 1e6)
            engine.close()
    med = {k: statistics.median(v) for k, v in cpu.items()}
    print(f"{len(recs)} events, max_batch {args.max_batch}, one torch thread, median of {args.repeat} "
          f"(CPU us per event; model path = minus passthrough):")
    for k, v in cpu.items():
        path = f"  model path {med[k] - med['passthrough']:5.1f}" if k != "passthrough" else ""
        print(f"  {k:12s} {med[k]:6.1f}  (runs {', '.join(f'{x:.1f}' for x in v)}){path}")


if __name__ == "__main__":
    main()
