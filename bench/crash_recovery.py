"""The issue's crash-recovery figure: >= 10 SIGKILLs during >= 50,000 events over >= 2,000 learners.

Starts an embedded broker (Tansu), then connectors.state_chaos.run: a paced feed,
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
    python bench/crash_recovery.py --throughput 20000   # no kills: events/s of each guarantee, same input

``--throughput N``: N events already in the topic, the durable engine
(build_engine, Kafka clients, SQLite store) in this process, once per
guarantee, timed from the first record to the last commit.
"""

from __future__ import annotations

import argparse
import re
import tempfile
import time
from pathlib import Path

from connectors import state_chaos as chaos
from connectors.broker import EmbeddedBroker


def throughput(bootstrap: str, events: int, learners: int, partitions: int, max_batch: int) -> None:
    import json

    from connectors.kafka import KafkaSink, KafkaSource, sink_for
    from connectors.kafka.admin import create_topics
    from ktstream.cli.serve import create_changelog
    from ktstream.config import load_settings
    from ktstream.engine.records import Output
    from ktstream.engine.service import build_engine

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
    ap.add_argument("--max-batch", type=int, default=500)
    a = ap.parse_args()
    if a.throughput:
        with EmbeddedBroker() as broker:
            throughput(broker.bootstrap_servers, a.throughput, a.learners, a.partitions, a.max_batch)
        return
    work = Path(tempfile.mkdtemp(prefix="crash-recovery-")) / "run"
    t0 = time.monotonic()
    with EmbeddedBroker() as broker:
        result = chaos.run(work, broker.bootstrap_servers, n_learners=a.learners,
                           mean_length=a.events // a.learners + 1, partitions=a.partitions, kills=a.kills,
                           feed_s=a.feed_s, seed=0, timeout_s=a.timeout_s, guarantee=a.guarantee)
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
          f"from the checkpoints (committed changelog: {changelog} records); all properties hold; "
          f"{time.monotonic() - t0:.0f} s (log: {work / 'engine.log'})")


if __name__ == "__main__":
    main()
