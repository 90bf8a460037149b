"""The engine's own cost per event, without a broker: bench_engine's load through MemorySource and
MemorySink, so that changes to the engine can be compared without the Kafka clients' share.

Two measures:

- CPU time per event (default): median and least of ``--repeat`` runs per configuration. On
  shared cores these swing by 20-40% within minutes; compare configurations of one run only.
- ``--instructions``: instructions per event counted by valgrind's callgrind over ``--events``
  events after ``--warm-up`` events (the run re-executes itself under valgrind, counting only
  the measured batches). Deterministic to about 0.1%, so two versions of the code can be
  compared across runs; it does not see cache misses, which weigh more on models with large
  states (SAKT's windows), so confirm a gain in time as well.

    python bench/engine_offline.py --configs dkt,sakt,sakt/no-describe
    python bench/engine_offline.py --configs sakt --instructions
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import zlib
from pathlib import Path

import orjson
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

from bench_engine import model_config, passthrough_engine, serving_models, throughput_load  # noqa: E402
from ktstream.config import load_settings  # noqa: E402
from ktstream.data.histories import build_vocabularies  # noqa: E402
from ktstream.core import Record  # noqa: E402
from ktstream.engine import MemorySink, MemorySource
from ktstream.service import build_engine, tune_process  # noqa: E402

PARTITIONS = 4


def records(n_events: int, mean_length: int) -> tuple[list[Record], list[dict]]:
    """bench_engine's throughput load as records keyed by learner."""
    load = throughput_load(n_events, mean_length)
    offsets, out = [0] * PARTITIONS, []
    for r in load:
        p = zlib.crc32(r["learner_id"].encode()) % PARTITIONS
        out.append(Record("bench.events", p, offsets[p], r["learner_id"].encode(), orjson.dumps(r), 0))
        offsets[p] += 1
    return out, load


class FlushedSink(MemorySink):
    """A MemorySink that keeps nothing it flushed, as a Kafka sink keeps nothing: outputs kept alive
    would be scanned by the engine's garbage collector and frozen with the learner states."""

    def flush(self, timeout_s: float) -> None:
        super().flush(timeout_s)
        self.flushed.clear()


def engine_for(cfg: str, serving: dict, recs: list[Record], max_batch: int = 1000):
    s = load_settings(None, kafka=dict(topics=dict(events="bench.events", predictions="p", dead_letters="d")),
                      engine=dict(max_batch=max_batch), metrics=dict(port=0))
    if cfg == "passthrough":
        engine = passthrough_engine(s, MemorySource(recs), FlushedSink())
    else:
        name, s = model_config(cfg, s)
        engine = build_engine(s, serving[name], MemorySource(recs), FlushedSink())
    if engine.collector is not None:
        engine.collector.start()  # as Engine.run does; Engine.close hands it back
    return engine


def run(engine, n: int) -> int:
    done = 0
    while done < n:
        records = getattr(engine.step(), "records", None)  # no reference to the batch: the collector
        if records is None:  # runs before the next poll, when a loop has dropped the last batch
            break
        done += records
    return done


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--configs", default="passthrough,dkt,dkvmn,sakt,sakt/no-describe",
                    help="passthrough or NAME[@float16][@KEY=VALUE...][/no-describe], comma-separated "
                         "(e.g. sakt@position=alibi)")
    ap.add_argument("--events", type=int, default=20_000)
    ap.add_argument("--mean-length", type=int, default=10)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--max-batch", type=int, default=1000,
                    help="records per micro-batch (1: every wave one learner, i.e. each wave's fixed cost)")
    ap.add_argument("--instructions", action="store_true", help="count instructions under callgrind")
    ap.add_argument("--warm-up", type=int, default=10_000, help="events before counting (--instructions)")
    ap.add_argument("--counted", type=int, default=3_000, help="events counted (--instructions)")
    ap.add_argument("--_under-valgrind", dest="under_valgrind", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    configs = args.configs.split(",")
    if args.instructions and args.warm_up + args.counted > args.events:
        sys.exit("--warm-up plus --counted must not exceed --events")
    if args.instructions and not args.under_valgrind:
        return count_instructions(args, configs)
    torch.set_num_threads(1)
    recs, load = records(args.events, args.mean_length)
    items, concepts = build_vocabularies(load)
    serving = serving_models(sorted({c.split("/")[0] for c in configs} - {"passthrough"}), items, concepts)
    tune_process(load_settings(None).engine)
    if args.under_valgrind:
        engine = engine_for(configs[0], serving, recs, args.max_batch)
        engine.gauge_interval_s = math.inf  # sampled by wall time, which valgrind stretches: counts would vary
        run(engine, args.warm_up)
        subprocess.run(["callgrind_control", "-i", "on", str(os.getpid())], capture_output=True, check=True)
        done = run(engine, args.counted)
        subprocess.run(["callgrind_control", "-i", "off", str(os.getpid())], capture_output=True, check=True)
        print(f"counted {done}")
        return
    cpu: dict[str, list[float]] = {c: [] for c in configs}
    for _ in range(args.repeat):
        for cfg in configs:
            engine = engine_for(cfg, serving, list(recs), args.max_batch)
            start = time.process_time()
            done = run(engine, len(recs))
            cpu[cfg].append((time.process_time() - start) / done * 1e6)
            engine.close()
    print(f"{len(recs)} events of {len({r.key for r in recs})} learners, max_batch {args.max_batch}, one torch thread, "
          f"{args.repeat} runs each (CPU us per event):")
    for cfg in configs:
        print(f"  {cfg:28s} median {statistics.median(cpu[cfg]):6.1f}  least {min(cpu[cfg]):6.1f}")


def count_instructions(args, configs: list[str]) -> None:
    if shutil.which("valgrind") is None or shutil.which("callgrind_control") is None:
        sys.exit("--instructions needs valgrind (callgrind) on the PATH")
    print(f"instructions per event, {args.counted} events after {args.warm_up} (callgrind):")
    for cfg in configs:
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp) / "callgrind.out"
            cmd = ["valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={out}",
                   sys.executable, __file__, "--configs", cfg, "--events", str(args.events),
                   "--mean-length", str(args.mean_length), "--max-batch", str(args.max_batch),
                   "--warm-up", str(args.warm_up), "--counted", str(args.counted), "--_under-valgrind"]
            proc = subprocess.run(cmd, capture_output=True, text=True)
            counted = [ln for ln in proc.stdout.splitlines() if ln.startswith("counted ")]
            totals = [ln for ln in out.read_text().splitlines() if ln.startswith("totals:")] if out.exists() else []
            if proc.returncode != 0 or not counted or not totals:
                sys.exit(f"{cfg}: callgrind run failed:\n{proc.stderr[-2000:]}")
            events = int(counted[0].split()[1])
            print(f"  {cfg:28s} {int(totals[0].split()[1]) / events:9.0f}")


if __name__ == "__main__":
    main()
