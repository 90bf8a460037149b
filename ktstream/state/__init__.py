"""Durable learner state under the engine's hot cache (docs/state.md)."""

from ktstream.state.sqlite import SqliteStore
from ktstream.state.store import MemoryStore

__all__ = ["MemoryStore", "SqliteStore"]
