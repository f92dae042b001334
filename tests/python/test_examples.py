"""The examples under scripts/examples, run as a user runs them, against a real daemon."""

from __future__ import annotations

import http.server
import json
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any, Dict, List

import pytest

from batonproc import BIN_DIR, ROOT, Daemon

EXAMPLES = ROOT / "scripts" / "examples"


def run(*args: str, env: Dict[str, str] | None = None) -> subprocess.CompletedProcess:
    # The examples must not reach a real LLM from the tests: the stand-in is deterministic.
    clean = {k: v for k, v in os.environ.items() if k not in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "DEEPSEEK_API_KEY")}
    return subprocess.run(list(args), capture_output=True, text=True, timeout=120, env={**clean, **(env or {})})


def test_budget_allocation_overcommits_without_baton_and_not_with_it(daemon: Daemon) -> None:
    without = run(sys.executable, str(EXAMPLES / "budget_allocation" / "without_baton.py"))
    assert without.returncode == 0, without.stderr
    assert "total committed: $15,000 against a $10,000 budget" in without.stdout
    with_ = run(sys.executable, str(EXAMPLES / "budget_allocation" / "with_baton.py"), "--socket", str(daemon.socket))
    assert with_.returncode == 0, with_.stderr
    assert "total committed: $10,000 against a $10,000 budget" in with_.stdout
    assert "agent-b: conflict, agent-a wrote version 2 first; $2,000 left" in with_.stdout
    history = with_.stdout.split("history of")[1].splitlines()[1:]
    assert history == [
        "  version 1 by setup: remaining $10,000",
        "  version 2 by agent-a: remaining $2,000",
        "  version 3 by agent-b: remaining $0",
    ]


def test_order_processing_keeps_both_updates(daemon: Daemon) -> None:
    without = run(sys.executable, str(EXAMPLES / "order_processing" / "without_baton.py"))
    assert "LOST UPDATE" in without.stdout
    with_ = run(sys.executable, str(EXAMPLES / "order_processing" / "with_baton.py"), "--socket", str(daemon.socket))
    assert with_.returncode == 0, with_.stderr
    assert "both updates survived" in with_.stdout
    assert "'reserved': True" in with_.stdout and "'discount': 10" in with_.stdout
    assert "pricing-agent wrote 2 times" in with_.stdout


def test_dag_agents_run_the_four_node_dag_to_a_report(daemon: Daemon, tmp_path: Path) -> None:
    r = run(sys.executable, str(EXAMPLES / "dag_agents" / "run.py"), "--socket", str(daemon.socket), "--workdir", str(tmp_path))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "task completed" in r.stdout and "2 custom.file.written events" in r.stdout
    report = (tmp_path / "report.md").read_text()
    assert report.startswith("# why multi-agent systems need a coordination daemon\n")
    assert "Section A (the failure modes)" in report and "Section B (the mechanisms)" in report
    assert (tmp_path / "review.md").read_text().startswith("- both sections are on topic")
    # Every file was written under a lock that is free again, with an honest outcome.
    for key in ("file:sections/a.md", "file:sections/b.md", "file:review.md", "file:report.md"):
        status = daemon.call("ResourceLockStatus", {"resource_key": key})
        assert status["status"] == "available" and status["previous"]["outcome"] == "created", key


def test_paused_worker_late_write_is_refused_and_the_new_holders_report_stands(daemon: Daemon) -> None:
    done = run(sys.executable, str(EXAMPLES / "paused_worker" / "run.py"), "--socket", str(daemon.socket))
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines() == [
        "worker-a: claimed file:report.md (fencing token 1) and wrote draft 1",
        "worker-b: took file:report.md over once worker-a's lease expired (fencing token 2)",
        "worker-a: resumed, and its late draft 2 was refused: file:report.md is held by worker-b "
        "(fencing token 2); nothing was written",
        "worker-a: check_fence(1) says latest=False",
        "report: \"worker-b's report\" at version 2; its history:",
        "  version 1: 'draft 1' by worker-a",
        "  version 2: \"worker-b's report\" by worker-b",
    ], done.stdout
    status = daemon.call("ResourceLockStatus", {"resource_key": "file:report.md"})
    assert status["status"] == "available" and status["previous"]["owner"] == "worker-b"


def _transport_path(tmp_path: Path) -> str:
    """PATH for the shell example: the machine's own `nc -U -N` or socat when it has one;
    otherwise a stand-in `nc` (the same bytes over the same socket, in Python) so the
    example's logic is still exercised on a machine without either."""
    nc = shutil.which("nc")
    if shutil.which("socat") or (nc and "-N" in run(nc, "-h").stderr + run(nc, "-h").stdout):
        return os.environ["PATH"]
    shim = tmp_path / "bin" / "nc"
    shim.parent.mkdir()
    shim.write_text(
        f"#!{sys.executable}\n"
        "import socket, sys\n"
        "path = sys.argv[-1]\n"
        "s = socket.socket(socket.AF_UNIX)\n"
        "s.connect(path)\n"
        "s.sendall(sys.stdin.buffer.read())\n"
        "s.shutdown(socket.SHUT_WR)\n"
        "while chunk := s.recv(65536):\n"
        "    sys.stdout.buffer.write(chunk)\n"
    )
    shim.chmod(0o755)
    return f"{shim.parent}:{os.environ['PATH']}"


def test_shell_example_with_nc_counts_without_losing_an_increment(daemon: Daemon, tmp_path: Path) -> None:
    env = {"BATON_SOCKET_PATH": str(daemon.socket), "PATH": _transport_path(tmp_path)}
    script = str(EXAMPLES / "shell" / "count_with_lock.sh")
    clean = {k: v for k, v in os.environ.items()}
    procs = [
        subprocess.Popen([script, name, "10"], env={**clean, **env}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for name in ("left", "right")
    ]
    for p in procs:
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
        assert "added 10" in out
    final = daemon.call("Get", {"namespace": "shell-demo", "key": "counter"})
    assert (final["value"], final["version"]) == (20, 20)
    history = daemon.call("History", {"namespace": "shell-demo", "key": "counter", "limit": 100})["history"]
    assert sorted(h["value"] for h in history) == list(range(1, 21))
    # The baton CLI reads the same state.
    got = run(str(BIN_DIR / "baton"), "--socket", str(daemon.socket), "get", "shell-demo", "counter")
    assert got.stdout.strip() == "20"


class _FakeProvider(http.server.BaseHTTPRequestHandler):
    """Answers chat requests the way OpenAI/DeepSeek (choices) or Anthropic (content) do,
    echoing which model was asked, and records every request."""

    seen: List[Dict[str, Any]] = []

    def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        headers = {k.lower(): v for k, v in self.headers.items()}
        self.seen.append({"path": self.path, "headers": headers, "body": body})
        text = f"LLM({body['model']}) on: {body['messages'][0]['content'][:30]}"
        if self.path.endswith("/v1/messages"):
            answer: Dict[str, Any] = {"content": [{"type": "text", "text": text}]}
        else:
            answer = {"choices": [{"message": {"role": "assistant", "content": text}}]}
        data = json.dumps(answer).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.mark.parametrize(
    "key,base,path,model",
    [
        ("OPENAI_API_KEY", "OPENAI_BASE_URL", "/v1/chat/completions", "gpt-4o-mini"),
        ("DEEPSEEK_API_KEY", "DEEPSEEK_BASE_URL", "/chat/completions", "deepseek-chat"),
        ("ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL", "/v1/messages", "claude-3-5-haiku-latest"),
    ],
)
def test_dag_agents_call_the_configured_llm(
    daemon: Daemon, tmp_path: Path, key: str, base: str, path: str, model: str
) -> None:
    """With a provider's key set the agents call it (here a local stand-in for the
    provider's HTTP API, reached through its *_BASE_URL) and write what it answers."""
    _FakeProvider.seen = []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _FakeProvider)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}" + ("/v1" if key == "OPENAI_API_KEY" else "")
        r = run(
            sys.executable,
            str(EXAMPLES / "dag_agents" / "run.py"),
            "--socket",
            str(daemon.socket),
            "--workdir",
            str(tmp_path),
            env={key: "test-key", base: url},
        )
    finally:
        server.shutdown()
    assert r.returncode == 0, r.stdout + r.stderr
    assert len(_FakeProvider.seen) == 4  # two writers, the reviewer, the synthesiser
    for request in _FakeProvider.seen:
        assert request["path"] == path and request["body"]["model"] == model
        auth = request["headers"].get("authorization") or request["headers"].get("x-api-key")
        assert auth in ("Bearer test-key", "test-key")
    assert f"LLM({model}) on: Combine these sections" in (tmp_path / "report.md").read_text()


def test_build_slot_agents_coordinate_by_messages_and_a_shared_slot(daemon: Daemon) -> None:
    done = run(sys.executable, str(EXAMPLES / "build_slot" / "agents.py"), "--socket", str(daemon.socket))
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines == [
        "builder-a: building core in one of 2 slots",
        "builder-b: building cli in one of 2 slots",
        "builder-b reports cli: ok=True",
        "builder-a reports core: ok=True",
        "slot free again: available",
    ], done.stdout


def test_langgraph_thread_second_run_is_refused_then_resumes(daemon: Daemon) -> None:
    r = run(sys.executable, str(EXAMPLES / "langgraph_thread" / "run.py"), "--socket", str(daemon.socket))
    assert r.returncode == 0, r.stdout + r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == "run-a: took the thread, wrote the outline and is drafting (a slow model call)"
    assert lines[1].startswith("run-b: refused before writing anything: the thread is held by run-a/run-1 (since ")
    assert lines[2:] == [
        'run-b: waits for the thread (on_busy="wait")',
        "run-a: finished its run: run-a: outline, run-a: draft, run-a: review",
        "run-b: took the thread and resumes from run-a's checkpoint (3 log entries)",
        "run-b: finished its run: run-a: outline, run-a: draft, run-a: review, "
        "run-b: outline, run-b: draft, run-b: review",
    ], r.stdout
    # Both runs ended their hold: the thread is free, each lease released.
    locks = daemon.call("ListResourceLocks", {"prefix": "langgraph:thread/"})
    assert locks["locks"] == [] and locks["waiting"] == []


def test_agents_session_two_runners_share_one_history(daemon: Daemon) -> None:
    r = run(sys.executable, str(EXAMPLES / "agents_session" / "run.py"), "--socket", str(daemon.socket))
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.splitlines() == [
        "one history of 4 items for both runners:",
        "  assistant: Day 1: Lisbon. Day 2: Sintra.",
        "  assistant: Packing list: shoes, hat.",
        "  user: Plan two days in Portugal.",
        "  user: Write a packing list.",
        "a third runner continues it: its model saw 5 items and answered 'Both are planned.'",
    ], r.stdout
