"""Fixtures for the mcp-bridge end-to-end tests: a real batond on a temporary socket,
and bridge processes driven by the official MCP Python SDK."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Iterator

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from batonproc import Daemon, running_daemon  # noqa: E402


@pytest.fixture
def daemon() -> Iterator[Daemon]:
    with running_daemon("baton-mcp-") as d:
        yield d
