"""The commands: `ktstream serve` (health, readiness, clean SIGTERM), `ktstream replay`, `ktstream demo`."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import pytest
import yaml

from connectors.broker import free_port
from ktstream.cli.main import main
from ktstream.data.eventlog import write_events
from ktstream.models.checkpoint import save_checkpoint

pytestmark = pytest.mark.broker
ROOT = Path(__file__).resolve().parents[2]


def status(url: str) -> int:
    try:
        return urllib.request.urlopen(url, timeout=2).status
    except urllib.error.HTTPError as exc:
        return exc.code
    except OSError:
        return 0


def test_serve_answers_a_replayed_log_and_stops_cleanly_on_sigterm(broker, kit, tmp_path):
    from connectors.kafka import KafkaSource
    from ktstream.config import load_settings

    recs = kit.stream(n_learners=15, mean_length=8, seed=21)
    items, concepts = kit.build_vocabularies(recs)
    save_checkpoint(tmp_path / "model", kit.tiny_model("dkt", items, concepts), items, concepts, "cli-1")
    write_events(recs, tmp_path / "events.jsonl")
    tag, port = uuid.uuid4().hex[:6], free_port()
    cfg = {"kafka": {"bootstrap_servers": broker.bootstrap_servers, "group_id": f"serve-{tag}",
                     "session_timeout_ms": 6000, "partitions": 3,
                     "topics": {"events": f"{tag}.ev", "predictions": f"{tag}.pred", "dead_letters": f"{tag}.dead"}},
           "metrics": {"port": port}, "model": {"family": "dkt", "checkpoint": str(tmp_path / "model")}}
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(cfg))
    proc = subprocess.Popen([sys.executable, "-m", "ktstream.cli.main", "serve", "--config", str(tmp_path / "c.yaml"),
                             "--create-topics"], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        deadline = time.monotonic() + 60
        while status(f"http://127.0.0.1:{port}/readyz") != 200:
            assert proc.poll() is None, proc.stdout.read().decode()[-3000:]
            assert time.monotonic() < deadline, "serve did not become ready in 60 s"
            time.sleep(0.2)
        assert status(f"http://127.0.0.1:{port}/healthz") == 200
        assert main(["replay", str(tmp_path / "events.jsonl"), "--config", str(tmp_path / "c.yaml"),
                     "--rate", "2000"]) == 0
        s = load_settings(tmp_path / "c.yaml")
        reader = KafkaSource(s.kafka.model_copy(update={"group_id": f"reader-{tag}"}), topics=[f"{tag}.pred"])
        got = []
        deadline = time.monotonic() + 60
        while len(got) < len(recs) and time.monotonic() < deadline:
            got.extend(reader.poll(0.2, 1000))
        reader.close()
        assert sorted(json.loads(r.value)["event_id"] for r in got) == sorted(r["event_id"] for r in recs)
        assert {json.loads(r.value)["model_version"] for r in got} == {"cli-1"}
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, out.decode()[-3000:]
    assert "stopped cleanly" in out.decode()


@pytest.mark.slow  # trains a (very small) model: ~20-40 s
def test_demo_runs_end_to_end_and_exits_zero(tmp_path):
    demo = yaml.safe_load((ROOT / "ktstream" / "configs" / "demo.yaml").read_text())
    demo["model"].update(quick_learners=40, quick_epochs=1)
    (tmp_path / "demo.yaml").write_text(yaml.safe_dump(demo))
    out = subprocess.run([sys.executable, "-m", "ktstream.cli.main", "demo", "--config", str(tmp_path / "demo.yaml"),
                          "--learners", "30", "--rate", "3000", "--duration", "60"], cwd=ROOT, capture_output=True,
                         timeout=240)
    text = out.stdout.decode()
    assert out.returncode == 0, (text + out.stderr.decode())[-3000:]
    done = next(line for line in text.splitlines() if line.startswith("done:"))
    consumed, total = done.split()[1].split("/")
    assert consumed == total, done
    assert "'invalid_json': 1" in done and "'oversized': 1" in done and "'schema': 2" in done
