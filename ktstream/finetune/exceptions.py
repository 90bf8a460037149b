"""Errors of the fine-tuning pipeline (leakage itself raises ``ktstream.exceptions.LeakageError``)."""

from ktstream.exceptions import KTStreamError


class FinetuneError(KTStreamError):
    """A fine-tuning cycle that cannot run (no data in a window, incompatible base model)."""


class RegistryError(KTStreamError):
    """A registry operation that would break immutability, or a version that cannot be read."""
