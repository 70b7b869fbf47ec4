import logging

import pytest
import torch


@pytest.fixture(autouse=True)
def _quiet_and_deterministic():
    # Unsupported-operator and tracer warnings (opcount's and fvcore's) would flood the output;
    # no test reads the log.
    torch.manual_seed(0)
    logging.disable(logging.WARNING)
    yield
    logging.disable(logging.NOTSET)


def pytest_addoption(parser):
    parser.addoption(
        "--update-golden",
        action="store_true",
        default=False,
        help="rewrite tests/golden/*.txt from the current output (same as OPCOUNT_UPDATE_GOLDEN=1)",
    )
