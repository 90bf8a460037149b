"""Crash recovery under load: SIGKILLs at random moments while a paced stream flows, then every property checked.

Starts an embedded broker (Tansu), then tests.support.state_chaos.run: a paced feed,
``ktstream serve`` with ``state.dir`` set, killed with SIGKILL (by its pid) at
random moments once it processes, restarted on the same state directory;
checks every input offset predicted, only same-offset repeats with the same
values (``--guarantee exactly-once``: none at all for a read_committed reader),
and every learner's stored state equal to an uninterrupted run (1e-6). Prints
what a stock kafka-python read_committed consumer receives on Tansu (aborted
transactions included: Tansu does not report them) and the changelog records
the restores read from the stores' checkpoints.

    python bench/crash_recovery.py --events 50000 --learners 2000 --kills 10
    python bench/crash_recovery.py --events 50000 --learners 2000 --kills 10 --guarantee exactly-once
    python bench/crash_recovery.py --events 200000 --kills 20 --proxy-delay-s 0.05 --proxy-stall-s 3
    python bench/crash_recovery.py --throughput 20000   # no kills: events/s of each guarantee, same input

``--proxy-delay-s`` puts a loopback proxy in front of the broker (tests/support/delay_proxy.py:
Tansu advertises the proxy's port, so every client request goes through it) that delays every
reply by that long; with ``--proxy-stall-s`` it also holds all traffic for that long once every
``--proxy-stall-every-s``, at moments independent of the kills (restores and commits meet a broker
that stops answering for a while).

``--throughput N``: N events already in the topic, the durable engine
(build_engine, Kafka clients, SQLite store) in this process, once per
guarantee, timed from the first record to the last commit.
"""

from __future__ import annotations

import argparse
import random
import re
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the checkout's tests/ (harness, proxy)

from connectors.broker import EmbeddedBroker  # noqa: E402
from tests.support.delay_proxy import ProxiedBroker  # noqa: E402
from tests.support import state_chaos as chaos  # noqa: E402


def stalls(proxy, every_s: float, stall_s: float, stop: threading.Event, seed: int = 1) -> threading.Thread:
    """Hold all traffic for ``stall_s`` at random moments, about once every ``every_s``; counts them."""
    rng, counted = random.Random(seed), {"stalls": 0}

    def target():
        while not stop.wait(rng.uniform(0.5, 1.5) * every_s):
            proxy.stall()
            counted["stalls"] += 1
            stop.wait(stall_s)
            proxy.resume()

    t = threading.Thread(target=target, name="stalls", daemon=True)
    t.counted = counted
    t.start()
    return t


def throughput(bootstrap: str, events: int, learners: int, partitions: int, max_batch: int) -> None:
    import json

    from connectors.kafka import KafkaSink, KafkaSource, sink_for
    from connectors.kafka.admin import create_topics
    from ktstream.cli.serve import create_changelog
    from ktstream.config import load_settings
    from ktstream.core import Output
    from ktstream.service import build_engine

    work = Path(tempfile.mkdtemp(prefix="guarantees-"))
    recs, serving, _ = chaos.prepare(work, bootstrap, learners, events // learners + 1, partitions)
    rates = {}
    for guarantee in ("at-least-once", "exactly-once"):
        tag = guarantee.replace("-", "")
        s = load_settings(None, kafka={"bootstrap_servers": bootstrap, "group_id": tag, "session_timeout_ms": 6000,
                                       "partitions": partitions, "topics": {"events": f"{tag}.ev", "predictions":
                                                                            f"{tag}.pred", "dead_letters": f"{tag}.dead"}},
                          engine={"max_batch": max_batch, "describe": False},
                          state={"dir": str(work / tag), "processing_guarantee": guarantee, "instance_id": tag})
        k = s.kafka
        create_topics(k, [k.topics.events, k.topics.predictions, k.topics.dead_letters], partitions)
        create_changelog(s)
        sink = KafkaSink(k)
        sink.send(Output(k.topics.events, r["learner_id"].encode(), json.dumps(r).encode()) for r in recs)
        sink.flush(60)
        sink.close()
        engine = build_engine(s, serving, KafkaSource(k, max_poll_records=max_batch), sink_for(s))
        done, t0, first, batches = 0, None, 0, 0
        while done < len(recs):
            b = engine.step()
            if b is not None:
                if t0 is None:  # timed from the end of the first batch (group join and model warm-up excluded)
                    t0, first = time.perf_counter(), b.records
                done, batches = done + b.records, batches + 1
        dt = time.perf_counter() - t0
        engine.close()
        engine.cache.store.close()
        rates[guarantee] = (done - first) / dt
        print(f"{guarantee}: {done - first} events in {dt:.1f} s, {batches - 1} batches: "
              f"{rates[guarantee]:,.0f} events/s")
    print(f"exactly-once / at-least-once throughput: {rates['exactly-once'] / rates['at-least-once']:.2f}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--events", type=int, default=50_000)
    ap.add_argument("--learners", type=int, default=2_000)
    ap.add_argument("--kills", type=int, default=10)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--feed-s", type=float, default=180.0)
    ap.add_argument("--timeout-s", type=float, default=900.0)
    ap.add_argument("--guarantee", choices=["at-least-once", "exactly-once"], default="at-least-once")
    ap.add_argument("--throughput", type=int, default=0, help="events: time both guarantees instead")
    ap.add_argument("--max-batch", type=int, default=500, help="the engine's engine.max_batch")
    ap.add_argument("--proxy-delay-s", type=float, default=None, help="a delaying proxy in front of the broker")
    ap.add_argument("--proxy-stall-s", type=float, default=0.0, help="with the proxy: stall all traffic this long")
    ap.add_argument("--proxy-stall-every-s", type=float, default=30.0)
    a = ap.parse_args()
    if a.throughput:
        with EmbeddedBroker() as broker:
            throughput(broker.bootstrap_servers, a.throughput, a.learners, a.partitions, a.max_batch)
        return
    work = Path(tempfile.mkdtemp(prefix="crash-recovery-")) / "run"
    t0 = time.monotonic()
    proxied = a.proxy_delay_s is not None
    broker_cm = ProxiedBroker(lifetime_s=a.timeout_s + 600) if proxied else EmbeddedBroker()
    stop_stalls = threading.Event()
    with broker_cm as broker:
        staller = None
        if proxied:
            broker.proxy.set_delay(a.proxy_delay_s)
            if a.proxy_stall_s > 0:
                staller = stalls(broker.proxy, a.proxy_stall_every_s, a.proxy_stall_s, stop_stalls)
        result = chaos.run(work, broker.bootstrap_servers, n_learners=a.learners,
                           mean_length=a.events // a.learners + 1, partitions=a.partitions, kills=a.kills,
                           feed_s=a.feed_s, seed=0, timeout_s=a.timeout_s, guarantee=a.guarantee,
                           max_batch=a.max_batch)
        stop_stalls.set()
        if proxied:
            broker.proxy.resume()
            broker.proxy.set_delay(0.0)  # the checks below read the topics at full speed
        plain = chaos.plain_reader(result["settings"].kafka, a.partitions)
        changelog = len(chaos.read_topic(result["settings"].kafka,
                                         f"{result['settings'].kafka.topics.events}.learners-changelog", a.partitions))
        counts = chaos.check(result)
    log = (work / "engine.log").read_text()
    restores = [(int(n), int(r)) for n, r in re.findall(r"restored: (\d+) changelog records in .*?\((\d+) read", log)]
    print(f"{a.guarantee}: {counts['kills']} SIGKILLs, {counts['events']} events, {counts['learners']} learners, "
          f"{counts['predictions']} committed predictions ({counts['duplicates']} same-offset repeats); a stock "
          f"read_committed consumer receives {plain}; {len(restores)} partition restores applied "
          f"{sum(n for n, _ in restores)} learner states, reading {sum(r for _, r in restores)} changelog records "
          f"from the checkpoints (committed changelog: {changelog} records); "
          f"{'proxy delay %.3f s, %d stalls of %.1f s; ' % (a.proxy_delay_s, staller.counted['stalls'] if staller else 0, a.proxy_stall_s) if proxied else ''}"
          f"all properties hold; "
          f"{time.monotonic() - t0:.0f} s (log: {work / 'engine.log'})")


if __name__ == "__main__":
    main()
