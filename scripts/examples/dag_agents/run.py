#!/usr/bin/env python3
"""Four agents write a short report as a DAG run by batond.

    writer-a ─┐
              ├─> reviewer ─> synthesiser
    writer-b ─┘

Worker agents (threads here; processes or machines work the same) take nodes with
AcquireNextNode, heartbeat them while they work, and complete them with a result that
the next node receives in `dependency_results`. Files they share under --workdir are
written under resource locks (`file:` and `dir:` locks see each other).

Each agent calls an LLM when OPENAI_API_KEY, ANTHROPIC_API_KEY or DEEPSEEK_API_KEY is
set, and a deterministic stand-in otherwise (so the example, and its test, run offline).

    python scripts/examples/dag_agents/run.py --workdir /tmp/report [--socket PATH] [--workers 3]
"""

from __future__ import annotations

import argparse
import json
import os
import threading
import urllib.request
from pathlib import Path
from typing import Any, Dict, List

from baton import Client, Node

TOPIC = "why multi-agent systems need a coordination daemon"

NODES: List[Dict[str, Any]] = [
    {"id": "writer-a", "name": "draft: the problem", "payload": {"section": "a", "angle": "the failure modes"}},
    {"id": "writer-b", "name": "draft: the remedy", "payload": {"section": "b", "angle": "the mechanisms"}},
    {"id": "reviewer", "name": "review both drafts", "dependencies": ["writer-a", "writer-b"]},
    {"id": "synthesiser", "name": "write the report", "dependencies": ["reviewer"]},
]


def llm(prompt: str, stand_in: str) -> str:
    """The first configured provider's answer, or `stand_in` when none is configured.
    OPENAI_BASE_URL, DEEPSEEK_BASE_URL and ANTHROPIC_BASE_URL point at other endpoints
    (a proxy, a compatible server), as the providers' own SDKs allow."""
    if os.environ.get("OPENAI_API_KEY"):
        base = os.environ.get("OPENAI_BASE_URL", "https://api.openai.com/v1")
        return _chat(f"{base}/chat/completions", os.environ["OPENAI_API_KEY"], "gpt-4o-mini", prompt)
    if os.environ.get("DEEPSEEK_API_KEY"):
        base = os.environ.get("DEEPSEEK_BASE_URL", "https://api.deepseek.com")
        return _chat(f"{base}/chat/completions", os.environ["DEEPSEEK_API_KEY"], "deepseek-chat", prompt)
    if os.environ.get("ANTHROPIC_API_KEY"):
        base = os.environ.get("ANTHROPIC_BASE_URL", "https://api.anthropic.com")
        body = {"model": "claude-3-5-haiku-latest", "max_tokens": 400, "messages": [{"role": "user", "content": prompt}]}
        request = urllib.request.Request(
            f"{base}/v1/messages",
            data=json.dumps(body).encode(),
            headers={
                "x-api-key": os.environ["ANTHROPIC_API_KEY"],
                "anthropic-version": "2023-06-01",
                "content-type": "application/json",
            },
        )
        with urllib.request.urlopen(request, timeout=120) as response:
            return str(json.load(response)["content"][0]["text"]).strip()
    return stand_in


def _chat(url: str, key: str, model: str, prompt: str) -> str:
    body = {"model": model, "messages": [{"role": "user", "content": prompt}], "max_tokens": 400}
    request = urllib.request.Request(
        url,
        data=json.dumps(body).encode(),
        headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=120) as response:
        return str(json.load(response)["choices"][0]["message"]["content"]).strip()


class Agents:
    """The handlers: one per node id; each returns the node's result."""

    def __init__(self, client: Client, workdir: Path, owner: str) -> None:
        self.client = client
        self.workdir = workdir
        self.owner = owner

    def write_file(self, relative: str, text: str, outcome: str = "modified") -> None:
        with self.client.lock(f"file:{relative}", owner=self.owner, ttl_secs=30, wait_ms=30_000) as lease:
            path = self.workdir / relative
            path.parent.mkdir(parents=True, exist_ok=True)
            lease.outcome = "created" if not path.exists() else outcome
            path.write_text(text + "\n")

    def __call__(self, node: Node) -> Dict[str, Any]:
        if node.node_id.startswith("writer-"):
            section, angle = node.payload["section"], node.payload["angle"]
            text = llm(
                f"Write one paragraph on {TOPIC}, focusing on {angle}.",
                f"Section {section.upper()} ({angle}): agents that share state without "
                f"versions, leases and a journal overwrite each other; {node.goal}.",
            )
            self.write_file(f"sections/{section}.md", text)
            self.client.commit_event(node, "custom.file.written", {"path": f"sections/{section}.md"})
            return {"path": f"sections/{section}.md", "words": len(text.split())}
        if node.node_id == "reviewer":
            # The whole folder, so no writer can change a section mid-review.
            with self.client.lock("dir:sections", owner=self.owner, ttl_secs=30, wait_ms=30_000):
                drafts = {
                    dep: (self.workdir / result["path"]).read_text().strip()
                    for dep, result in sorted(node.dependency_results.items())
                }
            notes = llm(
                "Review these drafts in three short bullet points:\n\n" + "\n\n".join(drafts.values()),
                "- both sections are on topic\n- section A states the problem, section B the remedy\n"
                f"- total length {sum(len(d.split()) for d in drafts.values())} words",
            )
            self.write_file("review.md", notes)
            return {"path": "review.md", "reviewed": sorted(drafts)}
        if node.node_id == "synthesiser":
            review = (self.workdir / node.dependency_results["reviewer"]["path"]).read_text().strip()
            sections = [(self.workdir / f"sections/{s}.md").read_text().strip() for s in ("a", "b")]
            body = llm(
                f"Combine these sections into a short report titled '{TOPIC}', taking the review into account.\n\n"
                + "\n\n".join(sections)
                + "\n\nReview:\n"
                + review,
                "\n\n".join(sections),
            )
            self.write_file("report.md", f"# {TOPIC}\n\n{body}")
            return {"path": "report.md"}
        raise ValueError(f"no agent for node {node.node_id}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", required=True, type=Path, help="where the agents write their files")
    parser.add_argument("--socket", help="batond's socket (default: BATON_SOCKET_PATH or ~/.baton/baton.sock)")
    parser.add_argument("--workers", type=int, default=3)
    args = parser.parse_args()
    args.workdir.mkdir(parents=True, exist_ok=True)
    with Client(args.socket) as c:
        task = c.register_task(f"a short report on {TOPIC}", NODES, context={"audience": "engineers"})
    task_id = task["task_id"]
    print(f"task {task_id}: {', '.join(task['node_ids'])}")
    handled: Dict[str, int] = {}

    def worker(index: int) -> None:
        owner = f"agent-{index}"
        with Client(args.socket) as c:
            handled[owner] = c.run_worker(Agents(c, args.workdir, owner), task_id=task_id, owner=owner, ttl_secs=30, wait_ms=30_000)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(args.workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    with Client(args.socket) as c:
        status = c.task_status(task_id)
        done, _ = c.read_events(0, task_id=task_id, types=["node.completed"])
        by = {e.node_id: e.actor for e in done}
        for n in status["nodes"]:
            print(f"  {n['node_id']:<12} {n['state']:<10} by {by.get(n['node_id'], '-'):<8} result {json.dumps(n['result'])}")
        written, _ = c.read_events(0, task_id=task_id, types=["custom.file.written"])
        print(f"journal: {len(written)} custom.file.written events from the writers")
        print(f"task {status['task']['status']}; report at {args.workdir / 'report.md'}")
    return 0 if status["task"]["status"] == "completed" else 1


if __name__ == "__main__":
    raise SystemExit(main())
