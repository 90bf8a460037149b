"""Durable learner state under the engine's hot cache (docs/state.md)."""

from ktstream.state.memory import MemoryStore
from ktstream.state.sqlite import SqliteStore
from ktstream.state.store import Store, StoreError, StorePartition, Transaction

__all__ = ["MemoryStore", "SqliteStore", "Store", "StoreError", "StorePartition", "Transaction"]
