"""Errors of the streaming engine."""

from ktstream.exceptions import KTStreamError


class EngineError(KTStreamError):
    """The engine cannot go on (a broken source or sink, a failed commit it cannot undo)."""


class SinkError(EngineError):
    """Outputs were not acknowledged by the broker (the batch is not committed)."""


class CommitError(EngineError):
    """Input offsets could not be committed (e.g. the partitions were revoked meanwhile)."""


class CommitOutcomeUnknownError(CommitError):
    """A transaction's commit was asked for but its outcome is unknown: never abort it or rewind."""


class RetriesExhaustedError(EngineError):
    """A micro-batch was rolled back more than ``max_batch_retries`` times in a row."""
