"""`ktstream serve --config FILE`: run the streaming engine against Kafka until SIGTERM / SIGINT.

With ``state.dir`` set (file, ``KTSTREAM_STATE__DIR`` or ``--state-dir``) the
engine runs over durable, movable learner state (docs/state.md): the
changelog topic is created first, and ``state.processing_guarantee`` picks
at-least-once (flush, then commit) or exactly-once (one producer transaction
per micro-batch).

The model served is the registry's newest loadable version, else the
configured checkpoint, else (``model.checkpoint: train-quick``) one fitted at
start-up (ktstream.training.quick). The imports below are the serving
process's: tests/test_architecture.py checks that they load no trainer,
leakage gate or report code.
"""

from __future__ import annotations

import logging
import signal
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ktstream.config import ModelSettings
    from ktstream.models.checkpoint import ServingModel

log = logging.getLogger(__name__)


def register(sub) -> None:
    p = sub.add_parser("serve", help="run the streaming engine (Kafka in, predictions out, /metrics, /healthz)")
    p.add_argument("--config", help="YAML settings file (`ktstream config-reference --yaml` prints the defaults); "
                   "KTSTREAM_* env overrides it")
    p.add_argument("--state-dir", help="durable learner state under this folder (overrides state.dir)")
    p.add_argument("--create-topics", action="store_true",
                   help="create the three topics first (kafka.partitions each); for development brokers")
    p.set_defaults(func=run)


def create_changelog(settings) -> str:
    """Create (or check) the changelog topic; its name."""
    return ensure_changelog(settings)[0]


def ensure_changelog(settings) -> tuple[str, bool]:
    """Create (or check) the changelog topic, compacted unless ``kafka.broker_compacts`` is false
    (connectors.kafka.admin.ensure_changelog); (its name, whether it is compacted)."""
    from connectors.kafka import admin
    from ktstream.state.changelog import changelog_topic

    k = settings.kafka
    name = changelog_topic(k.topics.events)
    return name, admin.ensure_changelog(k, name, k.partitions)


def run(args) -> int:
    import torch

    from connectors.kafka import admin, sink_for, source_for  # the only Kafka client code lives in connectors/
    from ktstream.config import load_settings
    from ktstream.service import Service

    if not getattr(args, "verbose", False):
        logging.getLogger("kafka").setLevel(logging.WARNING)  # kafka-python logs every connection at INFO
    overrides = {"state": {"dir": args.state_dir}} if getattr(args, "state_dir", None) else {}
    settings = load_settings(args.config, **overrides)
    torch.set_num_threads(settings.engine.torch_threads)
    k = settings.kafka
    if args.create_topics:
        admin.create_topics(k, [k.topics.events, k.topics.predictions, k.topics.dead_letters], k.partitions)
    compacted = ensure_changelog(settings)[1] if settings.state.dir is not None else None
    serving = load_model(settings.model)
    source = source_for(k, max_poll_records=settings.engine.max_batch)
    service = Service(settings, serving, source, sink_for(settings))
    if compacted is not None:
        service.metrics.changelog_compaction(compacted)

    def stop(signum, frame) -> None:
        log.info("signal %d: finishing the current micro-batch, then stopping", signum)
        service.stop()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    log.info("serving %s %s: %s -> %s (%s, state %s); metrics on http://%s:%d/metrics", serving.model.name,
             serving.version, k.topics.events, k.topics.predictions, settings.state.processing_guarantee,
             settings.state.dir or "in memory", settings.metrics.host, service.server.port)
    try:
        service.run()
    finally:
        service.close()
    log.info("stopped cleanly")
    return 0


def load_model(cfg: ModelSettings) -> ServingModel:
    """The model the configuration names: the registry's newest loadable version, else the checkpoint /
    train-quick. A version that cannot be loaded is skipped with an error in the log (the engine's
    registry watcher then tries it once more and counts the failure in
    ``ktstream_model_load_failures_total``), so a bad promotion never makes a restart crash-loop."""
    from ktstream.exceptions import ConfigError
    from ktstream.models.checkpoint import ServingModel, load_checkpoint

    if cfg.registry is not None:
        if (found := _newest_loadable(cfg.registry)) is not None:
            return found
        log.info("model registry %s has no loadable version: serving %s until one is promoted", cfg.registry,
                 cfg.checkpoint)
    if cfg.checkpoint == "train-quick":  # the trainer is loaded only when the settings ask for it
        from ktstream.training.quick import train_quick

        return train_quick(cfg.family, cfg.quick_learners, cfg.quick_epochs, cfg.config)
    model, items, concepts, version = load_checkpoint(cfg.checkpoint)
    if model.name != cfg.family:
        raise ConfigError(f"checkpoint {cfg.checkpoint} holds a {model.name!r} model; the config says {cfg.family!r}")
    return ServingModel(model, items, concepts, version)


def _newest_loadable(root: str) -> ServingModel | None:
    from ktstream.finetune.exceptions import RegistryError
    from ktstream.finetune.registry import ModelRegistry
    from ktstream.models.checkpoint import ServingModel

    registry = ModelRegistry(root, read_only=True)
    names = registry.versions()
    for name in reversed(names):
        try:
            v = registry.get(name)
        except RegistryError as exc:
            log.error("model version %s cannot be loaded, falling back to an older one: %s", name, exc)
            continue
        if name != names[-1]:
            log.error("serving model version %s, not the registry's latest %s (it cannot be loaded)", name,
                      names[-1])
        return ServingModel(v.model, v.items, v.concepts, v.version)
    return None
