import logging

import pytest
import torch


@pytest.fixture(autouse=True)
def _quiet_and_deterministic(caplog):
    torch.manual_seed(0)
    caplog.set_level(logging.ERROR, logger="opcount")
    yield


def pytest_addoption(parser):
    parser.addoption(
        "--update-golden", action="store_true", default=False,
        help="rewrite tests/golden/*.txt from the current output (same as OPCOUNT_UPDATE_GOLDEN=1)",
    )
