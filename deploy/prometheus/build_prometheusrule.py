"""Write deploy/kubernetes/prometheusrule.yaml: rules.yml as a PrometheusRule, for Prometheus Operator users.

The alert rules live in one place, ``deploy/prometheus/rules.yml`` (with the comments that say why
each threshold is where it is); the Operator reads rules from PrometheusRule objects instead of
files, so this script wraps the same groups in one. After editing rules.yml run

    python deploy/prometheus/build_prometheusrule.py

tests/deploy checks that the manifest holds exactly rules.yml's groups.
"""

from __future__ import annotations

from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
RULES = HERE / "rules.yml"
OUT = HERE.parent / "kubernetes" / "prometheusrule.yaml"
HEADER = """\
# Generated from deploy/prometheus/rules.yml by deploy/prometheus/build_prometheusrule.py: edit rules.yml
# (its comments explain every threshold) and run the script. For the Prometheus Operator
# (monitoring.coreos.com CRDs); like podmonitor.yaml it is not in kustomization.yaml's resources, since
# applying it fails on clusters without the CRD. Match your Prometheus' ruleSelector with the labels below.
"""


class _Dumper(yaml.SafeDumper):
    pass


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None  # multi-line PromQL stays readable
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)


def manifest() -> dict:
    groups = yaml.safe_load(RULES.read_text(encoding="utf-8"))["groups"]
    return {"apiVersion": "monitoring.coreos.com/v1", "kind": "PrometheusRule",
            "metadata": {"name": "ktstream", "labels": {"app.kubernetes.io/name": "ktstream",
                                                        "prometheus": "k8s", "role": "alert-rules"}},
            "spec": {"groups": groups}}


def render() -> str:
    return HEADER + yaml.dump(manifest(), Dumper=_Dumper, sort_keys=False, width=120, allow_unicode=True)


if __name__ == "__main__":
    OUT.write_text(render(), encoding="utf-8")
    print(f"wrote {OUT}")
