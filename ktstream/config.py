"""Service configuration: frozen pydantic-settings models, a YAML file, environment overrides.

Precedence (highest first): environment variables (``KTSTREAM_`` prefix,
``__`` between nested names, e.g. ``KTSTREAM_KAFKA__BOOTSTRAP_SERVERS``), the
YAML file given to ``load_settings``, keyword overrides, then the defaults
below. Secrets are ``SecretStr`` (never printed). ``kafka.consumer`` and
``kafka.producer`` pass any further setting of the Kafka client (``kafka.client``) straight through.

>>> s = load_settings(None, engine={"late_policy": "apply"})
>>> s.engine.late_policy, s.kafka.topics.events
('apply', 'ktstream.events')
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, SecretStr, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from ktstream.exceptions import ConfigError


class _Section(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class TopicsSettings(_Section):
    events: str = "ktstream.events"
    predictions: str = "ktstream.predictions"
    dead_letters: str = "ktstream.dead-letters"


class KafkaSettings(_Section):
    client: Literal["kafka-python", "confluent"] = Field(
        "kafka-python", description="the Kafka client library: kafka-python (pure Python, a core dependency) or "
                                    "confluent (confluent-kafka on librdkafka: the extra kafka-native, "
                                    "pip install 'ktstream[kafka-native]'; several times less CPU per event, see "
                                    "docs/engine.md). consumer / producer below then hold that client's settings")
    bootstrap_servers: str = "127.0.0.1:9092"
    topics: TopicsSettings = TopicsSettings()
    partitions: int = Field(6, ge=1, description="partitions of the topics the embedded broker / demo creates")
    replication_factor: int = Field(3, ge=1, description="replicas of each topic ktstream creates (the changelog; "
                                    "with `serve --create-topics` all of them); 1 only on a one-broker cluster "
                                    "(the embedded broker, the compose stack)")
    min_insync_replicas: int = Field(2, ge=1, description="min.insync.replicas of the topics ktstream creates: "
                                     "an acks=all write needs this many in-sync replicas (at most "
                                     "replication_factor)")
    broker_compacts: bool = Field(True, description="the brokers compact topics (Apache Kafka does): the "
                                  "changelog is created with cleanup.policy=compact, and a broker refusing it or "
                                  "an existing changelog that is not compacted is an error. false for a broker "
                                  "that cannot compact (Tansu, the embedded broker): the changelog is created "
                                  "plain, with a warning and ktstream_changelog_compacted 0; it then keeps every "
                                  "state ever committed")
    group_id: str = "ktstream"
    client_id: str = "ktstream"
    assignment: Literal["cooperative-sticky", "range", "roundrobin"] = "cooperative-sticky"
    session_timeout_ms: int = Field(10_000, ge=1000, description="Tansu's first join takes about half of this")
    auto_offset_reset: Literal["earliest", "latest"] = "earliest"
    isolation_level: Literal["read_committed", "read_uncommitted"] = "read_committed"
    linger_ms: int = Field(100, ge=0, description="producer batching delay. The engine flushes after every "
                           "micro-batch, so this adds no latency there; it only saves the per-message wake-ups of "
                           "kafka-python's sender thread (about a quarter of the engine's CPU at 2 ms). With "
                           "client confluent at most 5 ms: librdkafka's flush waits for the linger")
    batch_bytes: int = Field(262_144, ge=1024, description="producer record-batch size per partition: one "
                             "micro-batch's outputs to a partition travel in one batch")
    fetch_max_wait_ms: int = Field(10, ge=0, description="longest a fetch waits for data. Apache Kafka answers as "
                                   "soon as data is there; the embedded Tansu broker measured closer to the whole "
                                   "wait (100 ms: 31 ms median latency at 500 events/s, 10 ms: 8 ms); raise it "
                                   "on a busy Kafka cluster to cut idle fetch requests")
    security_protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] = "PLAINTEXT"
    sasl_mechanism: Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER", "GSSAPI"] | None = None
    sasl_username: str | None = None
    sasl_password: SecretStr | None = None
    ssl_cafile: str | None = None
    ssl_certfile: str | None = None
    ssl_keyfile: str | None = None
    read_stall_timeout_s: float = Field(30.0, gt=0, description="a partition read to its end (a state restore "
                                        "from the changelog) fails when it makes no progress (no record, no "
                                        "position advance) this long; a slow broker only has to keep moving")
    consumer: dict[str, Any] = Field(default_factory=dict, description="extra consumer settings of the client "
                                     "(kafka-python: fetch_max_wait_ms; confluent: librdkafka's fetch.wait.max.ms)")
    producer: dict[str, Any] = Field(default_factory=dict, description="extra producer settings of the client "
                                     "(kafka-python: max_request_size; confluent: librdkafka's message.max.bytes)")

    @model_validator(mode="after")
    def _insync_within_replicas(self) -> "KafkaSettings":
        if self.min_insync_replicas > self.replication_factor:
            raise ValueError(f"kafka.min_insync_replicas ({self.min_insync_replicas}) exceeds "
                             f"kafka.replication_factor ({self.replication_factor}): no write could succeed")
        return self


class EngineSettings(_Section):
    max_batch: int = Field(1000, ge=1, description="records per micro-batch (poll max_records)")
    poll_timeout_ms: int = Field(50, ge=0)
    flush_timeout_s: float = Field(30.0, gt=0)
    overlap_delivery: bool = Field(True, description="at-least-once, full micro-batches (a backlog): poll and decode "
                                   "the next micro-batch while the last one's outputs are in flight, then flush, "
                                   "commit and apply it before processing (docs/engine.md); transactions always "
                                   "flush within the batch")
    late_policy: Literal["dead-letter", "apply"] = "dead-letter"
    max_clock_skew_s: float = Field(300.0, ge=0, description="events timed more than this after the engine's "
                                    "clock are dead-lettered (reason future): applied, one would make every later "
                                    "event of its learner late")
    max_record_bytes: int = Field(65_536, ge=256)
    cache_max_bytes: int = Field(512 * 2**20, ge=2**16)
    torch_threads: int = Field(1, ge=1)
    gc_tuning: bool = Field(True, description="the engine collects garbage itself, between micro-batches, and "
                                             "freezes what survives, so a pause stays a few milliseconds however "
                                             "large the cache grows; and after a rebalance (see "
                                             "ktstream.engine.collector)")
    gc_young_objects: int = Field(2000, ge=1, description="with gc_tuning: tracked objects made since the last "
                                                          "collection that start the next one, between micro-batches")
    gc_full_interval_s: float = Field(600.0, gt=0, description="with gc_tuning: a full collection (frozen objects "
                                                               "included) at the first idle loop turn after this "
                                                               "many seconds since the last one")
    malloc_tuning: bool = Field(True, description="keep freed tensor memory in the C heap for reuse (glibc "
                                                  "mallopt; see ktstream.service.tune_malloc): fewer page "
                                                  "faults per wave")
    describe: bool = Field(True, description="add model.describe() (ability, mastery, attention summary) "
                                            "to predictions; costs a second state read")
    rebuild_window: int = Field(200, ge=0, description="raw interactions kept per learner, replayed through a "
                                                       "newly swapped-in model to rebuild its state (0: none)")
    rebuild_chunk: int = Field(256, ge=1, description="stale learner states rebuilt between micro-batches "
                                                      "after a model swap (the rest: on their next event)")
    rebuild_window_bytes: int = Field(262_144, ge=1024, description="bytes a learner's raw window may hold "
                                      "(ids counted as Python strings, not shared), oldest records out first; "
                                      "keeps its changelog record and cached state bounded whatever its ids")
    max_output_record_bytes: int = Field(1_048_576, ge=4096, description="largest record sent (key, value, "
                                         "headers and 128 bytes of record-batch overhead); no more than the "
                                         "producer's max_request_size and the topics' max.message.bytes. A "
                                         "learner whose prediction or changelog record is larger has its events "
                                         "of the batch dead-lettered (output_too_large) and keeps its state")
    max_batch_retries: int = Field(10, ge=0, description="times a rolled-back micro-batch is processed again in a "
                                                         "row before the engine stops with an error")


class MetricsSettings(_Section):
    host: str = "127.0.0.1"
    port: int = Field(9464, ge=0, le=65535, description="0 picks a free port")
    quality_window: int = Field(1000, ge=10, description="outcomes in the rolling AUC / log loss")
    calibration_bins: int = Field(10, ge=2)


class QueriesSettings(_Section):
    """Live per-learner queries on the engine's HTTP server (``GET /learners/{id}``, ``GET /instances``;
    docs/engine.md, "Live queries")."""

    enabled: bool = Field(True, description="serve /learners/{id} and /instances beside /metrics")
    advertised_url: str | None = Field(None, description="the URL other instances and clients reach this "
                                                         "instance's HTTP server at (e.g. "
                                                         "http://ktstream-0.ktstream:9464); None: "
                                                         "http://<metrics.host>:<its port>")
    peers: list[str] = Field(default_factory=list, description="the other instances' advertised URLs (this one's "
                                                               "may be listed too): asked for their partitions "
                                                               "to find a learner's owner")
    max_concepts: int = Field(256, ge=1, le=4096, description="most concepts whose mastery one query computes")
    timeout_s: float = Field(2.0, gt=0, description="how long a query waits for the engine loop, and for each peer")


class ModelSettings(_Section):
    family: str = "dkt"
    checkpoint: str = Field("train-quick", description="checkpoint directory, or 'train-quick' (simulated data)")
    quick_epochs: int = Field(4, ge=1, description="training epochs of train-quick (about 3 s each for DKT)")
    quick_learners: int = Field(300, ge=10)
    config: dict[str, Any] = Field(default_factory=dict, description="family constructor arguments (train-quick)")
    registry: str | None = Field(None, description="model registry folder: serve its latest version (else the "
                                                   "checkpoint) and hot-swap each newly promoted one")
    registry_poll_s: float = Field(10.0, gt=0, description="how often the registry is looked at")


class StateSettings(_Section):
    dir: str | None = Field(None, description="durable learner state: one SQLite store per input partition under "
                                              "this folder, a changelog topic, restore on assignment "
                                              "(docs/state.md); None: the in-memory cache only")
    fp16: bool = Field(False, description="store float32 state tensors as float16 (half the bytes; lossy, so "
                                          "restored states match to about 1e-3, not 1e-6)")
    processing_guarantee: Literal["at-least-once", "exactly-once"] = Field(
        "at-least-once", description="exactly-once: predictions, dead letters, changelog records and the input "
                                     "offsets commit in one producer transaction (readers use read_committed); "
                                     "at-least-once: flush then commit (readers drop repeats by source offset)")
    instance_id: str | None = Field(None, description="this instance's stable name (exactly-once: part of the "
                                                      "transactional.id, so a restarted instance fences its dead "
                                                      "self); None: the host name. Distinct per instance")
    transaction_timeout_ms: int = Field(60_000, ge=1000, description="broker aborts a transaction left open "
                                                                     "this long (a dead producer)")
    restore_attempts: int = Field(5, ge=1, description="restore attempts per assigned partition (each fails "
                                                       "after kafka.read_stall_timeout_s without progress) before the "
                                                       "engine stops with RestoreError (not ready, counted, logged)")
    restore_backoff_s: float = Field(1.0, ge=0, description="pause before the second restore attempt, doubled "
                                                            "before each later one (at most 30 s)")


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="KTSTREAM_", env_nested_delimiter="__", frozen=True,
                                      extra="forbid", protected_namespaces=())
    kafka: KafkaSettings = KafkaSettings()
    engine: EngineSettings = EngineSettings()
    metrics: MetricsSettings = MetricsSettings()
    queries: QueriesSettings = QueriesSettings()
    model: ModelSettings = ModelSettings()
    state: StateSettings = StateSettings()

    @classmethod
    def settings_customise_sources(cls, settings_cls, init_settings, env_settings, dotenv_settings,
                                   file_secret_settings):
        return (env_settings, init_settings)  # environment over file / keyword values


def read_sections(path: str | Path) -> dict[str, Any]:
    """A YAML settings file as a mapping of sections (the trainer's settings read the same files)."""
    try:
        data = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigError(f"cannot read config {path}: {exc}") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"config {path} must be a mapping of sections, got {type(data).__name__}")
    return data


def load_settings(path: str | Path | None = None, **overrides: Any) -> Settings:
    """Settings from a YAML file (optional), keyword overrides per section, then the environment."""
    data: dict[str, Any] = read_sections(path) if path is not None else {}
    for section, values in overrides.items():
        data[section] = {**data.get(section, {}), **values} if isinstance(values, dict) else values
    try:
        return Settings(**data)
    except ValueError as exc:
        raise ConfigError(f"invalid configuration{f' in {path}' if path else ''}: {exc}") from exc
