"""Model families by name, so configs, the CLI and the contract tests can build any of them.

A family registers itself with ``@register``; ``create(name, **config)`` builds
it and ``names()`` lists every registered family (the contract test suite is
parametrized over it, so a new family is tested the moment it is registered).
"""

from __future__ import annotations

from typing import Any

from ktstream.models.base import KTModel

_FAMILIES: dict[str, type[KTModel]] = {}


def register(cls: type[KTModel]) -> type[KTModel]:
    if cls.name in _FAMILIES and _FAMILIES[cls.name] is not cls:
        raise ValueError(f"model name {cls.name!r} registered twice")
    _FAMILIES[cls.name] = cls
    return cls


def create(name: str, **config: Any) -> KTModel:
    _load_builtin()
    if name not in _FAMILIES:
        raise ValueError(f"unknown model {name!r}; valid: {', '.join(sorted(_FAMILIES))}")
    return _FAMILIES[name](**config)


def names() -> list[str]:
    _load_builtin()
    return sorted(_FAMILIES)


def family(name: str) -> type[KTModel]:
    _load_builtin()
    return _FAMILIES[name]


def _load_builtin() -> None:
    import ktstream.models  # noqa: F401  (imports every family module, which registers it)
