"""A real batond on a temporary BATON_HOME, as the Python test suites and benchmarks use it."""

from __future__ import annotations

import atexit
import contextlib
import hashlib
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
        self.args = tuple(args)
        self.log = open(home / "batond.log", "ab")
        self._start()

    def _start(self) -> None:
        home, args = self.home, self.args
        env = {**os.environ, "RUST_LOG": "warn"}
        env.pop("BATON_DATABASE_URL", None)
        # With BATON_TEST_BACKEND=postgres, each daemon gets a fresh database on the
        # server at BATON_TEST_POSTGRES_URL (scripts/test finds or starts one).
        # A daemon started again on the same home finds its database again; every
        # database made is dropped when the tests end.
        if os.environ.get("BATON_TEST_BACKEND") == "postgres":
            database = "baton_py_" + hashlib.sha256(str(home.resolve()).encode()).hexdigest()[:32]
            if database not in _DATABASES:
                _postgres(f"CREATE DATABASE {database}")
                _DATABASES.add(database)
            env["BATON_DATABASE_URL"] = _database_url(database)
        self.proc = subprocess.Popen(
            [str(BIN_DIR / "batond"), "--home", str(home), *args],
            stdout=self.log,
            stderr=subprocess.STDOUT,
            env=env,
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

    def restart(self) -> None:
        """Stops batond and starts it again on the same home: the same socket and the same
        database (SQLite file, or the PostgreSQL database named after the home)."""
        self.proc.terminate()
        self.proc.wait(timeout=30)
        self._start()


_DATABASES: set[str] = set()


@atexit.register
def _drop_databases() -> None:
    for database in _DATABASES:
        _postgres(f"DROP DATABASE IF EXISTS {database} WITH (FORCE)")


def _server_url() -> str:
    url = os.environ.get("BATON_TEST_POSTGRES_URL", "")
    if not url or url == "none":
        raise RuntimeError("BATON_TEST_BACKEND=postgres needs BATON_TEST_POSTGRES_URL (scripts/test sets it)")
    return url


def _database_url(name: str) -> str:
    base = _server_url()
    return base[: base.rindex("/") + 1] + name


def _postgres(sql: str) -> None:
    """Runs one statement on the test server's own database, with psql."""
    subprocess.run(["psql", "-q", "-v", "ON_ERROR_STOP=1", _server_url(), "-c", sql], check=True, capture_output=True)



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
