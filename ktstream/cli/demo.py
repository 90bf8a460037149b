"""`ktstream demo`: the whole loop on one machine, no set-up: broker, model, engine, replay, live summary.

Starts the embedded broker (Tansu), creates the topics, trains a model on
simulated learners (train-quick), starts the engine with its /metrics,
/healthz and /readyz endpoints, replays a second simulated population (plus a
few malformed records, to show the dead-letter path) at ``--rate`` with event
times stamped at publishing, prints a live summary every second, and ends
once every event is answered (or after ``--duration`` seconds). ``--short``
is the same loop with a few dozen learners and a one-epoch model (under a minute).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from pathlib import Path

log = logging.getLogger(__name__)
#: shipped inside the package (pyproject.toml's package data), so an installed wheel has it too
DEMO_CONFIG = Path(__file__).resolve().parents[1] / "configs" / "demo.yaml"
#: --short: learners replayed, rate, and the quick model's training population and epochs
SHORT = {"learners": 30, "rate": 3000.0, "quick_learners": 40, "quick_epochs": 1}


def register(sub) -> None:
    p = sub.add_parser("demo", help="embedded broker + quick model + engine + replay, with a live summary")
    p.add_argument("--config", type=Path, default=DEMO_CONFIG, metavar="FILE", help="settings file")
    p.add_argument("--learners", type=int, default=300, help="simulated learners to replay")
    p.add_argument("--rate", type=float, default=1000.0, help="events per second offered")
    p.add_argument("--duration", type=float, default=90.0, help="stop after this many seconds of replay")
    p.add_argument("--model", default=None, metavar="FAMILY", help="model family (overrides model.family)")
    p.add_argument("--short", action="store_true",
                   help=f"{SHORT['learners']} learners at {SHORT['rate']:.0f}/s, a model of {SHORT['quick_learners']} "
                        f"learners and {SHORT['quick_epochs']} epoch: the whole loop in under a minute")
    p.set_defaults(func=run)


def malformed() -> list[bytes]:
    """A few bad records: broken JSON, a wrong type, an unknown field, an oversized one."""
    base = {"event_id": "bad", "learner_id": "u0", "item_id": "q1"}
    return [b'{"event_id": "x", ', json.dumps({**base, "response": "yes"}).encode(),
            json.dumps({**base, "colour": "blue"}).encode(),
            json.dumps({**base, "attributes": {"pad": "x" * 100_000}}).encode()]


def run(args) -> int:
    if not getattr(args, "verbose", False):
        logging.getLogger("kafka").setLevel(logging.WARNING)  # kafka-python logs every connection at INFO
    if not args.config.is_file():
        raise FileNotFoundError(f"settings file not found: {args.config}")
    model = {"family": args.model} if args.model else {}
    if args.short:
        args.learners, args.rate = SHORT["learners"], SHORT["rate"]
        model.update(quick_learners=SHORT["quick_learners"], quick_epochs=SHORT["quick_epochs"])
    import torch

    from connectors.broker import EMBEDDED, EmbeddedBroker
    from connectors.kafka import output_sink_for, source_for
    from ktstream.cli.serve import load_model
    from ktstream.config import load_settings
    from ktstream.core import Output
    from ktstream.data.simulate import simulate
    from ktstream.engine.replay import publish, replay_order
    from ktstream.engine.summary import Summary
    from ktstream.service import Service

    if args.model:
        from ktstream.cli.options import check_model

        check_model(args.model)
    with EmbeddedBroker() as broker:
        s = load_settings(args.config, kafka={"bootstrap_servers": broker.bootstrap_servers, **EMBEDDED}, model=model)
        k = s.kafka
        broker.create_topics([k.topics.events, k.topics.predictions, k.topics.dead_letters], k.partitions)
        print(f"broker  Tansu on {broker.bootstrap_servers}, topics with {k.partitions} partitions")
        torch.set_num_threads(s.engine.torch_threads)  # also for train-quick: 2 threads on 2 busy cores is slower
        t0 = time.perf_counter()
        serving = load_model(s.model)
        print(f"model   {serving.model.name} {serving.version} trained in {time.perf_counter() - t0:.1f}s "
              f"(validation AUC {serving.valid_auc or float('nan'):.3f})")
        records = replay_order(simulate(n_learners=args.learners, seed=1, query_prob=0.03, start_spread_ms=300_000,
                                        mean_gap_ms=30_000))
        bad = malformed()
        service = Service(s, serving, source_for(k, max_poll_records=s.engine.max_batch), output_sink_for(k))
        print(f"engine  metrics on http://{service.server.host}:{service.server.port}/metrics (also /healthz, /readyz)")
        total = len(records) + len(bad)
        m = service.metrics
        done = lambda: m.totals["consumed"] >= total  # noqa: E731
        service.start(until=done)
        sink = output_sink_for(k)
        sink.send(Output(k.topics.events, b"u0", b) for b in bad)

        def replay() -> None:
            for _ in publish(records, sink, k.topics.events, args.rate, retime=True, progress=False):
                if time.perf_counter() - started > args.duration:
                    break

        joined = time.perf_counter() + 60
        while not service.engine.ready() and time.perf_counter() < joined and service.error is None:
            time.sleep(0.1)  # Tansu's first group join takes ~half of session_timeout_ms
        print(f"replay  {len(records)} events of {args.learners} learners at {args.rate:.0f}/s "
              f"(+{len(bad)} malformed records)")
        started = time.perf_counter()
        producer = threading.Thread(target=replay, daemon=True)
        producer.start()
        summary = Summary(m)
        while not done() and time.perf_counter() - started < args.duration and service.error is None:
            time.sleep(1.0)
            print(summary.line(service.engine.source.lag()), flush=True)
        producer.join(5)
        sink.close()
        service.close()
        print(summary.final(total))
        if service.error is not None:
            log.error("engine failed: %s", service.error)
            return 1
    return 0
