import pathlib
import sys

import pytest
import torch

import castscope

sys.path.insert(0, str(pathlib.Path(__file__).parent))

REPO = pathlib.Path(__file__).resolve().parents[2]


@pytest.fixture
def agent(tmp_path):
    """castscope attached with the shipped policies, detached afterwards."""
    with castscope.attached(events_path=tmp_path / "events.jsonl") as a:
        yield a


@pytest.fixture(autouse=True)
def _never_leave_attached():
    yield
    castscope.detach()
    assert not torch.is_autocast_enabled("cpu")


def pytest_report_header(config):
    return f"torch {torch.__version__}, cuda available: {torch.cuda.is_available()}"
