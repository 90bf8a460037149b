"""Decode and validate one event: CPU microseconds per event, and each path's ratio to the first.

Paths: ``orjson + model_validate`` (the dict path: orjson parses, pydantic validates the dict),
``model_validate_json`` (pydantic parses and validates the bytes in its Rust core) and
``decode`` (ktstream.engine.decode.decode as it is now, every check included), and with --before REV
the decode() and schema of that git revision, in the same process. The events are simulated
interactions of --learners learners, keyed by learner id, shaped as bench_engine.py's.

    python bench/bench_decode.py                     # 20,000 events, 5 rounds: a few seconds
    python bench/bench_decode.py --before 5a14d27    # decode() of that commit beside today's
"""

from __future__ import annotations

import argparse
import importlib
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ktstream.core import Record  # noqa: E402
from ktstream.engine.decode import decode  # noqa: E402
from ktstream.schema import Event  # noqa: E402


def events(n: int, learners: int) -> list[Record]:
    out = []
    for i in range(n):
        learner = f"learner-{i % learners}"
        ev = {"event_id": f"e{i}", "learner_id": learner, "item_id": f"q{i % 97}", "concept_ids": [f"c{i % 13}"],
              "response": i % 2, "event_time": 1_700_000_000_000 + i * 1000}
        out.append(Record("events", i % 4, i, learner.encode(), orjson.dumps(ev)))
    return out


def per_event_us(fn, records: list[Record], rounds: int) -> float:
    times = []
    for _ in range(rounds):
        start = time.process_time()
        for r in records:
            fn(r)
        times.append((time.process_time() - start) / len(records) * 1e6)
    return statistics.median(times)


def decode_at(rev: str):
    """decode() of git revision ``rev`` (its decode.py and schema.py, loaded as a package of their own)."""
    root = Path(__file__).resolve().parents[1]
    pkg = Path(tempfile.mkdtemp(prefix="bench_decode_")) / "decode_before"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    for name, path in (("schema", "ktstream/schema.py"), ("decode", "ktstream/engine/decode.py")):
        text = subprocess.run(["git", "-C", str(root), "show", f"{rev}:{path}"], check=True, capture_output=True,
                              text=True).stdout
        (pkg / f"{name}.py").write_text(text.replace("from ktstream.schema import", "from decode_before.schema import"))
    sys.path.insert(0, str(pkg.parent))
    return importlib.import_module("decode_before.decode").decode


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--events", type=int, default=20_000)
    ap.add_argument("--learners", type=int, default=2_000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--before", help="a git revision whose decode() runs beside today's")
    a = ap.parse_args()
    records = events(a.events, a.learners)
    paths = {
        "orjson + model_validate": lambda r: Event.model_validate(orjson.loads(r.value)),
        "model_validate_json": lambda r: Event.model_validate_json(r.value),
        "orjson.loads alone": lambda r: orjson.loads(r.value),
        "decode()": lambda r: decode(r, 65_536, None),
    }
    if a.before:
        before = decode_at(a.before)
        paths[f"decode() at {a.before}"] = lambda r: before(r, 65_536, None)
        paths["decode() again"] = paths["decode()"]  # drift of the shared cores between the two
    results = {name: per_event_us(fn, records, a.rounds) for name, fn in paths.items()}
    first = next(iter(results.values()))
    print(f"{a.events} events, median of {a.rounds} rounds, CPU us per event (process time)")
    for name, us in results.items():
        print(f"  {name:26s} {us:6.2f} us   x{us / first:.2f} of the dict path")


if __name__ == "__main__":
    main()
