"""The engine end to end on the embedded broker, serving Deep-IRT and ATKT: the run of
test_engine_broker (events of many learners over several partitions, prediction-only events, twin
learners, malformed records; the service until everything is consumed) and its checks, for each
of the two families."""

from __future__ import annotations

import pytest

from tests.engine import test_engine_broker as base
from tests.engine.test_engine_broker import (  # noqa: F401  (collected here, with this module's ``run``)
    test_exactly_one_prediction_per_valid_event, test_malformed_records_are_dead_lettered_with_reasons,
    test_prediction_only_events_do_not_change_later_predictions,
    test_predictions_equal_the_offline_replay_and_keep_per_learner_order)

pytestmark = pytest.mark.broker


@pytest.fixture(scope="module", params=[("deep-irt", "kafka-python"), ("atkt", "kafka-python")], ids=["deep-irt", "atkt"])
def run(request, broker, kit):
    return base.run.__wrapped__(request, broker, kit)
