"""The streaming engine: records in, prequential predictions out, learner state in between.

No Kafka client is imported here (connectors/ does that); the engine sees
plain ``Record`` objects and callables (ktstream.engine.records).
"""

from ktstream.engine.records import MemorySink, MemorySource, Output, Record, Sink, Source
from ktstream.engine.state_cache import StateCache, StateStore

__all__ = ["MemorySink", "MemorySource", "Output", "Record", "Sink", "Source", "StateCache", "StateStore"]
