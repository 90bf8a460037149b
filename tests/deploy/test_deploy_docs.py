"""The operator docs point at things that exist: relative links, deploy files, commands, alert names."""

from __future__ import annotations

import re

import pytest
from tests.deploy.deploy_support import DEPLOY, ROOT, load_yaml_docs

DOCS = ROOT / "docs"
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")
PATH = re.compile(r"`((?:deploy|ktstream|bench|configs|docs)/[\w./-]+)`")


@pytest.mark.parametrize("name,base", [("operations.md", DOCS), ("models.md", DOCS),
                                       ("README-deploy-section.md", ROOT)])  # the README section lands at the root
def test_links_and_paths_resolve(name, base):
    text = (DOCS / name).read_text(encoding="utf-8")
    links = [t for t in LINK.findall(text) if "://" not in t]
    assert links, f"{name} links to nothing"
    for target in links:
        assert (base / target).exists(), f"{name} links to {target}, which does not exist"
    for path in PATH.findall(text):
        assert (ROOT / path.rstrip(".")).exists(), f"{name} names {path}, which does not exist"


def test_operations_lists_every_alert():
    (rules,) = load_yaml_docs(DEPLOY / "prometheus" / "rules.yml")
    names = {r["alert"] for g in rules["groups"] for r in g["rules"]}
    text = (DOCS / "operations.md").read_text(encoding="utf-8")
    table = "\n".join(line for line in text.splitlines() if line.startswith("| KTStream"))
    missing = sorted(n for n in names if not re.search(rf"\b{n}\b", table))
    assert not missing, f"docs/operations.md's alert table leaves out {missing}"


def test_documented_commands_parse():
    """Every `ktstream ...` command line in the README section parses with the real CLI."""
    import shlex

    from ktstream.cli.main import build_parser

    text = (DOCS / "README-deploy-section.md").read_text(encoding="utf-8")
    lines = [ln.split("#")[0].strip() for ln in re.findall(r"^(ktstream [^\n]+)$", text, re.M)]
    assert len(lines) >= 3
    parser = build_parser()
    for line in lines:
        parser.parse_args(shlex.split(line)[1:])
