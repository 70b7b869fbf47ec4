import logging

import pytest
import torch


@pytest.fixture(autouse=True)
def _quiet_and_deterministic(request: pytest.FixtureRequest):
    # Unsupported-operator and tracer warnings (opcount's and fvcore's) would flood the output of
    # tests that do not read them; a test that takes ``caplog`` reads the log, so it stays on there.
    torch.manual_seed(0)
    quiet = "caplog" not in request.fixturenames
    if quiet:
        logging.disable(logging.WARNING)
    yield
    if quiet:
        logging.disable(logging.NOTSET)


def pytest_addoption(parser):
    parser.addoption(
        "--update-golden",
        action="store_true",
        default=False,
        help="rewrite tests/report/golden/*.txt from the current output (same as OPCOUNT_UPDATE_GOLDEN=1)",
    )


@pytest.fixture
def nothing_built(monkeypatch: pytest.MonkeyPatch) -> None:
    """Building a model fails the test: for mistakes the command must refuse before it builds."""
    from opcount.cli import models as cli_models

    def refuse(*args: object) -> None:
        raise AssertionError("a model was built")

    # opcount MODEL and opcount compare both look the loader up there
    monkeypatch.setattr(cli_models, "load", refuse)
