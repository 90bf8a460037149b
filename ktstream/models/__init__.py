"""Model families. Importing this package registers every family.

Every module of this package is imported, so a new family is one new file here
whose class carries ``@register``: nothing else needs to list it.
"""

import importlib
import pkgutil

from ktstream.models.base import KTModel, State
from ktstream.models.families import create, family, names, register

for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")

__all__ = ["KTModel", "State", "create", "family", "names", "register"]
