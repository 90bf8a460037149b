"""The comparison table that README and docs/models.md show is the one docs/results.md measured: the same
table in both, every test AUC and coin-flip AUC equal to the converged run of docs/results.md's section
for that data set, and every serving-cost ratio equal to docs/performance.md's run of
bench/serving_cost.py."""

from __future__ import annotations

import re

from tests.deploy.deploy_support import ROOT

DOCS = ROOT / "docs"
#: the converged tables of docs/results.md ("at most 30 epochs, patience 3"), in the order they appear
CONVERGED_ORDER = ["fsai_f1tof3", "dkvmn_assist2015", "assist2009_akt_pid", "assist2009_akt_pid:as-given",
                   "dkvmn_statics2011", "cognitive_tutor_algebra_subset", "ednet_kt1_11users"]
#: the columns of the README's table, in order
TABLE_COLUMNS = ["assist2009_akt_pid", "assist2009_akt_pid:as-given", "dkvmn_assist2015", "dkvmn_statics2011",
                 "fsai_f1tof3", "cognitive_tutor_algebra_subset", "ednet_kt1_11users"]
NUMBER = re.compile(r"\d+\.\d+")


def tables(text: str) -> list[list[list[str]]]:
    """Every markdown table of ``text``: rows of stripped cells, header first, the rule row left out."""
    out, rows = [], []
    for line in [*text.splitlines(), ""]:
        if line.startswith("|"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if not all(set(c) <= set("-: ") for c in cells):
                rows.append(cells)
        elif rows:
            out, rows = [*out, rows], []
    return out


def converged() -> dict[str, dict[str, tuple[str, str]]]:
    """data set -> family -> (test AUC at up to 30 epochs, coin-flip AUC) from docs/results.md."""
    found = [t for t in tables((DOCS / "results.md").read_text(encoding="utf-8"))
             if len(t[0]) > 5 and t[0][2].startswith("at most 30 epochs") and t[0][5] == "coin flips"]
    assert len(found) == len(CONVERGED_ORDER), "docs/results.md's converged tables changed in number"
    return {name: {row[0]: (row[2].split()[0], row[5]) for row in t[1:]} for name, t in zip(CONVERGED_ORDER, found)}


def comparison_table(path) -> list[list[str]]:
    (table,) = [t for t in tables(path.read_text(encoding="utf-8")) if t[0][:2] == ["family", "assist2009 merged"]]
    return table


def test_readme_and_models_show_the_same_comparison_table():
    assert comparison_table(ROOT / "README.md") == comparison_table(DOCS / "models.md")


def test_every_cell_is_the_measured_converged_figure():
    measured = converged()
    table = comparison_table(ROOT / "README.md")
    families = [row[0].strip("`") for row in table[1:]]
    assert sorted(families) == sorted(measured["assist2009_akt_pid"]), "a family is missing from the table"
    for row in table[1:]:
        family = row[0].strip("`")
        for name, cell in zip(TABLE_COLUMNS, row[1:]):
            auc, coin = measured[name][family]
            numbers = NUMBER.findall(cell.replace("**", ""))
            assert numbers[0] == auc, f"{family} on {name}: the table says {cell}, docs/results.md {auc}"
            if name.endswith(":as-given"):
                assert numbers[1] == coin, f"{family} on {name}: coin flips {cell}, docs/results.md {coin}"


def test_serving_cost_ratios_are_the_benchmarks():
    text = (DOCS / "performance.md").read_text(encoding="utf-8")
    (bench,) = [t for t in tables(text) if t[0][:3] == ["family", "µs / event", "x dkt"]]
    ratio = {row[0].strip("`"): row[2] for row in bench[1:]}
    state = {row[0].strip("`"): row[3] for row in bench[1:]}
    table = comparison_table(ROOT / "README.md")
    cost, size = table[0].index("serving (x DKT)"), table[0].index("state / learner")
    for row in table[1:]:
        family = row[0].strip("`")
        assert row[cost] == ratio[family], f"{family}: serving {row[cost]}, docs/performance.md {ratio[family]}"
        assert row[size] == state[family], f"{family}: state {row[size]}, docs/performance.md {state[family]}"
