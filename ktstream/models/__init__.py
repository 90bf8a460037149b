"""Model families. Importing this package registers every family."""

from ktstream.models.base import KTModel, State
from ktstream.models.registry import create, family, names, register
from ktstream.models import akt, dkt, dkvmn, ordinal, sakt, simplekt  # noqa: F401  (registration)

__all__ = ["KTModel", "State", "create", "family", "names", "register"]
