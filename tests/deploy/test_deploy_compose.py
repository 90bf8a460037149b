"""The compose stack, checked without a container engine: files it names exist, names agree with ktstream.

Every YAML and JSON file under deploy/ parses; the compose file's bind mounts
and build files exist; the topic-init container creates exactly the topics of
the default configuration; the config files it mounts load with
``ktstream.config.load_settings``; every ``KTSTREAM_*`` variable names a real
setting; and each ktstream command parses with the real CLI parser.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from tests.deploy.deploy_support import DEPLOY, ROOT, load_yaml_docs

COMPOSE = DEPLOY / "compose" / "docker-compose.yml"


@pytest.fixture(scope="module")
def compose() -> dict:
    (doc,) = load_yaml_docs(COMPOSE)
    return doc


def env_path_exists(name: str) -> bool:
    """KTSTREAM_KAFKA__SASL_PASSWORD -> settings field kafka.sasl_password exists."""
    from pydantic import BaseModel

    from ktstream.config import Settings

    assert name.startswith("KTSTREAM_"), name
    model: type[BaseModel] = Settings
    for part in name[len("KTSTREAM_"):].lower().split("__"):
        field = model.model_fields.get(part)
        if field is None:
            return False
        model = field.annotation if isinstance(field.annotation, type) and issubclass(field.annotation, BaseModel) else None
        if model is None:
            return True  # a leaf (dict-valued leaves such as kafka.consumer take no deeper names here)
    return False  # stopped at a section, not a value


def test_every_yaml_and_json_file_under_deploy_parses():
    files = sorted(p for p in DEPLOY.rglob("*") if p.suffix in (".yml", ".yaml", ".json"))
    assert len(files) >= 15, f"expected the whole deploy tree, found {len(files)} files"
    for path in files:
        if path.suffix == ".json":
            json.loads(path.read_text(encoding="utf-8"))
        else:
            assert load_yaml_docs(path), f"{path} is empty"


def test_bind_mounts_and_build_files_exist(compose):
    base = COMPOSE.parent
    mounts = 0
    for name, svc in compose["services"].items():
        for volume in svc.get("volumes", []):
            source = volume.split(":", 1)[0]
            if source.startswith("."):
                assert (base / source).exists(), f"service {name} mounts {source}, which does not exist"
                mounts += 1
        build = svc.get("build")
        if build:
            context = (base / build["context"]).resolve()
            assert (context / "pyproject.toml").is_file(), f"{name}: build context {context} is not the project root"
            assert (context / build["dockerfile"]).is_file(), f"{name}: no Dockerfile {build['dockerfile']}"
    assert mounts >= 7, "ktstream configs, prometheus.yml, rules.yml and grafana folders are bind-mounted"


def test_dockerfile_copies_existing_paths():
    text = (DEPLOY / "docker" / "Dockerfile").read_text()
    assert re.search(r"^FROM python:3\.11-slim", text, re.M)
    assert "torch==${TORCH_VERSION}" in text and "ARG TORCH_VERSION=2.13.0" in text
    copies = re.findall(r"^COPY (.+) \S+$", text, re.M)
    assert copies
    sources = [src for line in copies for src in line.split()]
    missing = [src for src in sources if not (ROOT / src).exists()]
    assert not missing, f"the Dockerfile copies {missing}, missing from the repository"


def test_topics_match_the_default_configuration(compose):
    from ktstream.config import Settings, load_settings

    defaults = Settings().kafka
    script = " ".join(compose["services"]["topics"]["command"])
    created = re.search(r"for topic in ([^;]+);", script).group(1).split()
    assert sorted(created) == sorted(defaults.topics.model_dump().values())
    mounted = load_settings(DEPLOY / "compose" / "ktstream.yaml").kafka
    assert mounted.topics == defaults.topics
    partitions = int(re.search(r"--partitions (\d+)", script).group(1))
    assert partitions == mounted.partitions, "the init container and the config disagree on partitions"
    assert "--replication-factor 1" in script  # one broker


def test_mounted_engine_config_loads_and_listens_outside_the_container(compose):
    from ktstream.config import load_settings

    s = load_settings(DEPLOY / "compose" / "ktstream.yaml")
    assert s.metrics.host == "0.0.0.0"
    assert s.kafka.bootstrap_servers.split(":")[0] in compose["services"]
    port = str(s.metrics.port)
    assert any(p.startswith(f"{port}:") for p in compose["services"]["ktstream"]["ports"])


def test_environment_variables_name_real_settings(compose):
    names = set()
    for svc in compose["services"].values():
        names |= {k for k in (svc.get("environment") or {}) if k.startswith("KTSTREAM_")}
    for path in (DEPLOY / "kubernetes").glob("*.yaml"):
        names |= set(re.findall(r"name: (KTSTREAM_\w+)", path.read_text()))
    assert {"KTSTREAM_KAFKA__BOOTSTRAP_SERVERS", "KTSTREAM_KAFKA__SASL_PASSWORD"} <= names
    wrong = sorted(n for n in names if not env_path_exists(n))
    assert not wrong, f"these variables match no setting in ktstream.config.Settings: {wrong}"
    assert not env_path_exists("KTSTREAM_KAFKA__SASL_PASWORD")  # the check itself can fail


def test_prometheus_scrapes_the_compose_services(compose):
    (prom,) = load_yaml_docs(DEPLOY / "prometheus" / "prometheus.yml")
    targets = {t for job in prom["scrape_configs"] for sc in job["static_configs"] for t in sc["targets"]}
    for target in targets:
        host, port = target.split(":")
        assert host in compose["services"], f"prometheus scrapes {host}, not a compose service"
        published = compose["services"][host].get("ports", [])
        assert any(p.split(":")[-1] == port for p in published), f"{host} does not expose {port}"
    mounted = {v.split(":")[1] for v in compose["services"]["prometheus"]["volumes"] if v.startswith(".")}
    assert {f"/etc/prometheus/{f}" for f in prom["rule_files"]} <= mounted


def test_grafana_provisioning_points_at_the_mounted_dashboards(compose):
    (provider,) = load_yaml_docs(DEPLOY / "grafana" / "provisioning" / "dashboards" / "ktstream.yml")
    (datasource,) = load_yaml_docs(DEPLOY / "grafana" / "provisioning" / "datasources" / "prometheus.yml")
    mounts = dict(v.split(":")[:2] for v in compose["services"]["grafana"]["volumes"] if v.startswith("."))
    assert mounts["../grafana/dashboards"] == provider["providers"][0]["options"]["path"]
    assert "/etc/grafana/provisioning" in mounts.values()
    url = datasource["datasources"][0]["url"]
    assert url == "http://prometheus:9090" and "prometheus" in compose["services"]


def _commands() -> list[tuple[str, list[str]]]:
    """(where, argv) of every ktstream process the compose file and the Kubernetes manifests start."""
    (doc,) = load_yaml_docs(COMPOSE)
    out = [(f"compose:{name}", list(svc["command"])) for name, svc in doc["services"].items()
           if svc.get("image", "").startswith("ktstream")]
    for path in sorted((DEPLOY / "kubernetes").glob("*.yaml")):
        for d in load_yaml_docs(path):
            for c in d.get("spec", {}).get("template", {}).get("spec", {}).get("containers", []):
                out.append((f"{path.name}:{c['name']}", list(c["args"])))
    return out


@pytest.mark.parametrize("where,argv", _commands(), ids=[w for w, _ in _commands()])
def test_ktstream_command_parses_with_the_real_cli(where, argv):
    from ktstream.cli.main import build_parser

    parser = build_parser()
    registered = parser._subparsers._group_actions[0].choices  # noqa: SLF001 - argparse keeps them here
    assert argv[0] in registered, f"{where}: `ktstream {argv[0]}` is not a ktstream command"
    args = parser.parse_args(argv)
    assert args.config.startswith("/etc/ktstream/"), f"{where}: configs are mounted under /etc/ktstream"
    assert args.func is not None


def test_every_process_kind_is_deployed():
    kinds = {argv[0] for _, argv in _commands()}
    assert kinds == {"serve", "archive", "trainer"}


def _serve(path) -> None:
    from ktstream.config import load_settings

    load_settings(path)


LOADERS = {  # command -> how the CLI itself loads its --config file (the sections it must pass)
    "serve": _serve,
    "archive": lambda path: _sections(path, {"kafka": "ktstream.config:KafkaSettings",
                                             "archive": "connectors.archive:ArchiveSettings"}),
    "trainer": lambda path: _sections(path, {"trainer": "ktstream.finetune.settings:TrainerSettings"}),
}


def _sections(path, models: dict[str, str]):
    import importlib

    from ktstream.finetune.settings import read_sections, section

    assert set(models) <= set(read_sections(path)), f"{path} lacks one of the sections {sorted(models)}"
    for name, ref in models.items():
        module, cls = ref.split(":")
        section(path, name, getattr(importlib.import_module(module), cls))


def test_compose_config_files_load_with_the_cli_loaders(compose):
    checked = 0
    for name, svc in compose["services"].items():
        if not svc.get("image", "").startswith("ktstream"):
            continue
        target = svc["command"][svc["command"].index("--config") + 1]
        (source,) = [v.split(":")[0] for v in svc["volumes"] if v.split(":")[1] == target]
        LOADERS[svc["command"][0]](COMPOSE.parent / source)
        checked += 1
    assert checked == 3


def test_engine_config_keeps_secrets_out():
    text = (DEPLOY / "compose" / "ktstream.yaml").read_text()
    assert "sasl_password" not in text, "secrets go in KTSTREAM_KAFKA__SASL_PASSWORD, not the config file"


def test_grafana_admin_password_is_required_not_a_default(compose):
    """No admin/admin: compose refuses to start until GRAFANA_ADMIN_PASSWORD is set (``${VAR:?...}``)."""
    env = compose["services"]["grafana"]["environment"]
    password = env["GF_SECURITY_ADMIN_PASSWORD"]
    assert password.startswith("${GRAFANA_ADMIN_PASSWORD:?"), password
    assert "GRAFANA_ADMIN_PASSWORD" in (ROOT / "README.md").read_text(encoding="utf-8")


def test_trainer_healthcheck_asks_its_own_server(compose):
    trainer = compose["services"]["trainer"]
    check = " ".join(trainer["healthcheck"]["test"])
    (doc,) = load_yaml_docs(DEPLOY / "compose" / "trainer.yaml")
    assert f"127.0.0.1:{doc['trainer']['metrics_port']}/healthz" in check, check
