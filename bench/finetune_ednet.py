"""End-to-end fine-tuning on EdNet KT1 (11 heavy users): a service that fine-tunes vs one that never retrains.

Events go through the archive (``connectors.archive.ArchiveWriter``) and are
read back in event-time order (``ktstream.data.archive_reader``); each cycle's
windows are read from the archive in columns (``build_windows_from_archive``, as
the Trainer service reads them). A first model
is trained on events before C0 (selected on [C0, C0+H), gated on [C0+H, C0+2H))
and goes into service at C0+2H. Then every ``every`` days of event time a cycle
runs at C_k = C0 + k * every: replay -> fine-tune (warm start) -> gate ->
promote / reject (``ktstream.finetune.run_cycle``); a promoted version serves
from C_k + 2H on, when its judge window has been seen.

Both services are scored prequentially per period: every event at or after
C0+2H is predicted by the version in service at its event time, from the
learner's whole earlier history (training path; equal to the serving path by
invariant 2). The static service keeps the first version throughout.

    python bench/finetune_ednet.py            # ~10 min on one CPU thread
Writes runs/finetune_ednet/{table.md, auc_over_time.png, results.json}.
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import torch

from connectors.archive import ArchiveWriter
from connectors.datasets import iter_events
from ktstream.data.archive_reader import read_archive
from ktstream.data.histories import encode
from ktstream.finetune.finetune import FinetuneConfig, fine_tune
from ktstream.finetune.promotion import PromotionConfig
from ktstream.finetune.registry import ModelRegistry
from ktstream.finetune.windows import build_windows, build_windows_from_archive
from ktstream.finetune.scheduler import run_cycle
from ktstream.leakage import ALL_CHECKS, GateConfig
from ktstream.scoring.binary import auc
from ktstream.training.trainer import predict_histories

DAY_MS = 86_400_000


def ms(day: str) -> int:
    return int(datetime.fromisoformat(day).replace(tzinfo=timezone.utc).timestamp() * 1000)


def day(t: int) -> str:
    return datetime.fromtimestamp(t / 1000, tz=timezone.utc).strftime("%Y-%m-%d")


def archive_events(data: Path, folder: Path) -> tuple[list[dict], float]:
    started = time.time()
    shutil.rmtree(folder, ignore_errors=True)
    writer = ArchiveWriter(folder, flush_records=20_000)
    for offset, rec in enumerate(iter_events("ednet-kt1", data)):
        writer.add(("ednet", 0), offset, rec)
        if writer.due():
            writer.flush()
    writer.flush()
    return read_archive(folder), time.time() - started


def served_probs(version, records: list[dict]) -> dict[str, float]:
    """P(correct) for every event, predicted by ``version`` from the learner's whole earlier history."""
    hist = encode(records, version.items, version.concepts)
    probs = predict_histories(version.model, hist, batch_size=16)
    return {e: float(p[i, 1]) for h, p in zip(hist, probs) for i, e in enumerate(h.event_ids)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", default="/work/shared/data/ednet_kt1_11users")
    ap.add_argument("--out", default="runs/finetune_ednet")
    ap.add_argument("--first-cutoff", default="2019-02-01")
    ap.add_argument("--horizon-days", type=float, default=14)
    ap.add_argument("--every-days", type=float, default=28)
    ap.add_argument("--epochs", type=int, default=2, help="epochs per fine-tune")
    ap.add_argument("--initial-epochs", type=int, default=5)
    ap.add_argument("--static-epochs", type=int, default=20,
                    help="a second never-retrained reference, trained longer (early stopping, patience 3)")
    ap.add_argument("--dim", type=int, default=32)
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--bootstrap", type=int, default=500)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--skip-check", action="append", default=[], choices=ALL_CHECKS,
                    help="leave a gate check out (say why in the report); default: every check")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    started = time.time()
    records, archive_s = archive_events(Path(args.data), out / "archive")
    end = records[-1]["event_time"]
    H, every, C0 = int(args.horizon_days * DAY_MS), int(args.every_days * DAY_MS), ms(args.first_cutoff)
    shutil.rmtree(out / "registry", ignore_errors=True)
    registry = ModelRegistry(out / "registry")
    model_kwargs = {"dim": args.dim, "hidden": args.hidden}
    ft = dict(batch_size=32, lr=3e-3, patience=1, segment=100, progress=False)
    checks = [c for c in ALL_CHECKS if c not in args.skip_check]
    promo = PromotionConfig(bootstrap=args.bootstrap, random_labels_days=args.every_days,
                            gate=GateConfig(random_label_epochs=1, checks=checks))
    cycles, cutoff = [], C0
    while cutoff + 2 * H <= end:
        cfg = FinetuneConfig(epochs=args.epochs if registry.latest() else args.initial_epochs, **ft)
        def windows(base, n_categories, cutoff=cutoff):  # the archive in columns, as the Trainer reads it
            return build_windows_from_archive(out / "archive", cutoff, H, base, n_categories)

        c = run_cycle(None, cutoff, H, registry, "dkt", model_kwargs, cfg, promo, windows=windows)
        cycles.append({"cutoff": day(cutoff), "in_service_from": day(cutoff + 2 * H), "effective_ms": cutoff + 2 * H,
                       "outcome": c.outcome, "name": c.name, "parent": c.parent, "seconds": round(c.seconds, 1),
                       "reasons": c.decision["reasons"], "comparison": c.decision["comparison"],
                       "gate_failed": c.decision["gate"]["failed"], "window": c.window,
                       "best_epoch": c.finetune["fit"]["best_epoch"], "device": c.finetune["device"]})
        print(f"{day(cutoff)}: {c.outcome} {c.name} in {c.seconds:.0f}s; {'; '.join(c.decision['reasons'])}",
              flush=True)
        cutoff += every
    promoted = [c for c in cycles if c["outcome"] == "promoted"]
    assert promoted, "no model passed the gate: nothing was ever served"
    # service starts with the first promoted model (cold-start candidates the gate rejects never serve)
    start = promoted[0]["effective_ms"]
    probs = {c["name"]: served_probs(registry.get(c["name"]), records) for c in promoted}
    # reference: the first window again, trained until early stopping (not gated; it never serves here)
    first_c = ms(promoted[0]["cutoff"])
    first = build_windows([r for r in records if r["event_time"] < first_c + 2 * H], first_c, H)
    long_cfg = FinetuneConfig(epochs=args.static_epochs, **{**ft, "patience": 3})
    longer = fine_tune(first, cfg=long_cfg, family="dkt", model_kwargs=model_kwargs)
    probs["longer"] = served_probs(longer, records)
    scored = [r for r in records if r["event_time"] >= start and r.get("response") is not None]
    periods, rows = [], []
    for lo in range(start, end + 1, every):
        hi = min(lo + every, end + 1)
        part = [r for r in scored if lo <= r["event_time"] < hi]
        if not part:
            continue
        live = [c for c in promoted if c["effective_ms"] <= lo][-1]["name"]  # promotions land on period starts
        y = np.array([r["response"] for r in part])
        static = auc(y, [probs[promoted[0]["name"]][r["event_id"]] for r in part])
        static_long = auc(y, [probs["longer"][r["event_id"]] for r in part])
        tuned = auc(y, [probs[live][r["event_id"]] for r in part])
        periods.append({"from": day(lo), "to": day(hi), "events": len(part), "version": live,
                        "auc_static": static, "auc_static_longer": static_long, "auc_finetuned": tuned})
    y = np.array([r["response"] for r in scored])
    live_of = lambda t: [c for c in promoted if c["effective_ms"] <= t][-1]["name"]  # noqa: E731
    overall = {"events": len(scored), "auc_static": auc(y, [probs[promoted[0]["name"]][r["event_id"]] for r in scored]),
               "auc_static_longer": auc(y, [probs["longer"][r["event_id"]] for r in scored]),
               "auc_finetuned": auc(y, [probs[live_of(r["event_time"])][r["event_id"]] for r in scored])}
    results = {"config": vars(args), "gate_checks": checks, "static_version": promoted[0]["name"],
               "archive_seconds": round(archive_s, 1), "events": len(records),
               "cycles": cycles, "static_longer": {"best_epoch": longer.fit.best_epoch, "history": longer.fit.history},
               "periods": periods, "overall": overall, "seconds": round(time.time() - started, 1)}
    (out / "results.json").write_text(json.dumps(results, indent=1, default=str))
    write_table(out / "table.md", results)
    plot(out / "auc_over_time.png", periods, cycles)
    print((out / "table.md").read_text())


def write_table(path: Path, r: dict) -> None:
    n = r["static_longer"]["best_epoch"]
    lines = [f"| period (UTC) | events | version serving | AUC never retrained ({r['static_version']}) | "
             f"AUC never retrained, {n} epochs | AUC fine-tuned |", "|---|---|---|---|---|---|"]
    lines += [f"| {p['from']} .. {p['to']} | {p['events']} | {p['version']} | {p['auc_static']:.4f} | "
              f"{p['auc_static_longer']:.4f} | {p['auc_finetuned']:.4f} |" for p in r["periods"]]
    o = r["overall"]
    lines.append(f"| all | {o['events']} | | {o['auc_static']:.4f} | {o['auc_static_longer']:.4f} | "
                 f"{o['auc_finetuned']:.4f} |")
    lines += ["", "| cutoff C | outcome | name | candidate AUC | serving AUC | diff, 95% CI | gate failed | s |",
              "|---|---|---|---|---|---|---|---|"]
    for c in r["cycles"]:
        cmp = c["comparison"] or {}
        ci = f"{cmp['difference']:+.4f} [{cmp['ci_low']:+.4f}, {cmp['ci_high']:+.4f}]" if cmp else "(first model)"
        lines.append(f"| {c['cutoff']} | {c['outcome']} | {c['name']} | {cmp.get('candidate', float('nan')):.4f} | "
                     f"{cmp.get('serving', float('nan')):.4f} | {ci} | {', '.join(c['gate_failed']) or '-'} | "
                     f"{c['seconds']} |")
    lines.append(f"\n{r['events']} events, total {r['seconds']} s (archive write + read {r['archive_seconds']} s)")
    path.write_text("\n".join(lines) + "\n")


def plot(path: Path, periods: list[dict], cycles: list[dict]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    x = [datetime.fromisoformat(p["from"]) for p in periods]
    fig, ax = plt.subplots(figsize=(8, 4))
    ax.plot(x, [p["auc_static"] for p in periods], "o-", label="never retrained (first window)")
    ax.plot(x, [p["auc_static_longer"] for p in periods], "^--", label="never retrained, trained to early stopping")
    ax.plot(x, [p["auc_finetuned"] for p in periods], "s-", label="fine-tuned every cycle (gated)")
    for c in cycles:
        ax.axvline(datetime.fromisoformat(c["in_service_from"]), color="green" if c["outcome"] == "promoted" else
                   "red", alpha=0.25, lw=1)
    ax.set_ylabel("prequential AUC per period")
    ax.set_title("EdNet KT1, 11 users (lines: candidates; green promoted, red rejected)")
    ax.legend()
    fig.autofmt_xdate()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


if __name__ == "__main__":
    main()
