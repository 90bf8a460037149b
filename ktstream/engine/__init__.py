"""The streaming engine: records in, prequential predictions out, learner state in between.

No Kafka client is imported here (connectors/ does that); the engine sees
plain ``Record`` objects (ktstream.core) through two ports (ktstream.engine.records).
"""

from ktstream.engine.records import MemorySink, MemorySource, Sink, Source
from ktstream.engine.state_cache import StateCache, StateStore

__all__ = ["MemorySink", "MemorySource", "Sink", "Source", "StateCache", "StateStore"]
