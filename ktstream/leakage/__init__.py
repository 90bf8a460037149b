"""The leakage gate: checks that nothing from the future, or from the answer itself, reaches a prediction.

``run_gate(model, data, config) -> GateReport`` runs every check (see
`ktstream.leakage.config.ALL_CHECKS`); training and promotion call it, and
``ktstream check-leakage`` runs it from the shell. docs/leakage.md explains the
checks, their bounds and the known-leaky designs each one catches.
"""

from ktstream.leakage.attention import attention_masking
from ktstream.leakage.config import ALL_CHECKS, GateConfig, GateData
from ktstream.leakage.expansion import (answer_repeat_warning, copied_answer_rows, data_label, interaction_groups,
                                       repeated_rows)
from ktstream.leakage.gate import run_gate
from ktstream.leakage.random_labels import null_bound, random_label_auc, with_random_labels
from ktstream.leakage.report import CheckResult, GateReport

__all__ = ["ALL_CHECKS", "CheckResult", "GateConfig", "GateData", "GateReport", "answer_repeat_warning",
           "attention_masking", "copied_answer_rows", "data_label", "interaction_groups", "null_bound", "random_label_auc", "repeated_rows", "run_gate",
           "with_random_labels"]
