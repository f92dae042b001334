"""The Python client ships `py.typed`: its hints, and the examples', must hold (mypy --strict)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from batonproc import ROOT

TARGETS = [str(ROOT / "clients" / "python" / "baton")] + sorted(
    str(p) for p in (ROOT / "scripts" / "examples").glob("*/*.py")
)


@pytest.mark.parametrize("target", TARGETS, ids=lambda t: t.split("/")[-2] + "/" + t.split("/")[-1])
def test_type_checks_strictly(target: str) -> None:
    r = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", "--cache-dir=/dev/null", target],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stdout + r.stderr
