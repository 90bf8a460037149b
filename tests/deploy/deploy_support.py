"""Shared helpers of the deployment checks: paths, PromQL name patterns, YAML loading, scraping."""

from __future__ import annotations

import re
import urllib.request
from pathlib import Path

import yaml
from prometheus_client.parser import text_string_to_metric_families

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
METRIC = re.compile(r"\b((?:ktstream|process|python)_[a-z0-9_]+)\b")
SELECTOR = re.compile(r"\b((?:ktstream|process|python)_[a-z0-9_]+)\{([^}]*)\}")
MATCHER = re.compile(r'(\w+)\s*(=~|!~|!=|=)\s*"([^"]*)"')


def load_yaml_docs(path: Path) -> list:
    return [d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if d is not None]


def scrape(url: str) -> dict[str, list[dict[str, str]]]:
    """Sample name -> label sets of its samples, from a Prometheus text exposition at ``url``."""
    text = urllib.request.urlopen(url, timeout=10).read().decode()
    samples: dict[str, list[dict[str, str]]] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            samples.setdefault(s.name, []).append(dict(s.labels))
    return samples
