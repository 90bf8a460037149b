"""What the leakage gate found: one `CheckResult` per check, gathered in a `GateReport`.

A check either passes, fails, or does not apply (a model without attention has
no attention maps to inspect; a gate run without a training split cannot train
on random labels). "Not applicable" never counts as a failure, but it is always
shown, with its reason, so a reader sees what was not checked. A check that
raises is a failure: the gate fails closed.

>>> r = GateReport("demo", [CheckResult("future_perturbation", "pass", 0.0, 0.0, "max |dp| <= bound"),
...                         CheckResult("attention_masking", "n/a", detail="model has no attention_maps")])
>>> r.passed, r["future_perturbation"].passed, r.failed()
(True, True, [])
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from typing import Any

STATUSES = ("pass", "fail", "n/a")


@dataclass
class CheckResult:
    """One check's verdict.

    Parameters
    ----------
    name
        Stable check name (``future_perturbation``, ``random_labels``, ...).
    status
        ``"pass"``, ``"fail"`` or ``"n/a"`` (not applicable; see ``detail``).
    figure
        The measured figure (a largest difference, an AUC, a share).
    bound
        The figure's limit; ``rule`` says how figure and bound compare.
    rule
        The pass condition in words, e.g. ``"max |dp| <= bound"``.
    detail
        Where it failed (learner, position, layer) or why it does not apply.
    extras
        Further figures (per-mode differences, counts), JSON-serialisable.
    """

    name: str
    status: str
    figure: float | None = None
    bound: float | None = None
    rule: str = ""
    detail: str = ""
    extras: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        assert self.status in STATUSES, f"status must be one of {STATUSES}, got {self.status!r}"

    @property
    def passed(self) -> bool:
        """True unless the check failed (``n/a`` is not a failure)."""
        return self.status != "fail"

    @classmethod
    def judge(cls, name: str, figure: float, bound: float, ok: bool, rule: str, detail: str = "",
              **extras: Any) -> "CheckResult":
        """A pass/fail result; a NaN figure fails (nothing measured is not a pass)."""
        ok = bool(ok) and not (isinstance(figure, float) and math.isnan(figure))
        return cls(name, "pass" if ok else "fail", float(figure), float(bound), rule, detail, dict(extras))

    @classmethod
    def not_applicable(cls, name: str, why: str) -> "CheckResult":
        return cls(name, "n/a", detail=why)


@dataclass
class GateReport:
    """All check results of one gate run, with the labels the data earned.

    ``labels`` carries how figures on this data must be described, e.g.
    ``{"data": "rows as given (includes 15.7% expanded multi-concept rows)"}``.
    """

    model: str
    checks: list[CheckResult]
    labels: dict[str, str] = field(default_factory=dict)
    config: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0

    @property
    def passed(self) -> bool:
        return all(c.passed for c in self.checks)

    def failed(self) -> list[str]:
        return [c.name for c in self.checks if not c.passed]

    def __getitem__(self, name: str) -> CheckResult:
        for c in self.checks:
            if c.name == name:
                return c
        raise KeyError(f"no check named {name!r}; checks run: {[c.name for c in self.checks]}")

    def __contains__(self, name: str) -> bool:
        return any(c.name == name for c in self.checks)

    def to_dict(self) -> dict[str, Any]:
        return {"model": self.model, "passed": self.passed, "failed": self.failed(),
                "labels": dict(self.labels), "seconds": round(self.seconds, 2), "config": self.config,
                "checks": [asdict(c) for c in self.checks]}

    def to_json(self, indent: int | None = 2) -> str:
        """Strict JSON (NaN written as null)."""
        return json.dumps(_no_nan(self.to_dict()), indent=indent, default=_jsonable, allow_nan=False)

    def table(self) -> str:
        """Plain-text table: check, status, figure, bound, rule, detail."""
        rows = [("check", "status", "figure", "bound", "rule", "detail")]
        for c in self.checks:
            rows.append((c.name, c.status.upper(), _num(c.figure), _num(c.bound), c.rule, c.detail))
        widths = [max(len(r[i]) for r in rows) for i in range(5)]
        lines = ["  ".join(r[i].ljust(widths[i]) for i in range(5)) + "  " + r[5] for r in rows]
        lines.insert(1, "-" * (sum(widths) + 16))
        verdict = "PASSED" if self.passed else f"FAILED ({', '.join(self.failed())})"
        lines.append(f"leakage gate for {self.model}: {verdict}")
        lines += [f"  {k}: {v}" for k, v in self.labels.items()]
        return "\n".join(lines)


def _num(x: float | None) -> str:
    if x is None:
        return "-"
    if x == 0 or 1e-3 <= abs(x) < 1e5:
        return f"{x:.4f}"
    return f"{x:.2e}"


def _no_nan(x: Any) -> Any:
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {k: _no_nan(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_no_nan(v) for v in x]
    return x


def _jsonable(x: Any) -> Any:
    if hasattr(x, "item"):
        return x.item()
    if isinstance(x, (set, tuple)):
        return list(x)
    return str(x)
