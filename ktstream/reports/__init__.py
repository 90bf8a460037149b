"""Reports for people: evaluation results as one HTML page, and the configuration reference.

``build_report(ReportInputs(...))`` is what ``ktstream report`` runs;
``config_reference()`` is what ``ktstream config-reference`` prints (and what
docs/configuration.md holds, checked by the tests).
"""

from ktstream.reports.config_reference import config_reference, write_schemas
from ktstream.reports.predictions import Predictions, recompute
from ktstream.reports.report import ReportInputs, build_report

__all__ = ["Predictions", "ReportInputs", "build_report", "config_reference", "recompute", "write_schemas"]
