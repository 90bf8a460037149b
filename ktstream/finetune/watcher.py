"""RegistryWatcher: notice a newly promoted version and hand it to the engine.

The engine calls ``poll()`` between micro-batches (never during one, so a
batch is served by one model version). ``poll`` looks at the registry at most
every ``interval_s`` seconds; when ``latest()`` names a version other than the
current one it loads it (CPU, eval mode) and calls ``callback(ModelVersion)``.
The engine's callback swaps the runner's model and marks learner states for
rebuilding (``ktstream.serving.rebuild``). A version that cannot be loaded
(whatever is wrong with its files: ``ModelRegistry.get`` turns it into a
`RegistryError`), or a registry that cannot be listed, is logged as an error,
counted through ``on_load_error`` (the engine's
``ktstream_model_load_failures_total``) and skipped until a newer version
appears: the current version keeps serving.

>>> import tempfile, torch
>>> from ktstream.data.vocab import Vocabulary
>>> from ktstream.models import create
>>> reg = ModelRegistry(tempfile.mkdtemp())
>>> seen = []
>>> w = RegistryWatcher(reg, lambda v: seen.append(v.version), interval_s=0.0)
>>> w.poll() is None
True
>>> _ = reg.publish(create("dkt", n_items=4, n_concepts=3, dim=4, hidden=4), Vocabulary(["a", "b"]),
...                 Vocabulary(["c"]), {"note": "doctest"})
>>> w.poll().version, w.poll(), seen
('v000001', None, ['v000001'])
"""

from __future__ import annotations

import logging
import time
from typing import Callable

from ktstream.finetune.exceptions import RegistryError
from ktstream.finetune.registry import ModelRegistry, ModelVersion

log = logging.getLogger(__name__)


class RegistryWatcher:
    def __init__(self, registry: ModelRegistry, callback: Callable[[ModelVersion], None],
                 current: str | None = None, interval_s: float = 10.0,
                 clock: Callable[[], float] = time.monotonic,
                 on_load_error: Callable[[str, Exception], None] | None = None):
        self.registry, self.callback = registry, callback
        self.current, self.interval_s, self.clock = current, interval_s, clock
        self.on_load_error = on_load_error or (lambda version, exc: None)
        self._last_check: float | None = None
        self._bad: str | None = None  # a version that failed to load (not retried)

    def poll(self) -> ModelVersion | None:
        """Check (if the interval has passed); return the version handed to the callback, if any."""
        now = self.clock()
        if self._last_check is not None and now - self._last_check < self.interval_s:
            return None
        self._last_check = now
        try:
            latest = self.registry.latest()
        except OSError as exc:
            log.error("model registry %s cannot be listed (%s); still serving %s", self.registry.root, exc,
                      self.current)
            self.on_load_error("", exc)
            return None
        if latest is None or latest == self.current or latest == self._bad:
            return None
        try:
            version = self.registry.get(latest)
        except RegistryError as exc:
            log.error("model version %s cannot be loaded; still serving %s: %s", latest, self.current, exc)
            self._bad = latest
            self.on_load_error(latest, exc)
            return None
        self.callback(version)
        self.current = latest
        return version
