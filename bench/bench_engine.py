"""Engine throughput and latency on the embedded broker (Tansu), each figure relative to passthrough.

Passthrough = the same engine loop (poll, validate each record with pydantic,
produce one small JSON message per event, flush with acks=all, commit) with no
model and no state. The engine runs DKT, DKVMN and SAKT (when registered) at
their default sizes on the same records.

1. Throughput: every configuration drains the same pre-loaded topic
   (--events simulated events, many learners active at once) with a fresh
   consumer group; the clock runs from the first polled record to the last
   commit (the group join is excluded). Configurations run round-robin
   --repeat times; the median is reported, with its ratio to passthrough (and
   the median of each round's ratio to passthrough's run of that round), and
   the CPU time per event (all threads of this process), whose ratio is what
   the throughput ratio would be on otherwise idle cores.
   Each model also runs with the extras of its predictions off (``/no-describe``).
2. Latency: each offered rate (--rates events/s, event time stamped at
   sending) is produced by a separate process for --seconds; p50/p99 of event
   time -> prediction produced, and the throughput achieved. Every latency run
   has a process and a broker of its own: Tansu keeps every topic in memory,
   and after the throughput runs (in the same process, on the same broker)
   passthrough's p99 at 5,000 ev/s was 34-216 ms instead of 19-40 ms.
   Configurations run round-robin --latency-repeat times; the median p50/p99
   and the range of p99 are reported, leaving out the first second of offered
   events (the publisher's producer bootstrapping and the new consumer's first
   fetches; the p99 with them is printed beside it), with the CPU time per
   event of the engine, the broker and the publisher, which share the cores:
   their sum times the rate is the cores the run needs to keep up. The
   publisher is librdkafka (``pip install -e '.[bench]'``; --publisher
   kafka-python otherwise), a quarter to a third of kafka-python's CPU per
   event. Each run also prints the engine loop's wall time per event in each
   phase (ktstream_loop_seconds_total): besides poll, their sum must stay
   well under 1e6 / rate microseconds for the loop to keep up. The summary
   also gives each configuration's p99 over passthrough's p99 of the same
   round (median of the rounds), which sets each run against one taken
   minutes apart; each run prints the load average. Neither removes the
   shared cores' drift: in two whole runs of one engine, SAKT's paired ratio
   was 1.86 and 1.08.

3. Clients and a peer: every configuration runs on each Kafka client of --clients
   (kafka.client: kafka-python, confluent; both by default when confluent-kafka is installed),
   with its ratio to the same configuration on the first client, paired by round; and, when
   quixstreams is installed (the bench extra), a Quix Streams app that keeps a running count
   per learner in its state (RocksDB with a changelog topic) drains the same topic
   (``quixstreams:stateful-count``), the peer a user would otherwise write.

    python bench/bench_engine.py                      # about 12 minutes on 2 shared cores (one client)
    python bench/bench_engine.py --events 20000 --repeat 2 --models dkt,dkvmn,sakt --skip-no-describe \
        --rates 5000 --latency-repeat 1               # both clients and the Quix row (docs/performance.md)
    python bench/bench_engine.py --events 5000 --seconds 3 --repeat 1 --latency-repeat 1   # smoke run
    python bench/bench_engine.py --repeat 0 --rates 5000 --latency-repeat 3   # latency runs only
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import math
import os
import multiprocessing as mp
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import orjson
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from connectors.broker import EmbeddedBroker  # noqa: E402
from connectors.kafka.admin import create_topics  # noqa: E402
from connectors.kafka import KafkaSink, sink_for, source_for  # noqa: E402
from ktstream.config import load_settings  # noqa: E402
from ktstream.data.histories import build_vocabularies  # noqa: E402
from ktstream.data.simulate import simulate  # noqa: E402
from ktstream.models.checkpoint import ServingModel  # noqa: E402
from ktstream.engine.decode import Decoded, decode  # noqa: E402
from ktstream.engine.engine import Engine  # noqa: E402
from ktstream.engine.messages import dead_letter, now_ms  # noqa: E402
from ktstream.engine.processor import Batch, batch_for, output_nbytes  # noqa: E402
from ktstream.core import Output  # noqa: E402
from ktstream.engine.replay import publish, replay_order  # noqa: E402
from ktstream.service import build_engine, collector_for, tune_process  # noqa: E402
from ktstream.engine.state_cache import StateCache  # noqa: E402
from ktstream.engine.metrics import EngineMetrics  # noqa: E402
from ktstream.models import create, names  # noqa: E402

PARTITIONS = 4
WARM_UP_S = 1.0  # latency percentiles leave out the first second of offered events
WORLD = dict(start_spread_ms=60_000, mean_gap_ms=30_000, mean_length=10)  # the simulated streams' shape


class Passthrough:
    """Decode and validate, then one small JSON output per event: the loop without model or state."""

    def __init__(self, predictions: str, dead: str, max_bytes: int):
        self.predictions, self.dead, self.max_bytes = predictions, dead, max_bytes
        self.cache = StateCache(1 << 20)
        self.runner = SimpleNamespace(name="passthrough", version="-")
        self.stale = ()  # no model, so never a swap to rebuild after

    def process(self, records) -> Batch:
        batch = batch_for(records)
        for rec in records:
            d = decode(rec, self.max_bytes)
            if not isinstance(d, Decoded):
                batch.outputs.append(dead_letter(self.dead, rec, d.reason, d.detail))
                continue
            produced = now_ms()
            msg = {"source": {"topic": rec.topic, "partition": rec.partition, "offset": rec.offset},
                   "event_id": d.event.event_id, "learner_id": d.event.learner_id, "event_time": d.event_time_ms,
                   "received_at_ms": batch.received_ms, "produced_at_ms": produced}
            # as the engine's predictions (ktstream.engine.messages.prediction)
            batch.outputs.append(tuple.__new__(Output, (self.predictions, rec.key, orjson.dumps(msg), None, ())))
            batch.predictions += 1
            if d.event_time_ms is not None:
                batch.end_to_end_ms.append(produced - d.event_time_ms)
        return batch

    def decode(self, records) -> tuple[Batch, None]:
        """All of ``process``: it reads no learner state."""
        return self.process(records), None

    def process_decoded(self, batch: Batch, _) -> Batch:
        return batch

    def drop_oversized(self, batch: Batch, limit: int) -> int:
        """The engine's size check on every output; passthrough's outputs are small, so none is dropped."""
        assert all(output_nbytes(o) <= limit for o in batch.outputs), "passthrough made an oversized output"
        return 0


def model_config(cfg: str, s):
    """NAME[@float16][@KEY=VALUE...][/no-describe] -> the serving model's key and the settings for it."""
    name, _, variant = cfg.partition("/")
    return name, s.model_copy(update={"engine": s.engine.model_copy(update={"describe": variant != "no-describe"})})


def throughput_load(n_events: int, mean_length: int) -> list[dict]:
    """The throughput runs' events in publishing order: about ``n_events / mean_length`` learners."""
    world = dict(WORLD, mean_length=mean_length)
    return replay_order(simulate(n_learners=max(n_events // mean_length, 10), seed=1, **world))[:n_events]


def split_config(cfg: str) -> tuple[str, str]:
    """'CLIENT:CONFIG' -> (client, config); a config without a client is kafka-python's."""
    client, sep, rest = cfg.partition(":")
    return (client, rest) if sep else ("kafka-python", cfg)


def make_engine(cfg: str, s, serving: dict, learners: int = 0) -> Engine:
    """``learners``: how many the load has (the floor's slots)."""
    client, cfg = split_config(cfg)
    s = s.model_copy(update={"kafka": s.kafka.model_copy(update={"client": client})})
    source, sink = source_for(s.kafka, max_poll_records=s.engine.max_batch), sink_for(s)  # as serve builds them
    if cfg == "floor":
        return floor_engine(s, serving["dkt"], learners, source, sink)
    if cfg != "passthrough":
        name, s = model_config(cfg, s)
        return build_engine(s, serving[name], source, sink)
    return passthrough_engine(s, source, sink)


def floor_engine(s, dkt, learners: int, source, sink) -> Engine:
    """The engine loop around bench/model_path_floor.py's DKT floor (``--floor``), a slot per learner."""
    from model_path_floor import FloorProcessor  # it imports this module

    e = s.engine
    processor = FloorProcessor(dkt, learners, s.kafka.topics.predictions)
    return Engine(source, sink, processor, EngineMetrics(), e.max_batch, e.poll_timeout_ms / 1000.0, e.flush_timeout_s,
                  collector=collector_for(e), overlap_delivery=e.overlap_delivery)


def passthrough_engine(s, source, sink) -> Engine:
    """The engine loop around ``Passthrough`` instead of a model's processor, set up as build_engine sets it."""
    e = s.engine
    processor = Passthrough(s.kafka.topics.predictions, s.kafka.topics.dead_letters, e.max_record_bytes)
    return Engine(source, sink, processor, EngineMetrics(), e.max_batch, e.poll_timeout_ms / 1000.0, e.flush_timeout_s,
                  collector=collector_for(e), overlap_delivery=e.overlap_delivery)


#: Run by ``throughput_broker`` in a process of its own: the proxy's Python would otherwise share the
#: engine's interpreter lock.
PROXIED_BROKER = """
import signal, sys, time
from tests.support.delay_proxy import ProxiedBroker
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
with ProxiedBroker(lifetime_s=7200) as broker:
    broker.proxy.set_delay(float(sys.argv[1]))
    print(broker.bootstrap_servers, flush=True)
    time.sleep(7200)
"""


class _Reached(EmbeddedBroker):
    """A broker that runs elsewhere, addressed by its bootstrap servers."""

    def __init__(self, bootstrap: str):
        self._bootstrap = bootstrap

    @property
    def bootstrap_servers(self) -> str:
        return self._bootstrap


@contextlib.contextmanager
def throughput_broker(delay_ms: float):
    """The embedded broker; with ``delay_ms``, reached only through a loopback proxy that holds each of its
    answers that long (tests/support/delay_proxy.py): a broker across a network, whose acknowledgements
    the engine waits for."""
    if not delay_ms:
        with EmbeddedBroker() as broker:
            yield broker
        return
    proc = subprocess.Popen([sys.executable, "-c", PROXIED_BROKER, str(delay_ms / 1000)], cwd=Path(__file__).parents[1],
                            stdout=subprocess.PIPE, text=True)
    try:
        bootstrap = proc.stdout.readline().strip()
        if not bootstrap:
            raise RuntimeError("the proxied broker did not start")
        yield _Reached(bootstrap)
    finally:
        proc.terminate()
        proc.wait(30)


def settings(broker, tag: str, events_topic: str, max_batch: int):
    return load_settings(None, kafka=dict(bootstrap_servers=broker.bootstrap_servers, group_id=f"bench-{tag}",
                                          session_timeout_ms=6000, partitions=PARTITIONS,
                                          topics=dict(events=events_topic, predictions=f"{tag}.pred",
                                                      dead_letters=f"{tag}.dead")),
                         engine=dict(max_batch=max_batch, poll_timeout_ms=5), metrics=dict(port=0))


def drain(engine, total: int, timeout_s: float = 600.0, started=None) -> tuple[float, float, float, int]:
    """Run until ``total`` records are committed; ``started()`` is called after the first batch. Each turn
    as ``Engine.run`` takes it (``overlap_delivery``: the last batch delivered by ``finish``).

    Returns wall seconds, CPU seconds of this process (all threads: the Kafka clients' IO
    threads included) and of the main thread alone (the engine loop), from the first record on,
    and the records done.
    """
    if engine.collector is not None:
        engine.collector.start()  # as Engine.run does; the caller's engine.close() hands it back
    while not engine.joined:
        engine.step()
    start = cpu0 = main0 = None
    done, deadline = 0, time.monotonic() + timeout_s
    while done < total and time.monotonic() < deadline:
        if start is None:
            wall, cpu, main = time.perf_counter(), time.process_time(), time.thread_time()
        batch = engine.step(overlap=True)
        if batch is not None:
            if start is None:
                start, cpu0, main0 = wall, cpu, main
                if started is not None:
                    started()
            done += batch.records
    engine.finish()
    return (time.perf_counter() - (start or time.perf_counter()), time.process_time() - (cpu0 or 0.0),
            time.thread_time() - (main0 or 0.0), done)


class RdkafkaPublisher:
    """The latency runs' load generator: librdkafka (confluent-kafka, ``pip install -e '.[bench]'``),
    acks=all. It stands for the learning platform's producers, which run elsewhere in production but
    share these two cores here: kafka-python's producer took 135-153 us of CPU per event at 5,000
    events/s (0.75 of a core), librdkafka 34-51 us.

    Not idempotent: getting a producer id held the first delivery for 504 ms, while the paced loop
    kept queueing events that then reached the engine as one burst (without it: 3 ms). No retries
    either, so events are never reordered: a failed delivery fails the run (``flush``)."""

    def __init__(self, bootstrap: str, topic: str):
        from confluent_kafka import Producer

        self.failed: list[str] = []
        self._producer = Producer({"bootstrap.servers": bootstrap, "client.id": "bench-publisher", "acks": "all",
                                   "enable.idempotence": False, "message.send.max.retries": 0, "linger.ms": 1})
        self._producer.list_topics(topic, timeout=30)  # connected before the first paced event

    def send(self, outputs) -> None:
        for o in outputs:
            self._producer.produce(o.topic, key=o.key, value=o.value, on_delivery=self._delivered)
        self._producer.poll(0)

    def _delivered(self, err, _msg) -> None:
        if err is not None:
            self.failed.append(str(err))

    def flush(self, timeout_s: float) -> None:
        left = self._producer.flush(timeout_s)
        if left or self.failed:
            raise RuntimeError(f"publisher: {left} events not delivered, errors {self.failed[:3]}")

    def close(self) -> None:
        self.flush(30.0)


def publisher_kind() -> str:
    """librdkafka when confluent-kafka is installed, else kafka-python (the engine's own client)."""
    try:
        import confluent_kafka  # noqa: F401
    except ImportError:
        return "kafka-python"
    return "librdkafka"


def offered(bootstrap: str, topic: str, records: list, rate: float, cpu=None, kind: str = "librdkafka") -> None:
    """Publish ``records`` at ``rate``; puts the publisher's CPU seconds (after its imports) on ``cpu``."""
    s = load_settings(None, kafka=dict(bootstrap_servers=bootstrap, client_id="bench-publisher"))
    start = time.process_time()
    sink = RdkafkaPublisher(bootstrap, topic) if kind == "librdkafka" else KafkaSink(s.kafka)
    for _ in publish(records, sink, topic, rate=rate, retime=True, chunk=25, progress=False):
        pass
    sink.close()
    if cpu is not None:
        cpu.put(time.process_time() - start)


def default_clients() -> str:
    """Both clients when confluent-kafka is installed, else kafka-python alone."""
    return "kafka-python" if publisher_kind() == "kafka-python" else "kafka-python,confluent"


QUIX = "quixstreams:stateful-count"
#: Tansu reports no ``retention.ms`` for a topic created without one, and Quix Streams reads the input topic's
#: to configure the changelog topic it creates (a KeyError without it): the events topic is created with it.
RETENTION = {"retention.ms": "604800000", "retention.bytes": "-1"}


def quix_installed() -> bool:
    try:
        import quixstreams  # noqa: F401
    except ImportError:
        return False
    return True


def quix_count_run(bootstrap: str, topic: str, total: int) -> tuple[int, float, float]:
    """The peer row, in a process of its own: events, wall seconds and CPU seconds (from the first event to
    the app's return, its last checkpoint and its consumer's leaving the group included)."""
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    proc = ctx.Process(target=_quix_count, args=(out, bootstrap, topic, total))
    proc.start()
    result = out.get(timeout=900)
    proc.join(60)
    return result


def _quix_count(out, bootstrap: str, topic: str, total: int) -> None:
    """A Quix Streams app: per learner (the record key) a running count in its state (RocksDB, with a
    changelog topic), each event's count to an output topic; at-least-once, as ktstream's default. The
    events topic must have been created with ``RETENTION``."""
    import tempfile

    from quixstreams import Application
    from quixstreams.models.topics import TopicConfig

    retention = RETENTION
    group = f"quix-{uuid.uuid4().hex[:6]}"
    seen = {"n": 0, "start": None}
    app = Application(broker_address=bootstrap, consumer_group=group, auto_offset_reset="earliest",
                      state_dir=tempfile.mkdtemp(prefix="bench_quix_"), processing_guarantee="at-least-once",
                      use_changelog_topics=True, loglevel="WARNING")
    source = app.topic(topic, key_deserializer="str", value_deserializer="json",
                       config=TopicConfig(num_partitions=PARTITIONS, replication_factor=1, extra_config=retention))
    sink = app.topic(f"{group}.counts", value_serializer="json",
                     config=TopicConfig(num_partitions=PARTITIONS, replication_factor=1, extra_config=retention))

    def count(value, state):
        if seen["start"] is None:
            seen["start"] = (time.perf_counter(), time.process_time())
        n = state.get("count", 0) + 1
        state.set("count", n)
        seen["n"] += 1
        if seen["n"] >= total:
            app.stop()
        return {"learner_id": value["learner_id"], "event_id": value["event_id"], "count": n}

    app.dataframe(source).apply(count, stateful=True).to_topic(sink)
    app.run()  # returns after its last checkpoint (produce flushed, offsets committed), as drain's last commit
    wall0, cpu0 = seen["start"]
    out.put((seen["n"], time.perf_counter() - wall0, time.process_time() - cpu0))


def process_cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process so far (Linux /proc; NaN elsewhere)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return math.nan
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--events", type=int, default=20_000)
    ap.add_argument("--mean-length", type=int, default=10,
                    help="mean interactions per learner of the throughput load (10: many new learners, short "
                         "attention windows; above the window, e.g. 400: most windows full)")
    ap.add_argument("--rates", default="5000,500", help="offered rates (events/s) of the latency runs ('': none)")
    ap.add_argument("--seconds", type=float, default=6.0)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--max-batch", type=int, default=1000)
    ap.add_argument("--broker-delay-ms", type=float, default=0.0,
                    help="throughput runs: every answer of the broker held this long by a proxy (a broker across "
                         "a network; the latency runs keep the plain broker)")
    ap.add_argument("--latency-max-batch", type=int, default=250)
    ap.add_argument("--latency-repeat", type=int, default=2)
    ap.add_argument("--publisher", choices=("librdkafka", "kafka-python"), default=publisher_kind(),
                    help="the latency runs' load generator (default: librdkafka when confluent-kafka is installed)")
    ap.add_argument("--models", default=",".join(m for m in ("dkt", "dkvmn", "sakt", "sakt@float16")
                                                 if m.split("@")[0] in names()),
                    help="families at default sizes; NAME@float16: the same with an fp16 key/value cache")
    ap.add_argument("--clients", default=default_clients(),
                    help="Kafka clients of the engine, each a dimension of every configuration (kafka.client: "
                         "kafka-python, confluent; default: both when confluent-kafka is installed)")
    ap.add_argument("--skip-no-describe", action="store_true", help="leave out the NAME/no-describe rows")
    ap.add_argument("--floor", action="store_true",
                    help="throughput runs: also DKT's floor on each client (bench/model_path_floor.py: learners as "
                         "slots of preallocated tensors, no late events, roll-back, store or metrics); needs dkt")
    ap.add_argument("--quix", choices=("auto", "yes", "no"), default="auto",
                    help="the peer row: a Quix Streams app counting events per learner in its state (RocksDB and "
                         "a changelog), on the same broker and events (auto: when quixstreams is installed)")
    args = ap.parse_args()
    clients = [c for c in args.clients.split(",") if c]
    torch.set_num_threads(1)
    load = throughput_load(args.events, args.mean_length)
    rates_offered = [float(r) for r in args.rates.split(",") if r]
    top = max(rates_offered, default=0.0)
    live_all = replay_order(simulate(n_learners=int(top * args.seconds / 10) + 10, seed=2, id_prefix="l", **WORLD))
    items, concepts = build_vocabularies(load)
    model_spec = ([m for m in args.models.split(",") if m], items, concepts)  # "": passthrough alone
    serving = serving_models(*model_spec)
    base_configs = ["passthrough"] + list(serving)
    if not args.skip_no_describe:
        base_configs += [f"{m}/no-describe" for m in serving]
    if args.floor:
        assert "dkt" in serving, "--floor runs DKT's floor: --models must include dkt"
        base_configs.append("floor")
    configs = [f"{client}:{c}" for client in clients for c in base_configs]
    quix = args.quix == "yes" or (args.quix == "auto" and quix_installed())
    print(f"torch threads 1; cores visible {len(os.sched_getaffinity(0))}; load average {os.getloadavg()[0]:.1f} "
          f"(other processes share these cores: compare ratios, not absolute figures)")
    if args.repeat > 0:  # --repeat 0: latency runs only
        with throughput_broker(args.broker_delay_ms) as broker:
            create_topics(broker.settings, ["bench.events"], PARTITIONS, RETENTION)  # RETENTION: for Quix Streams
            sink = KafkaSink(load_settings(None, kafka=dict(bootstrap_servers=broker.bootstrap_servers)).kafka)
            for _ in publish(load, sink, "bench.events", chunk=1000, progress=False):
                pass
            sink.close()
            tune_process(load_settings(None).engine)  # as Service.run does
            learners = len({e["learner_id"] for e in load})  # the floor's slots
            rates = {c: [] for c in configs}
            cpu = {c: [] for c in configs}  # CPU microseconds per event
            main_cpu = {c: [] for c in configs}  # the same, the engine loop's thread alone
            if quix:
                rates[QUIX], cpu[QUIX], main_cpu[QUIX] = [], [], []
            for r in range(args.repeat):
                if quix:
                    done, seconds, cpu_s = quix_count_run(broker.bootstrap_servers, "bench.events", len(load))
                    rates[QUIX].append(done / seconds)
                    cpu[QUIX].append(cpu_s / done * 1e6)
                    main_cpu[QUIX].append(math.nan)
                    print(f"  throughput run {r + 1} {QUIX:28s} {done} events in {seconds:6.2f}s = "
                          f"{done / seconds:7.0f} ev/s  ({cpu[QUIX][-1]:5.0f} us CPU per event; load average "
                          f"{os.getloadavg()[0]:.1f})", flush=True)
                for cfg in configs:
                    tag = f"{cfg.replace('/', '-').replace('@', '-').replace(':', '-')}-{uuid.uuid4().hex[:6]}"
                    s = settings(broker, tag, "bench.events", args.max_batch)
                    broker.create_topics([s.kafka.topics.predictions, s.kafka.topics.dead_letters], PARTITIONS)
                    engine = make_engine(cfg, s, serving, learners)
                    seconds, cpu_s, main_s, done = drain(engine, len(load))
                    engine.close()
                    rates[cfg].append(done / seconds)
                    cpu[cfg].append(cpu_s / done * 1e6)
                    main_cpu[cfg].append(main_s / done * 1e6)
                    print(f"  throughput run {r + 1} {cfg:28s} {done} events in {seconds:6.2f}s = {done / seconds:7.0f} ev/s"
                          f"  ({cpu[cfg][-1]:5.0f} us CPU per event, {main_cpu[cfg][-1]:.0f} on the engine loop's thread; "
                          f"load average {os.getloadavg()[0]:.1f})", flush=True)
            ref = f"{clients[0]}:passthrough"  # every ratio is to the first client's passthrough
            base, base_cpu = statistics.median(rates[ref]), statistics.median(cpu[ref])
            print(f"\nthroughput ({len(load)} events of {len({e['learner_id'] for e in load})} learners, max_batch "
                  f"{args.max_batch}, median of {args.repeat}; ratio = to {ref}, paired by round; "
                  f"x{clients[0]} = to the same configuration on {clients[0]}, paired by round; "
                  f"CPU ratio = {ref}'s CPU per event / this one's, i.e. the throughput ratio on idle cores; "
                  f"load average now {os.getloadavg()[0]:.1f}):")
            best_cpu = min(cpu[ref])
            for cfg in configs + ([QUIX] if quix else []):
                med, c = statistics.median(rates[cfg]), statistics.median(cpu[cfg])
                paired = statistics.median(x / b for x, b in zip(rates[cfg], rates[ref]))
                same = f"{clients[0]}:{split_config(cfg)[1]}"
                across = (statistics.median(x / b for x, b in zip(rates[cfg], rates[same]))
                          if cfg != QUIX and same in rates else math.nan)
                print(f"  {cfg:28s} {med:7.0f} ev/s  ratio {med / base:5.2f} (paired {paired:4.2f}) "
                      f"x{clients[0]} {across:4.2f} | {c:5.0f} us CPU/event ({statistics.median(main_cpu[cfg]):.0f} "
                      f"main thread)  CPU ratio {base_cpu / c:5.2f} | best {min(cpu[cfg]):5.0f} us, "
                      f"ratio {best_cpu / min(cpu[cfg]):5.2f}")
    for rate in rates_offered:
        live = live_all[: int(rate * args.seconds)]
        runs = {c: [] for c in configs}  # latency_run's figures per repeat
        for r in range(args.latency_repeat):
            for cfg in configs:
                runs[cfg].append(latency_run(cfg, model_spec, live, rate, args.latency_max_batch, args.publisher))
                p50, p99, top, achieved, p99_all, *cpu, loop = runs[cfg][-1]
                print(f"  latency run {r + 1} at {rate:.0f} ev/s {cfg:28s} p50 {p50:7.1f} ms  p99 {p99:7.1f} ms  "
                      f"max {top:7.1f} ms  achieved {achieved:6.0f} ev/s  (p99 with the first second: "
                      f"{p99_all:.0f} ms; CPU us/event: engine {cpu[0]:.0f} (main thread {cpu[1]:.0f}), "
                      f"broker {cpu[2]:.0f}, "
                      f"publisher {cpu[3]:.0f}; loop us/event: {phases_text(loop)}; load average "
                      f"{os.getloadavg()[0]:.1f})", flush=True)
        print(f"\nlatency, event time -> prediction produced, at an offered {rate:.0f} ev/s for {args.seconds:.0f}s "
              f"(max_batch {args.latency_max_batch}, a fresh process and broker per run, first {WARM_UP_S:.0f}s left "
              f"out, median of {args.latency_repeat}; load generator {args.publisher}):")
        for cfg in configs:
            base_p99s = [run[1] for run in runs[f"{split_config(cfg)[0]}:passthrough"]]
            p50s, p99s, _, achieved, p99_all, *cpu, loops = zip(*runs[cfg])
            # each run against passthrough's run of the same round, minutes apart at most
            paired = statistics.median(p / b for p, b in zip(p99s, base_p99s))
            engine_cpu, main_cpu, broker_cpu, pub_cpu = (statistics.median(c) for c in cpu)
            loop = {phase: statistics.median(x[phase] for x in loops) for phase in loops[0]}
            print(f"  {cfg:28s} p50 {statistics.median(p50s):7.1f} ms  p99 {statistics.median(p99s):7.1f} ms "
                  f"(range {min(p99s):.0f}-{max(p99s):.0f}; with the first second {min(p99_all):.0f}-"
                  f"{max(p99_all):.0f}; to passthrough's p99, paired by round, {paired:.2f})  "
                  f"achieved {statistics.median(achieved):6.0f} ev/s  "
                  f"| CPU us/event engine {engine_cpu:.0f} (main thread {main_cpu:.0f}), broker {broker_cpu:.0f}, "
                  f"publisher {pub_cpu:.0f} "
                  f"= {(engine_cpu + broker_cpu + pub_cpu) * rate / 1e6:.2f} cores at the offered rate "
                  f"| engine loop us/event {phases_text(loop)}")


def phases_text(loop: dict[str, float]) -> str:
    """Wall microseconds per event of each engine-loop phase (ktstream_loop_seconds_total) and their sum,
    the loop's whole time (1e6 / rate while it keeps up). Poll includes waiting for records: when the
    other phases alone come near 1e6 / rate, the loop cannot keep up however the cores are shared."""
    return " ".join(f"{phase} {us:.0f}" for phase, us in loop.items()) + f" = {sum(loop.values()):.0f}"


def latency_run(cfg: str, model_spec: tuple, live: list, rate: float, max_batch: int,
                publisher: str) -> tuple[float, ...]:
    """One configuration at one offered rate, in a process of its own on a fresh broker.

    Returns p50, p99, max (ms) after the warm-up, the events/s achieved, p99 over every event,
    the CPU microseconds per event of the engine's process (all threads), of its main thread (the
    engine loop; the rest is the Kafka clients' IO threads), the broker and the publisher (after
    its imports): the three processes share the machine's cores; and the engine loop's
    wall microseconds per event in each phase (poll, process, send, flush, commit, apply; after the
    first batch, so that poll leaves out the wait for the publisher process to start). A
    fresh process keeps what the throughput runs left behind (a heap of dead learner states, a
    fuller garbage collector) out of the latency figures.
    """
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    proc = ctx.Process(target=_latency_run, args=(results, cfg, model_spec, live, rate, max_batch, publisher))
    proc.start()
    out = results.get(timeout=600)
    proc.join(30)
    return out


def _latency_run(results, cfg: str, model_spec: tuple, live: list, rate: float, max_batch: int,
                 publisher: str) -> None:
    torch.set_num_threads(1)
    serving = serving_models(*model_spec)
    tune_process(load_settings(None).engine)
    with EmbeddedBroker() as broker:
        tag = f"lat-{cfg.replace('/', '-').replace('@', '-').replace(':', '-')}-{uuid.uuid4().hex[:6]}"
        s = settings(broker, tag, f"{tag}.ev", max_batch)
        t = s.kafka.topics
        broker.create_topics([t.events, t.predictions, t.dead_letters], PARTITIONS)
        engine = make_engine(cfg, s, serving)
        engine.metrics.recent_end_to_end = collections.deque(maxlen=len(live))
        while not engine.joined:
            engine.step()
        first = {}  # loop totals after the first batch: the wait for the publisher to start left out
        ctx = mp.get_context("spawn")
        pub_cpu, broker_start = ctx.Queue(), process_cpu_s(broker.process.pid)
        pub = ctx.Process(target=offered, args=(broker.bootstrap_servers, t.events, live, rate, pub_cpu, publisher))
        pub.start()
        seconds, engine_cpu, main_cpu, done = drain(engine, len(live),
                                                    started=lambda: first.update(engine.metrics.loop_totals))
        pub.join(30)
        broker_cpu = process_cpu_s(broker.process.pid) - broker_start
        engine.close()
    every = np.array(engine.metrics.recent_end_to_end) * 1000
    lat = every[int(rate * WARM_UP_S):]  # the publisher's producer and the new consumer warming up
    per_event = [1e6 * c / len(live) for c in (engine_cpu, main_cpu, broker_cpu, pub_cpu.get(timeout=30))]
    results.put((float(np.percentile(lat, 50)), float(np.percentile(lat, 99)), float(lat.max()), done / seconds,
                 float(np.percentile(every, 99)), *per_event,
                 {k: 1e6 * (v - first[k]) / done for k, v in engine.metrics.loop_totals.items()}))


def model_options(spec: str) -> tuple[str, dict]:
    """NAME[@float16][@KEY=VALUE...] -> the family and its constructor options (``sakt@position=alibi``,
    ``akt@float16@shared_heads=1@routed_topk=2``); a VALUE that is not JSON stays a string."""
    name, *parts = spec.split("@")
    kwargs = {}
    for part in parts:
        key, eq, value = part.partition("=")
        if not eq:
            kwargs["cache_dtype"] = part
            continue
        try:
            kwargs[key] = json.loads(value)
        except ValueError:
            kwargs[key] = value
    return name, kwargs


def serving_models(specs: list[str], items, concepts) -> dict[str, ServingModel]:
    """Each NAME[@float16][@KEY=VALUE...] at default sizes otherwise, seeded, so every process builds the
    same weights."""
    serving = {}
    for m in specs:
        torch.manual_seed(0)
        name, kwargs = model_options(m)
        model = create(name, n_items=len(items), n_concepts=len(concepts), **kwargs).eval()
        serving[m] = ServingModel(model, items, concepts, "b")
    return serving


if __name__ == "__main__":
    main()
