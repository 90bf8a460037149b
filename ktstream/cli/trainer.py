"""`ktstream trainer --config FILE`: periodic fine-tuning from the event archive into the model registry.

Every ``every_days`` of event time (or ``every_events`` archived events) it runs
replay -> fine-tune -> leakage gate -> promote / reject (ktstream.finetune),
and serves its Prometheus metrics. ``--once`` runs one cycle if one is due,
prints its result as JSON and exits.
"""

from __future__ import annotations

import json
import logging
import signal

log = logging.getLogger(__name__)


def register(sub) -> None:
    p = sub.add_parser("trainer", help="fine-tune periodically on the event archive; promote through the gate")
    p.add_argument("--config", required=True, help="YAML file with a `trainer` section (see docs/finetuning.md)")
    p.add_argument("--once", action="store_true", help="run one cycle if due, print its result, exit")
    p.set_defaults(func=run)


def build(settings):
    from ktstream.finetune.metrics import FinetuneMetrics
    from ktstream.finetune.registry import ModelRegistry
    from ktstream.finetune.scheduler import Trainer

    return Trainer(settings.archive, ModelRegistry(settings.registry), settings.horizon_ms, settings.every_ms,
                   settings.every_events, int(settings.lateness_s * 1000), settings.family, settings.model_kwargs,
                   settings.finetune_config(), settings.promotion_config(), FinetuneMetrics(),
                   settings.scan_config(), settings.train_buffer_events)


def run(args) -> int:
    from ktstream.finetune.settings import TrainerSettings, section

    settings = section(args.config, "trainer", TrainerSettings)
    trainer = build(settings)
    if args.once:
        cycle = trainer.run_once()
        print(json.dumps(cycle.to_dict() if cycle else {"outcome": "not_due"}, indent=1, default=str))
        return 0
    server = None if settings.metrics_port is None else trainer.metrics.serve(settings.metrics_port,
                                                                              settings.metrics_host)
    stopping = []

    def stop(signum, frame) -> None:
        log.info("signal %d: stopping after the current cycle", signum)
        stopping.append(signum)

    previous = {s: signal.signal(s, stop) for s in (signal.SIGTERM, signal.SIGINT)}
    log.info("trainer: archive %s -> registry %s, horizon %.1f days", settings.archive, settings.registry,
             settings.horizon_days)
    try:
        trainer.run(settings.poll_s, should_stop=lambda: bool(stopping))
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        if server is not None:
            server.close()
    return 0
