"""A real batond on a temporary BATON_HOME, as the Python test suites and benchmarks use it."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any, Iterator, Sequence

ROOT = Path(__file__).resolve().parents[1]
BIN_DIR = Path(os.environ.get("BATON_BIN_DIR", ROOT / "target" / "debug"))


class Daemon:
    """A batond process on a temporary BATON_HOME."""

    def __init__(self, home: Path, args: Sequence[str] = ()) -> None:
        self.home = home
        self.socket = home / "baton.sock"
        self.log = open(home / "batond.log", "wb")
        self.proc = subprocess.Popen(
            [str(BIN_DIR / "batond"), "--home", str(home), *args],
            stdout=self.log,
            stderr=subprocess.STDOUT,
            env={**os.environ, "RUST_LOG": "warn"},
        )
        deadline = time.monotonic() + 60
        while True:
            try:
                if self.call("Health")["status"] == "ok":
                    return
            except OSError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"batond did not start: {(home / 'batond.log').read_text()}")
            time.sleep(0.01)

    def call(self, method: str, params: dict[str, Any] | None = None) -> Any:
        """One request on a fresh connection; returns the result (raises on an error)."""
        with socket.socket(socket.AF_UNIX) as s:
            s.connect(str(self.socket))
            s.sendall((json.dumps({"id": 1, "method": method, "params": params or {}}) + "\n").encode())
            answer = json.loads(s.makefile("rb").readline())
        if "error" in answer:
            raise RuntimeError(f"{method} failed: {answer['error']}")
        return answer["result"]

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=30)
        self.log.close()



@contextlib.contextmanager
def running_daemon(prefix: str = "baton-test-", args: Sequence[str] = ()) -> Iterator[Daemon]:
    """A Daemon for a `with` block (or a pytest fixture), stopped and removed after."""
    with tempfile.TemporaryDirectory(prefix=prefix) as home:
        d = Daemon(Path(home), args)
        try:
            yield d
        finally:
            d.stop()


def bridge_params(daemon_socket: Path, *extra: str) -> Any:
    """How the MCP SDK starts an mcp-bridge for `daemon_socket`."""
    from mcp import StdioServerParameters

    return StdioServerParameters(
        command=str(BIN_DIR / "mcp-bridge"),
        args=["--socket", str(daemon_socket), *extra],
        env={"PATH": os.environ.get("PATH", ""), "RUST_LOG": "warn"},
    )
