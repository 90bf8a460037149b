"""The operator docs point at things that exist: relative links, deploy files, commands, alert names."""

from __future__ import annotations

import re

import pytest
from tests.deploy.deploy_support import DEPLOY, ROOT, load_yaml_docs

DOCS = ROOT / "docs"
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")
PATH = re.compile(r"`((?:deploy|ktstream|bench|configs|docs|tests)/[\w./-]+)`")


@pytest.mark.parametrize("path", [DOCS / "operations.md", DOCS / "models.md", ROOT / "README.md"], ids=lambda p: p.name)
def test_links_and_paths_resolve(path):
    name, base = path.name, path.parent
    text = path.read_text(encoding="utf-8")
    links = [t for t in LINK.findall(text) if "://" not in t]
    assert links, f"{name} links to nothing"
    for target in links:
        assert (base / target).exists(), f"{name} links to {target}, which does not exist"
    for path in PATH.findall(text):
        assert (ROOT / path.rstrip(".")).exists(), f"{name} names {path}, which does not exist"


def test_every_invariant_names_tests_that_exist():
    text = (DOCS / "invariants.md").read_text(encoding="utf-8")
    sections = re.split(r"^## ", text, flags=re.M)[1:]
    assert len(sections) == 6, "docs/invariants.md must keep the six numbered invariants"
    for section in sections:
        paths = [p for p in PATH.findall(section) if p.startswith("tests/")]
        assert paths, f"invariant {section.splitlines()[0]!r} names no test"
        missing = [p for p in paths if not (ROOT / p.rstrip(".")).exists()]
        assert not missing, f"invariant {section.splitlines()[0]!r} names {missing}, which do not exist"


def test_operations_lists_every_alert():
    (rules,) = load_yaml_docs(DEPLOY / "prometheus" / "rules.yml")
    names = {r["alert"] for g in rules["groups"] for r in g["rules"]}
    text = (DOCS / "operations.md").read_text(encoding="utf-8")
    table = "\n".join(line for line in text.splitlines() if line.startswith("| KTStream"))
    missing = sorted(n for n in names if not re.search(rf"\b{n}\b", table))
    assert not missing, f"docs/operations.md's alert table leaves out {missing}"


def test_documented_commands_parse():
    """Every `ktstream ...` command line in the README parses with the real CLI."""
    import shlex

    from ktstream.cli.main import build_parser

    text = (ROOT / "README.md").read_text(encoding="utf-8")
    blocks = "\n".join(re.findall(r"^```bash\n(.*?)^```", text, re.M | re.S))
    lines = [ln.split("#")[0].strip() for ln in re.findall(r"^(ktstream [^\n]+)$", blocks, re.M)]
    assert len(lines) >= 3
    parser = build_parser()
    for line in lines:
        parser.parse_args(shlex.split(line)[1:])
