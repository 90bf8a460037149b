"""Kubernetes manifests: valid for their kinds, wired to each other and to ktstream's real settings.

Built-in kinds are validated against the Kubernetes OpenAPI schemas that the
``kubernetes-validate`` package ships (offline, strict: unknown fields fail);
without the package, and for CRDs (PodMonitor), a required-field check of our own.
"""

from __future__ import annotations

import pytest
from tests.deploy.deploy_support import DEPLOY, load_yaml_docs

K8S = DEPLOY / "kubernetes"
K8S_VERSION = "1.30.0"
REQUIRED = {  # fallback: fields the API server rejects a manifest without
    "StatefulSet": ["spec.selector", "spec.template.spec.containers", "spec.serviceName"],
    "Deployment": ["spec.selector", "spec.template.spec.containers"],
    "Service": ["spec.ports"],
    "ConfigMap": ["data"],
    "Secret": [],
    "PersistentVolumeClaim": ["spec.accessModes", "spec.resources.requests.storage"],
    "PodDisruptionBudget": ["spec.selector"],
    "Namespace": [],
    "PodMonitor": ["spec.selector", "spec.podMetricsEndpoints"],
    "PrometheusRule": ["spec.groups"],
}


def manifests() -> list[tuple[str, dict]]:
    return [(p.name, d) for p in sorted(K8S.glob("*.yaml")) if p.name != "kustomization.yaml"
            for d in load_yaml_docs(p)]


def by_kind(kind: str) -> list[dict]:
    return [d for _, d in manifests() if d["kind"] == kind]


def dig(doc: dict, dotted: str):
    for part in dotted.split("."):
        doc = doc[part]
    return doc


@pytest.mark.parametrize("name,doc", manifests(), ids=[f"{n}:{d['kind']}" for n, d in manifests()])
def test_manifest_is_valid_for_its_kind(name, doc):
    assert {"apiVersion", "kind", "metadata"} <= set(doc) and doc["metadata"].get("name"), name
    for field in REQUIRED[doc["kind"]]:
        assert dig(doc, field) is not None, f"{name}: {doc['kind']} needs {field}"
    if doc["apiVersion"].startswith("monitoring.coreos.com"):
        return  # a CRD: no schema in kubernetes-validate; the required fields above are checked
    try:
        import kubernetes_validate
    except ImportError:
        return  # the required-field check above stands in for the schema
    kubernetes_validate.validate(doc, K8S_VERSION, strict=True)


def test_kustomization_lists_existing_files():
    (kust,) = load_yaml_docs(K8S / "kustomization.yaml")
    for resource in kust["resources"]:
        assert (K8S / resource).is_file(), resource
    listed = set(kust["resources"])
    assert {p.name for p in K8S.glob("*.yaml")} - listed - {"kustomization.yaml"} == {"podmonitor.yaml",
                                                                                   "prometheusrule.yaml"}


def test_statefulset_probes_state_and_grace():
    from ktstream.config import load_settings

    (sts,) = by_kind("StatefulSet")
    pod = sts["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    assert c["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert c["livenessProbe"]["httpGet"]["path"] == "/healthz"
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    settings = load_settings_from_configmap()
    assert ports[c["livenessProbe"]["httpGet"]["port"]] == settings.metrics.port
    assert settings.metrics.host == "0.0.0.0", "probes and scrapes come from outside the pod"
    (claim,) = sts["spec"]["volumeClaimTemplates"]
    assert claim["metadata"]["name"] in {m["name"] for m in c["volumeMounts"]}
    assert claim["spec"]["accessModes"] == ["ReadWriteOnce"]
    # SIGTERM: finish the batch, wait out a flush (flush_timeout_s), checkpoint: the grace must cover it
    assert pod["terminationGracePeriodSeconds"] >= 2 * settings.engine.flush_timeout_s
    assert sts["spec"]["replicas"] <= settings.kafka.partitions, "replicas beyond the partition count idle"
    assert load_settings(None).kafka.topics == settings.kafka.topics


def load_settings_from_configmap():
    import tempfile
    from pathlib import Path

    from ktstream.config import load_settings

    (cm,) = [d for d in by_kind("ConfigMap") if d["metadata"]["name"] == "ktstream-config"]
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "ktstream.yaml"
        path.write_text(cm["data"]["ktstream.yaml"])
        return load_settings(path)


def _named(kind: str, name: str) -> dict:
    (doc,) = [d for d in by_kind(kind) if d["metadata"]["name"] == name]
    return doc


def test_trainer_and_archive_files_load_with_the_cli_loaders(tmp_path):
    from connectors.archive import ArchiveSettings
    from ktstream.config import KafkaSettings
    from ktstream.finetune.settings import TrainerSettings, section

    files = {"archive.yaml": _named("Secret", "ktstream-archive-config")["stringData"]["archive.yaml"],
             "trainer.yaml": _named("ConfigMap", "ktstream-trainer-config")["data"]["trainer.yaml"]}
    for key, sections in {"archive.yaml": {"kafka": KafkaSettings, "archive": ArchiveSettings},
                          "trainer.yaml": {"trainer": TrainerSettings}}.items():
        (tmp_path / key).write_text(files[key])
        for name, model in sections.items():
            section(tmp_path / key, name, model)
    assert section(tmp_path / "archive.yaml", "kafka", KafkaSettings).topics == load_settings_from_configmap().kafka.topics


def test_secrets_hold_placeholders_and_every_reference_resolves():
    secrets = {d["metadata"]["name"]: d for d in by_kind("Secret")}
    for secret in secrets.values():
        assert all("CHANGE-ME" in v for v in secret["stringData"].values()), "Secrets ship placeholders only"
    refs = []
    for doc in by_kind("StatefulSet") + by_kind("Deployment"):
        pod = doc["spec"]["template"]["spec"]
        for c in pod["containers"]:
            refs += [e["valueFrom"]["secretKeyRef"] for e in c.get("env", []) if "secretKeyRef" in e.get("valueFrom", {})]
        refs += [{"name": v["secret"]["secretName"], "key": i["key"]} for v in pod.get("volumes", [])
                 if "secret" in v for i in v["secret"].get("items", [])]
        refs += [{"name": v["secret"]["secretName"], "key": m["subPath"]} for v in pod.get("volumes", [])
                 if "secret" in v for c in pod["containers"] for m in c.get("volumeMounts", [])
                 if m["name"] == v["name"] and "subPath" in m]
    assert len(refs) >= 4
    for ref in refs:
        assert ref["name"] in secrets and ref["key"] in secrets[ref["name"]]["stringData"], ref


def test_service_selects_the_statefulset_and_exposes_metrics():
    (svc,) = by_kind("Service")
    (sts,) = by_kind("StatefulSet")
    assert svc["spec"]["clusterIP"] == "None" and sts["spec"]["serviceName"] == svc["metadata"]["name"]
    labels = sts["spec"]["template"]["metadata"]["labels"]
    assert svc["spec"]["selector"].items() <= labels.items()
    assert sts["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert [p["name"] for p in svc["spec"]["ports"]] == ["metrics"]
    (pm,) = by_kind("PodMonitor")
    assert pm["spec"]["podMetricsEndpoints"][0]["port"] == "metrics"
    annotations = sts["spec"]["template"]["metadata"]["annotations"]
    assert annotations["prometheus.io/scrape"] == "true" and annotations["prometheus.io/path"] == "/metrics"


def test_workloads_request_resources_and_claims_are_mounted():
    for doc in by_kind("StatefulSet") + by_kind("Deployment"):
        pod = doc["spec"]["template"]["spec"]
        for c in pod["containers"]:
            assert {"cpu", "memory"} <= set(c["resources"]["requests"]), f"{c['name']} has no requests"
        claims = {v["persistentVolumeClaim"]["claimName"] for v in pod.get("volumes", []) if "persistentVolumeClaim" in v}
        assert claims <= {d["metadata"]["name"] for d in by_kind("PersistentVolumeClaim")}


def test_every_replica_is_a_query_peer_under_its_advertised_name():
    """queries.peers lists each StatefulSet pod by its stable name behind the headless Service, and each pod
    advertises exactly that name, so a redirect from any pod reaches the owner."""
    (sts,) = by_kind("StatefulSet")
    (svc,) = by_kind("Service")
    settings = load_settings_from_configmap()
    name, service = sts["metadata"]["name"], sts["spec"]["serviceName"]
    assert svc["metadata"]["name"] == service and svc["spec"].get("clusterIP") == "None", "a headless Service"
    port = settings.metrics.port
    assert settings.queries.peers == [f"http://{name}-{i}.{service}:{port}" for i in range(sts["spec"]["replicas"])]
    env = {e["name"]: e for e in sts["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    names = list(env)
    assert names.index("POD_NAME") < names.index("KTSTREAM_QUERIES__ADVERTISED_URL"), "$(POD_NAME) is defined first"
    assert env["KTSTREAM_QUERIES__ADVERTISED_URL"]["value"] == f"http://$(POD_NAME).{service}:{port}"
