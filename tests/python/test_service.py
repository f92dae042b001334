"""scripts/install-service and the unit files, and batond under socket activation."""

from __future__ import annotations

import os
import plistlib
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Dict

from batonproc import BIN_DIR, ROOT


def install(home: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "HOME": str(home), "XDG_CONFIG_HOME": str(home / ".config")}
    return subprocess.run(
        [str(ROOT / "scripts" / "install-service"), "--bin-dir", str(BIN_DIR), "--no-enable", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )


def wait_for_socket(path: Path, proc: subprocess.Popen, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            with socket.socket(socket.AF_UNIX) as s:
                s.connect(str(path))
                s.sendall(b'{"id":1,"method":"Health"}\n')
                if b'"ok"' in s.makefile("rb").readline():
                    return
        except OSError:
            pass
        assert proc.poll() is None, "batond exited"
        assert time.monotonic() < deadline, "batond did not answer"
        time.sleep(0.02)


def test_systemd_install_writes_a_unit_that_runs_the_installed_daemon(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    r = install(home, "--manager", "systemd")
    assert r.returncode == 0, r.stderr
    bin_dir = home / ".local" / "bin"
    for name in ("batond", "baton", "mcp-bridge"):
        assert os.access(bin_dir / name, os.X_OK), name
    unit = (home / ".config" / "systemd" / "user" / "batond.service").read_text()
    assert f"ExecStart={bin_dir}/batond\n" in unit and "WantedBy=default.target" in unit
    assert "systemctl --user" in r.stdout and "PATH" in r.stdout
    if shutil.which("systemd-analyze"):
        check = subprocess.run(
            ["systemd-analyze", "verify", str(home / ".config" / "systemd" / "user" / "batond.service")],
            capture_output=True,
            text=True,
        )
        assert check.returncode == 0 and not check.stderr.strip(), check.stderr
    # Run exactly what the unit runs, with the user's HOME: the default socket comes up.
    exec_start = next(line for line in unit.splitlines() if line.startswith("ExecStart="))[len("ExecStart="):]
    env: Dict[str, str] = {"HOME": str(home), "PATH": os.environ["PATH"], "RUST_LOG": "warn"}
    daemon = subprocess.Popen(exec_start.split(), env=env, stderr=subprocess.PIPE)
    try:
        wait_for_socket(home / ".baton" / "baton.sock", daemon)
        health = subprocess.run([str(bin_dir / "baton"), "health"], env=env, capture_output=True, text=True)
        assert health.returncode == 0 and health.stdout.startswith("ok")
    finally:
        daemon.send_signal(signal.SIGTERM)
        assert daemon.wait(timeout=30) == 0
    # Socket activation adds the socket unit; uninstall removes both.
    r = install(home, "--manager", "systemd", "--socket-activation")
    socket_unit = (home / ".config" / "systemd" / "user" / "batond.socket").read_text()
    assert r.returncode == 0 and "ListenStream=%h/.baton/baton.sock" in socket_unit
    r = install(home, "--manager", "systemd", "--uninstall")
    assert r.returncode == 0
    assert not (home / ".config" / "systemd" / "user" / "batond.service").exists()
    assert not (home / ".config" / "systemd" / "user" / "batond.socket").exists()


def test_launchd_install_writes_a_valid_agent(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    r = install(home, "--manager", "launchd", "--prefix", str(tmp_path / "opt"))
    assert r.returncode == 0, r.stderr
    agent = home / "Library" / "LaunchAgents" / "dev.baton.batond.plist"
    plist = plistlib.loads(agent.read_bytes())
    assert plist["Label"] == "dev.baton.batond"
    assert plist["ProgramArguments"] == [str(tmp_path / "opt" / "bin" / "batond")]
    assert plist["StandardErrorPath"] == str(home / "Library" / "Logs" / "baton" / "batond.log")
    assert plist["RunAtLoad"] is True and plist["KeepAlive"] == {"SuccessfulExit": False}
    assert "launchctl bootstrap" in r.stdout
    assert install(home, "--manager", "launchd", "--uninstall").returncode == 0
    assert not agent.exists()
    assert install(home, "--manager", "upstart").returncode == 2


def test_socket_activation_serves_the_passed_socket_and_leaves_it_to_systemd(tmp_path: Path) -> None:
    """What systemd does for batond.socket: bind the socket, start batond with it as fd 3
    and LISTEN_PID/LISTEN_FDS set, and start it again on the same socket later."""
    path = tmp_path / "activated.sock"
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(path))
    listener.listen(16)

    def start() -> subprocess.Popen:
        def as_systemd_does() -> None:
            os.dup2(listener.fileno(), 3)
            os.environ["LISTEN_PID"] = str(os.getpid())
            os.environ["LISTEN_FDS"] = "1"

        return subprocess.Popen(
            [str(BIN_DIR / "batond"), "--home", str(tmp_path / "home")],
            preexec_fn=as_systemd_does,
            close_fds=False,
            stderr=subprocess.PIPE,
        )

    for _ in range(2):
        daemon = start()
        try:
            wait_for_socket(path, daemon)
            set_ = subprocess.run(
                [str(BIN_DIR / "baton"), "--socket", str(path), "set", "n", "k", "1"], capture_output=True
            )
            assert set_.returncode == 0
        finally:
            daemon.send_signal(signal.SIGTERM)
            assert daemon.wait(timeout=30) == 0
        assert daemon.stderr is not None and b"passed by systemd" in daemon.stderr.read()
        assert path.exists(), "the activated socket stays for systemd"
    listener.close()
    # The data outlived both activations.
    assert (tmp_path / "home" / "baton.db").exists()
