"""An in-memory consumer for the fault tests: one member that owns every partition from its first poll
on, starts each at the group's committed offset and reads a list of records. Each test says which records
are published so far, where committed offsets live and what a commit does; the engine sees the same
Source port as with Kafka."""

from __future__ import annotations


class ListSource:
    def __init__(self, committed: dict):
        self.offsets, self.pos = committed, None  # the group's committed offsets (shared with the test's broker)
        self.on_assigned = self.on_revoked = self.on_lost = lambda p: None

    def records(self) -> list:
        """The input records published so far, in offset order per partition."""
        raise NotImplementedError

    def partitions(self) -> list:
        return sorted({r.tp for r in self.records()})

    def joined(self) -> None:
        """Called once, when the member joins (before its assignment is announced)."""

    def poll(self, timeout_s, max_records):
        if self.pos is None:
            tps = self.partitions()
            self.joined()
            self.pos = {tp: self.offsets.get(tp, 0) for tp in tps}
            self.on_assigned(tps)
        out = [r for r in self.records() if r.offset >= self.pos[r.tp]][:max_records]
        for r in out:
            self.pos[r.tp] = max(self.pos[r.tp], r.offset + 1)
        return out

    def commit(self, offsets):
        self.offsets.update(offsets)

    def committed(self, tp):
        return self.offsets.get(tp)

    def seek(self, offsets):
        self.pos.update(offsets)

    def assignment(self):
        return set(self.pos or ())

    def lag(self):
        return {}

    def close(self):
        pass
