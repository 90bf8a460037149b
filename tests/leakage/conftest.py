"""The gate tests run tiny models, where a second intra-op thread only adds synchronisation
(and, on a shared machine, waits): one thread while this package's tests run, restored after."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    saved = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(saved)
