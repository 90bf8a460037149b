"""Model registry: a directory of immutable, promoted model versions (later an object-store prefix).

Layout::

    ROOT/versions/v000001/config.json          family, model config, vocabularies, version
                         /weights.safetensors  parameters (safetensors; never pickle)
                         /metrics.json         promotion figures, gate report, data window (C, H, counts)
    ROOT/rejected/<id>/{config.json, weights.safetensors, report.json}
    ROOT/.tmp/   staging;  ROOT/.lock   serialises publishers

``publish`` writes a version completely under ``.tmp``, fsyncs it, marks its
files read-only and renames the folder into ``versions/`` in one step, so a
reader sees a version whole or not at all; a version is never rewritten
(publishing over an existing name raises `RegistryError`). ``latest()`` is the
highest version number. Weights and config use ``ktstream.models.checkpoint``.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from ktstream.data.vocab import Vocabulary
from ktstream.finetune.exceptions import RegistryError
from ktstream.models.base import KTModel
from ktstream.models.checkpoint import CONFIG, WEIGHTS, load_checkpoint, save_checkpoint

METRICS, REPORT = "metrics.json", "report.json"
VERSION = re.compile(r"^v(\d{6})$")
ALLOWED_SUFFIXES = (".json", ".safetensors")


@dataclass
class ModelVersion:
    version: str
    model: KTModel
    items: Vocabulary
    concepts: Vocabulary
    metrics: dict[str, Any]
    path: Path


def _fsync_tree(folder: Path) -> None:
    for p in [*folder.iterdir(), folder]:
        fd = os.open(p, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _check_vocabularies(version: str, model: KTModel, items: Vocabulary, concepts: Vocabulary) -> None:
    """The model must embed every id its vocabularies encode (else serving fails at the first such event)."""
    for what, vocab, size in (("item", items, model.n_items), ("concept", concepts, model.n_concepts)):
        if len(vocab) > size:
            raise RegistryError(f"version {version}: its {what} vocabulary encodes {len(vocab)} ids but the "
                                f"model embeds {size}")


class ModelRegistry:
    def __init__(self, root: str | Path, read_only: bool = False):
        """``read_only``: a reader (an engine, on a read-only mount) creates nothing; an absent
        registry simply has no versions yet."""
        self.root = Path(root)
        if not read_only:
            for sub in ("versions", "rejected", ".tmp"):
                (self.root / sub).mkdir(parents=True, exist_ok=True)

    # -- reading ---------------------------------------------------------
    def versions(self) -> list[str]:
        """Promoted versions, oldest first."""
        folder = self.root / "versions"
        return sorted(p.name for p in folder.iterdir() if VERSION.match(p.name)) if folder.is_dir() else []

    def latest(self) -> str | None:
        names = self.versions()
        return names[-1] if names else None

    def metrics(self, version: str) -> dict[str, Any]:
        return json.loads((self._dir(version) / METRICS).read_text(encoding="utf-8"))

    def get(self, version: str) -> ModelVersion:
        """Load a version (model in eval mode on CPU), or raise `RegistryError` saying why it cannot serve.

        Every way a version's files can be wrong ends here as a `RegistryError`: files other than
        JSON / safetensors, truncated or unreadable weights, an unknown family or a config its
        constructor refuses, weights whose names or shapes do not fit the model, a model too small
        for its own vocabularies, a missing metrics file. A serving engine relies on this to keep
        its current version (ktstream.finetune.watcher).
        """
        folder = self._dir(version)
        foreign = [p.name for p in folder.iterdir() if not p.name.endswith(ALLOWED_SUFFIXES)]
        if foreign:
            raise RegistryError(f"version {version} holds files that are not JSON / safetensors: {foreign}")
        try:
            model, items, concepts, stored = load_checkpoint(folder)
            metrics = self.metrics(version)
        except Exception as exc:  # noqa: BLE001  (any content of a folder on disk: all mean "cannot serve")
            raise RegistryError(f"cannot load version {version}: {type(exc).__name__}: {exc}") from exc
        if stored != version:
            raise RegistryError(f"folder {version} holds a checkpoint of version {stored}")
        _check_vocabularies(version, model, items, concepts)
        return ModelVersion(version, model, items, concepts, metrics, folder)

    def rejected(self) -> list[str]:
        return sorted(p.name for p in (self.root / "rejected").iterdir() if p.is_dir())

    def rejected_report(self, name: str) -> dict[str, Any]:
        return json.loads((self.root / "rejected" / name / REPORT).read_text(encoding="utf-8"))

    def _dir(self, version: str) -> Path:
        folder = self.root / "versions" / version
        if not VERSION.match(version) or not folder.is_dir():
            raise RegistryError(f"no version {version!r} in {self.root}; versions: {self.versions()}")
        return folder

    # -- writing ---------------------------------------------------------
    @contextmanager
    def _locked(self) -> Iterator[None]:
        with open(self.root / ".lock", "a+") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(fh, fcntl.LOCK_UN)

    def _stage(self, model: KTModel, items: Vocabulary, concepts: Vocabulary, name: str,
               extra: tuple[str, dict[str, Any]]) -> Path:
        staging = Path(tempfile.mkdtemp(prefix=f"{name}-", dir=self.root / ".tmp"))
        try:
            save_checkpoint(staging, model, items, concepts, name)
            (staging / extra[0]).write_text(json.dumps(extra[1], indent=1, default=str), encoding="utf-8")
            for p in staging.iterdir():
                p.chmod(0o444)
            _fsync_tree(staging)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        return staging

    def _commit(self, staging: Path, target: Path) -> None:
        try:
            os.rename(staging, target)  # atomic; fails if target exists and is not empty
        except OSError as exc:
            shutil.rmtree(staging, ignore_errors=True)
            raise RegistryError(f"{target} already exists: versions are immutable") from exc
        target.chmod(0o555)
        _fsync_tree(target.parent)

    def publish(self, model: KTModel, items: Vocabulary, concepts: Vocabulary, metrics: dict[str, Any],
                version: str | None = None) -> str:
        """Write a new immutable version (the next number unless ``version`` is given); returns its name."""
        with self._locked():
            if version is None:
                last = self.latest()
                version = f"v{(int(last[1:]) if last else 0) + 1:06d}"
            if not VERSION.match(version):
                raise RegistryError(f"version names look like v000001, got {version!r}")
            target = self.root / "versions" / version
            if target.exists():
                raise RegistryError(f"version {version} already exists: versions are immutable")
            meta = {"version": version, "published_at": time.time(), **metrics}
            self._commit(self._stage(model, items, concepts, version, (METRICS, meta)), target)
        return version

    def reject(self, model: KTModel, items: Vocabulary, concepts: Vocabulary, report: dict[str, Any],
               label: str = "candidate") -> str:
        """Keep a rejected candidate with its report under ``rejected/``; returns its folder name."""
        with self._locked():
            name = f"{time.strftime('%Y%m%dT%H%M%S', time.gmtime())}-{label}-{len(self.rejected()) + 1:04d}"
            self._commit(self._stage(model, items, concepts, name, (REPORT, report)), self.root / "rejected" / name)
        return name


__all__ = ["ModelRegistry", "ModelVersion", "CONFIG", "WEIGHTS", "METRICS", "REPORT"]
