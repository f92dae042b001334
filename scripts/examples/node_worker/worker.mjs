#!/usr/bin/env node
// A Node worker taking DAG nodes from batond: a release pipeline of five nodes run by
// three worker loops, each on its own connection. Results flow from a node to the nodes
// that depend on it; a flaky step fails once and is retried; the packaging step writes
// its record under a lock, fenced, so a packager that lost the lock could not overwrite a
// newer one. No network, no model: the work is a stand-in.
//
//   npm install ./clients/typescript            # in your project (from the Baton checkout)
//   node worker.mjs [--socket PATH] [--workers N]
//
// Without --socket it finds batond as every client does: BATON_URL, else
// BATON_SOCKET_PATH, else $BATON_HOME/baton.sock, else ~/.baton/baton.sock.

import { parseArgs } from 'node:util';

import { Client } from 'baton-client';

const { values: args } = parseArgs({
  options: { socket: { type: 'string' }, workers: { type: 'string', default: '3' } },
});
const target = args.socket ? { socketPath: args.socket } : undefined;

const pipeline = [
  { id: 'fetch', payload: { sources: ['core', 'cli', 'docs'] } },
  { id: 'test-linux', dependencies: ['fetch'], payload: { os: 'linux' }, max_attempts: 2 },
  { id: 'test-macos', dependencies: ['fetch'], payload: { os: 'macos' } },
  { id: 'package', dependencies: ['test-linux', 'test-macos'] },
  { id: 'announce', dependencies: ['package'] },
];

const failedOnce = new Set();

/** What each node does: a stand-in for real work, shaped by what its dependencies gave. */
async function handle(client, node, worker) {
  const deps = node.dependency_results;
  switch (node.node_id) {
    case 'fetch':
      return { sources: node.payload.sources, fetched: node.payload.sources.length };
    case 'test-linux':
    case 'test-macos': {
      // The first try on linux hits a flaky runner: the node fails and is retried.
      if (node.payload.os === 'linux' && !failedOnce.has(node.task_id)) {
        failedOnce.add(node.task_id);
        throw new Error('runner lost its network');
      }
      await client.commitEvent(node, 'node.progress', { os: node.payload.os, passed: deps.fetch.fetched * 10 });
      return { os: node.payload.os, passed: deps.fetch.fetched * 10, attempt: node.attempt };
    }
    case 'package': {
      const passed = deps['test-linux'].passed + deps['test-macos'].passed;
      // The artifact's record is written under the lock on the file, fenced by it.
      return client.withLock('file:dist/release.tar', async (lease) => {
        await client.set('release', 'artifact', { file: 'dist/release.tar', passed }, { fence: lease, updated_by: worker });
        lease.outcome = 'created';
        return { file: 'dist/release.tar', passed, fencing_token: lease.fencing_token };
      }, { owner: worker, ttl_secs: 30 });
    }
    case 'announce':
      return { text: `released ${deps.package.file} (${deps.package.passed} tests passed)` };
    default:
      throw new Error(`no handler for node ${node.node_id}`);
  }
}

const client = new Client(target);
try {
  const task = await client.registerTask('ship a release', pipeline);
  console.log(`registered task "ship a release": ${task.node_ids.length} nodes`);

  const workers = Array.from({ length: Number(args.workers) }, (_, i) => {
    const name = `node-worker-${i + 1}`;
    const own = new Client(target);
    return own
      .runWorker((node) => handle(own, node, name), { task_id: task.task_id, owner: name, ttl_secs: 30, wait_ms: 5_000 })
      .finally(() => own.close());
  });
  const handled = await Promise.all(workers);

  const status = await client.taskStatus(task.task_id);
  for (const node of status.nodes) {
    const retried = node.attempts > 1 ? ` after ${node.attempts} attempts` : '';
    console.log(`  ${node.node_id}: ${node.state}${retried} -> ${JSON.stringify(node.result)}`);
  }
  console.log(`task ${status.task.status}: ${status.counts.COMPLETED} of ${status.nodes.length} nodes, ${handled.reduce((a, b) => a + b, 0)} hand-outs to ${handled.length} workers`);
  const artifact = await client.get('release', 'artifact');
  const lock = await client.lockStatus('file:dist/release.tar');
  console.log(`release/artifact at version ${artifact.version}: ${JSON.stringify(artifact.value)}; file:dist/release.tar is ${lock.status}, last ${lock.previous.outcome}`);
} finally {
  client.close();
}
