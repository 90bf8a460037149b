"""One root exception for ktstream; packages derive their own from it."""


class KTStreamError(Exception):
    """Root of every error ktstream raises on purpose."""


class ValidationError(KTStreamError):
    """Input that does not match the event schema (the caller dead-letters it)."""


class ConfigError(KTStreamError):
    """A configuration file or value that cannot be used."""


class LeakageError(KTStreamError):
    """Information from at or after a cutoff reached a place it must not (training, selection)."""
