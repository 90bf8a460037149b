"""The issue's crash-recovery figure: >= 10 SIGKILLs during >= 50,000 events over >= 2,000 learners.

Starts an embedded broker (Tansu), then connectors.state_chaos.run: a paced feed,
``python -m ktstream.state.serve`` killed with SIGKILL (by its pid) at random
moments once it processes, restarted on the same state directory; checks
every input offset predicted, only same-offset repeats with the same values,
and every learner's stored state equal to an uninterrupted run (1e-6).

    python bench/crash_recovery.py --events 50000 --learners 2000 --kills 10
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from connectors.broker import EmbeddedBroker
from connectors import state_chaos as chaos


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--events", type=int, default=50_000)
    ap.add_argument("--learners", type=int, default=2_000)
    ap.add_argument("--kills", type=int, default=10)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--feed-s", type=float, default=180.0)
    ap.add_argument("--timeout-s", type=float, default=900.0)
    a = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="crash-recovery-")) / "run"
    t0 = time.monotonic()
    with EmbeddedBroker() as broker:
        result = chaos.run(work, broker.bootstrap_servers, n_learners=a.learners,
                           mean_length=a.events // a.learners + 1, partitions=a.partitions, kills=a.kills,
                           feed_s=a.feed_s, seed=0, timeout_s=a.timeout_s)
        counts = chaos.check(result)
    restores = (work / "engine.log").read_text().count("changelog records in")
    print(f"{counts['kills']} SIGKILLs, {counts['events']} events, {counts['learners']} learners, "
          f"{counts['predictions']} predictions ({counts['duplicates']} same-offset repeats), "
          f"{restores} partition restores; all three properties hold; {time.monotonic() - t0:.0f} s "
          f"(log: {work / 'engine.log'})")


if __name__ == "__main__":
    main()
