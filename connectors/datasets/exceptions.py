"""Errors raised while reading public dataset files."""

from ktstream.exceptions import KTStreamError


class DatasetFormatError(KTStreamError, ValueError):
    """A dataset file does not have the layout its converter expects.

    The message names the file and line so that a person can look at the
    offending bytes; converters never skip malformed input silently.
    """


class DatasetNotFoundError(KTStreamError, FileNotFoundError):
    """A data set's folder or file is not where it was looked for (the message says where, and how to
    point there)."""
