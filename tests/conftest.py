import logging

import pytest
import torch


@pytest.fixture(autouse=True)
def _quiet_and_deterministic(caplog):
    torch.manual_seed(0)
    caplog.set_level(logging.ERROR, logger="opcount")
    yield
