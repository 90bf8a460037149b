"""The command line answers in sentences: every command's ``--help`` works and loads no torch; a wrong
invocation is one line ``ktstream: error: ...`` naming what to fix (exit 2 for usage, 1 for failures),
before any data is read; ``--debug`` shows the traceback; the options that mirror library defaults say
the same numbers."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from ktstream.cli.main import UsageError, build_parser, main
from tests.cli.toy import write_dkvmn

ROOT = Path(__file__).resolve().parents[2]
#: every command, and the subcommands of those that have them
HELP = [["archive"], ["check-leakage"], ["compare"], ["config-reference"], ["convert"], ["demo"], ["evaluate"],
        ["evaluate", "benchmark"], ["evaluate", "prequential"], ["explain"], ["replay"], ["report"], ["schema"],
        ["serve"], ["state"], ["study"], ["state", "inspect"], ["state", "export"], ["state", "import"], ["train"], ["trainer"]]


def test_every_command_is_in_the_help_test():
    from ktstream.cli import COMMANDS

    assert {c[0] for c in HELP} == set(COMMANDS)


@pytest.mark.parametrize("command", HELP, ids=" ".join)
def test_help_of_every_command(command, capsys):
    with pytest.raises(SystemExit) as done:
        main([*command, "--help"])
    assert done.value.code == 0
    text = capsys.readouterr().out
    assert text.startswith(f"usage: ktstream {' '.join(command)}")


def test_help_imports_no_command_and_no_torch():
    """``ktstream --help`` (and every command's own) in a fresh interpreter: no torch, no pydantic models of
    the engine; the top-level help imports no command module at all."""
    code = ("import json, sys\n"
            "from ktstream.cli.main import main\n"
            "def run(argv):\n"
            "    try:\n"
            "        main(argv)\n"
            "    except SystemExit:\n"
            "        pass\n"
            "run(['--help'])\n"
            "top = sorted(m for m in sys.modules if m.startswith('ktstream.cli.') and m not in "
            "('ktstream.cli.main',))\n"
            f"for c in {HELP!r}:\n"
            "    run([*c, '--help'])\n"
            "print(json.dumps({'top': top, 'torch': 'torch' in sys.modules, 'service': 'ktstream.service' in "
            "sys.modules}))\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    loaded = json.loads(done.stdout.strip().splitlines()[-1])
    assert loaded == {"top": [], "torch": False, "service": False}


def test_version(capsys):
    from importlib.metadata import version

    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0
    assert capsys.readouterr().out.strip() == f"ktstream {version('ktstream')}"


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    """Folders for the table: a DKVMN data set, an ambiguous one (no concept map), one with no test file,
    a settings file with a misspelt key."""
    base = tmp_path_factory.mktemp("cli")
    write_dkvmn(base / "toy")
    write_dkvmn(base / "plain", concept_map=False)
    (base / "half").mkdir()
    (base / "half" / "toy_train.csv").write_text((base / "toy" / "toy_train.csv").read_text())
    (base / "half" / "toy_qid_sid").write_text((base / "toy" / "toy_qid_sid").read_text())
    (base / "bad.yaml").write_text(yaml.safe_dump({"kafka": {"bootstrap_server": "x:9092"}}))
    return base


#: (argv with {toy} placeholders, exit status, text the one line must hold)
WRONG = [
    (["evalute"], 2, "invalid choice 'evalute' (did you mean 'evaluate'?)"),
    (["--bogus"], 2, "the following arguments are required: COMMAND"),
    (["evaluate", "benchmark", "--data", "{toy}/toy", "--bogus"], 2, "unrecognized arguments: --bogus"),
    (["evaluate", "benchmark", "--dataset", "dkvmn_statics201"], 2,
     "unknown data set 'dkvmn_statics201' (did you mean 'dkvmn_statics2011'?)"),
    (["evaluate", "benchmark", "--data", "{toy}/toy", "--model", "dtk"], 2,
     "unknown model family 'dtk' (did you mean 'dkt'?)"),
    (["evaluate", "benchmark", "--data", "{toy}/toy", "--model-arg", "hiden=3"], 2,
     "unknown --model-arg of dkt 'hiden' (did you mean 'hidden'?)"),
    (["evaluate", "benchmark", "--data", "{toy}/toy", "--model-arg", "hidden"], 2, "is not KEY=VALUE"),
    (["evaluate", "benchmark", "--data", "{toy}/toy", "--format", "dkvmm"], 2,
     "unknown format 'dkvmm' (did you mean 'dkvmn'?)"),
    (["evaluate", "benchmark", "--dataset", "dkvmn_statics2011", "--format", "dkvmn"], 2, "--format describes --data"),
    (["evaluate", "benchmark", "--data", "{toy}/toy", "--checkpoint", "x"], 2, "--checkpoint means a model to load"),
    (["evaluate", "benchmark", "--data", "{toy}/nowhere"], 1, "no such file or folder: {toy}/nowhere"),
    (["evaluate", "benchmark", "--data", "{toy}/plain"], 1, "looks like dkvmn or dkt-csv); give --format"),
    (["evaluate", "benchmark", "--data", "{toy}/half"], 2, "has no train/test split files for fold 1"),
    (["evaluate", "prequential", "--model", "dkt"], 2, "one of the arguments --dataset --data --events is required"),
    (["evaluate", "prequential", "--data", "{toy}/toy"], 2, "(format dkvmn) has no event times"),
    (["convert", "dkvmn", "{toy}/toy", "-o", "{toy}/x.jsonl"], 2, "is a folder; dkvmn reads files: name them"),
    (["convert", "dkvmn", "{toy}/toy/none.csv", "-o", "{toy}/x.jsonl"], 1, "input not found"),
    (["convert", "dkvmn", "{toy}/toy/toy_train.csv", "-o", "{toy}/x.csv"], 2, "must end in .jsonl or .parquet"),
    (["convert", "dkvmn", "{toy}/toy/toy_train.csv", "-o", "{toy}/x.jsonl", "--keep-repeated-rows"], 1,
     "takes no option ['keep_repeated_rows']"),
    (["serve", "--config", "{toy}/bad.yaml"], 1,
     "kafka.bootstrap_server: extra inputs are not permitted (did you mean 'bootstrap_servers'?)"),
    (["explain", "{toy}/e.jsonl", "--learner", "u"], 2, "one of the arguments --checkpoint --model is required"),
    (["train", "--train", "{toy}/a.jsonl", "-o", "{toy}/ckpt"], 2, "--train needs --valid"),
    (["train", "-o", "{toy}/ckpt"], 2, "name the data"),
    (["check-leakage", "--model", "dkt", "--train", "{toy}/a.jsonl"], 2,
     "give all three of --train, --valid and --test"),
    (["check-leakage", "--model", "dkt", "--data", "{toy}/toy", "--checks", "split_disjoin"], 2,
     "unknown check 'split_disjoin' (did you mean 'split_disjoint'?)"),
    (["check-leakage", "--run", "{toy}/nowhere"], 1, "run folder not found"),
    (["report", "{toy}/none.json"], 1, "input not found: {toy}/none.json"),
    (["demo", "--config", "{toy}/none.yaml"], 1, "settings file not found"),
]


@pytest.mark.parametrize("argv,status,message", WRONG, ids=[" ".join(a[:3]) + f" {i}" for i, (a, _, _) in
                                                            enumerate(WRONG)])
def test_wrong_invocation_is_one_line(argv, status, message, toy, capsys):
    fill = lambda s: s.replace("{toy}", str(toy))  # noqa: E731
    assert main([fill(a) for a in argv]) == status
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("ktstream: error: "), captured.err
    assert fill(message) in lines[0]
    assert "Traceback" not in captured.err + captured.out


def test_debug_shows_the_traceback(toy):
    with pytest.raises(UsageError, match="did you mean 'dkvmn_statics2011'"):
        main(["--debug", "evaluate", "benchmark", "--dataset", "dkvmn_statics201"])
    with pytest.raises(FileNotFoundError):
        main(["--debug", "report", str(toy / "none.json")])


def test_an_untrained_model_is_named_so(tmp_path, capsys):
    """``explain --model`` draws random weights: it says so on stderr (and in the figure's title)."""
    from ktstream.data.eventlog import write_jsonl
    from ktstream.data.simulate import simulate

    write_jsonl(simulate(n_learners=2, mean_length=12, seed=0), tmp_path / "e.jsonl")
    learner = json.loads((tmp_path / "e.jsonl").read_text().splitlines()[0])["learner_id"]
    assert main(["explain", str(tmp_path / "e.jsonl"), "--learner", learner, "--model", "sakt", "--model-arg", "dim=8",
                 "--model-arg", "heads=2", "-o", str(tmp_path / "a.png")]) == 0
    assert "random weights (it was never trained)" in capsys.readouterr().err
    assert (tmp_path / "a.png").stat().st_size > 0


def test_registered_help_is_the_listed_help():
    from ktstream.cli import COMMANDS

    parser = build_parser()
    choices = parser._subparsers._group_actions[0]._choices_actions  # noqa: SLF001 - argparse keeps them here
    assert {a.dest: a.help for a in choices} == COMMANDS


def test_written_out_defaults_are_the_library_defaults():
    """The options spell out defaults so that --help needs no torch; they must be the library's."""
    from connectors.datasets import CONVERTERS
    from ktstream.cli.check_leakage import GATE_DEFAULTS
    from ktstream.cli.options import FORMATS, TRAIN_DEFAULTS
    from ktstream.leakage import GateConfig
    from ktstream.training.trainer import TrainConfig

    assert TRAIN_DEFAULTS == {k: getattr(TrainConfig, k) for k in TRAIN_DEFAULTS}
    assert GATE_DEFAULTS == {k: getattr(GateConfig, k) for k in GATE_DEFAULTS}
    assert set(FORMATS) == {*CONVERTERS, "events"}


def test_one_meaning_per_option_name():
    """--checkpoint is read from (never written), every output path is -o/--out, --json and --output are gone."""
    parser = build_parser()
    seen: dict[str, set[str]] = {}

    def walk(p, prog):
        for action in p._actions:  # noqa: SLF001
            if isinstance(action, argparse._SubParsersAction):  # noqa: SLF001
                for name, child in action.choices.items():
                    walk(child, f"{prog} {name}")
            for option in action.option_strings:
                seen.setdefault(option, set()).add(prog)
                if option == "-o":
                    assert "--out" in action.option_strings, f"{prog}: -o is not --out"
                if option == "--checkpoint" and action.help != "==SUPPRESS==":
                    assert action.help.startswith("model to load"), f"{prog}: --checkpoint {action.help!r}"

    walk(parser, "ktstream")
    assert "--json" not in seen and "--output" not in seen, {k: seen.get(k) for k in ("--json", "--output")}
    for option in ("--checkpoint", "-o", "--dataset", "--data", "--threads", "--patience"):
        assert option in seen, option
    assert {"ktstream evaluate benchmark", "ktstream train"} <= seen["--threads"] & seen["--patience"]
