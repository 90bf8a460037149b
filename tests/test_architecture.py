"""The package layers written in pyproject.toml hold, and the serving process loads only its own code.

``lint-imports`` checks every import statement (function-level ones too) against the contracts in
``[tool.importlinter]``; the second test looks at what ``ktstream serve`` really loads, in a fresh
interpreter, since a contract cannot see imports made by name (the CLI's subcommands).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: Packages the serving process must not load: the trainer, the evaluation protocols, the leakage gate, the
#: fine-tuning run and its promotion, the reports.
NOT_SERVING = ("ktstream.training", "ktstream.evaluation", "ktstream.leakage", "ktstream.reports",
               "ktstream.finetune.finetune", "ktstream.finetune.promotion", "ktstream.finetune.scheduler")


def run_python(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)


def test_import_contracts_are_kept():
    done = run_python("from importlinter.cli import lint_imports\n"
                      "raise SystemExit(lint_imports(no_cache=True, no_logo=True))")
    assert done.returncode == 0, f"broken import contracts (pyproject.toml [tool.importlinter]):\n{done.stdout}"
    assert "0 broken" in done.stdout


def test_serving_process_loads_no_trainer_gate_or_reports():
    done = run_python("import json, sys\n"
                      "from ktstream.cli.main import main\n"  # runs up to reading its (missing) settings file
                      "assert main(['serve', '--config', 'no-such-settings.yaml']) == 1\n"
                      "ours = [m for m in sys.modules if m.split('.')[0] in ('ktstream', 'connectors')]\n"
                      "print(json.dumps(sorted(ours)))")
    assert done.returncode == 0, done.stderr
    loaded = json.loads(done.stdout)
    assert {"ktstream.cli.serve", "ktstream.service", "ktstream.engine.engine", "ktstream.state.wiring",
            "ktstream.finetune.watcher", "connectors.kafka.source"} <= set(loaded)
    unwanted = [m for m in loaded if m.startswith(NOT_SERVING)]
    assert not unwanted, f"ktstream serve loads {unwanted}"
