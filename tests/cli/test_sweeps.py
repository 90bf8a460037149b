"""The sweep files of bench/sweeps are run on a lent GPU machine whose lease is short: a line that
`compare` would refuse (an unknown option, data set or constructor argument) wastes the lease, so
every line is checked here, on the CPU, without data."""
from pathlib import Path

import pytest

from connectors.datasets.splits import DATASET_FORMATS
from ktstream.cli.compare import AS_GIVEN, family_grids, family_kwargs
from ktstream.cli.main import build_parser
from ktstream.models import create

SWEEPS = sorted((Path(__file__).parents[2] / "bench" / "sweeps").glob("*.txt"))


def sweep_lines():
    for path in SWEEPS:
        for line in path.read_text().splitlines():
            name, _, args = line.strip().partition(" ")
            if name and not name.startswith("#"):
                yield pytest.param(args.split(), id=f"{path.stem}:{name}")


def test_there_are_sweeps_to_check():
    assert list(sweep_lines())


@pytest.mark.parametrize("args", list(sweep_lines()))
def test_every_sweep_line_is_a_compare_run_whose_models_build(args):
    ns = build_parser().parse_args(["compare", *args, "--device", "cuda", "--threads", "1", "-o", "unused"])
    names = [n.removesuffix(AS_GIVEN) for n in ns.datasets.split(",")]
    assert set(names) <= set(DATASET_FORMATS), names
    models = ns.models.split(",")
    kwargs = family_kwargs(ns.model_arg, models)
    family_grids(ns.lr_grid, models, ns.lr)
    for model in models:
        config = create(model, n_items=10, n_concepts=10, **kwargs[model]).config()
        assert {k: config[k] for k in kwargs[model]} == kwargs[model]
