"""Fixtures for the Python client, CLI and example tests: a real batond on a temporary
socket (the client is the one installed from ./clients/python into the test venv)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Iterator

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from batonproc import Daemon, running_daemon  # noqa: E402


@pytest.fixture
def daemon() -> Iterator[Daemon]:
    with running_daemon("baton-py-") as d:
        yield d
