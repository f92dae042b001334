// Tasks through the client: worker loops finishing a DAG (results flowing to dependents,
// a failed attempt retried), node heartbeats on the test clock, and a worker whose fence
// was lost stopping instead of recording a result.

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { once } from 'node:events';

import { Client, FencedError, LeaseLostError, NotFoundError } from '../src/index.js';
import { Daemon } from './harness.mjs';

let daemon;
let c;
before(async () => {
  daemon = await Daemon.start({ clock: true });
  c = new Client(daemon.socket);
});
after(async () => {
  c?.close();
  await daemon?.remove();
});

test('two worker loops finish a diamond DAG; results reach the dependents; a failure is retried', async () => {
  const task = await c.registerTask(
    'write the report',
    [
      { id: 'plan', payload: { topic: 'baton' } },
      { id: 'a', dependencies: ['plan'], payload: { section: 'A' }, max_attempts: 2 },
      { id: 'b', dependencies: ['plan'], payload: { section: 'B' } },
      { id: 'report', dependencies: ['a', 'b'] },
    ],
    { context: { audience: 'ops' } },
  );
  assert.deepEqual(task.node_ids, ['plan', 'a', 'b', 'report']);
  let failedOnce = false;
  const byWorker = { w1: [], w2: [] };
  const handler = (owner) => async (node) => {
    byWorker[owner].push(node.node_id);
    assert.equal(node.goal, 'write the report');
    assert.deepEqual(node.task_context, { audience: 'ops' });
    if (node.node_id === 'a' && !failedOnce) {
      failedOnce = true;
      throw new TypeError('flaky model');
    }
    if (node.node_id === 'plan') return { outline: [node.payload.topic] };
    if (node.node_id === 'report') {
      return { text: `${node.dependency_results.a.text} + ${node.dependency_results.b.text}` };
    }
    return { text: `${node.payload.section} of ${node.dependency_results.plan.outline[0]} (attempt ${node.attempt})` };
  };
  const handled = await Promise.all([
    c.runWorker(handler('w1'), { task_id: task.task_id, owner: 'w1', ttl_secs: 30, wait_ms: 200 }),
    c.runWorker(handler('w2'), { task_id: task.task_id, owner: 'w2', ttl_secs: 30, wait_ms: 200 }),
  ]);
  assert.equal(handled[0] + handled[1], 5); // four nodes, one of them twice
  const status = await c.taskStatus(task.task_id);
  assert.equal(status.task.status, 'completed');
  assert.equal(status.counts.COMPLETED, 4);
  const report = status.nodes.find((n) => n.node_id === 'report');
  assert.deepEqual(report.result, { text: 'A of baton (attempt 2) + B of baton (attempt 1)' });
  const a = status.nodes.find((n) => n.node_id === 'a');
  assert.equal(a.attempts, 2);
  const { events } = await c.readEvents(0, { task_id: task.task_id, types: ['node.failed', 'node.retrying'] });
  assert.ok(events.length >= 1);
  assert.equal(JSON.stringify(events).includes('flaky model'), true);
  const listed = await c.listTasks({ status: 'completed' });
  assert.ok(listed.some((t) => t.task_id === task.task_id));
});

test('a node heartbeaten by the worker outlives its TTL on the test clock', async () => {
  const task = await c.registerTask('slow', [{ id: 'slow' }]);
  let release;
  const gate = new Promise((r) => (release = r));
  let started;
  const handed = new Promise((r) => (started = r));
  const run = c.runWorker(
    async (node) => {
      started(node);
      await gate;
      return 'done';
    },
    { task_id: task.task_id, owner: 'slowpoke', ttl_secs: 2, heartbeat_ms: 20 },
  );
  const heldNode = await handed;
  for (let i = 0; i < 4; i++) {
    await once(heldNode, 'heartbeat');
    await daemon.advance(1500);
  }
  release();
  assert.equal(await run, 1);
  assert.equal(heldNode.lost, false);
  assert.equal((await c.taskStatus(task.task_id)).task.status, 'completed');
});

test('a node whose lease lapsed is dropped, its handler told through signal; the node goes back to the queue', async () => {
  const task = await c.registerTask('lapse', [{ id: 'only', max_attempts: 3 }]);
  let first = true;
  const run = c.runWorker(
    async (node) => {
      if (!first) return 'second try';
      first = false;
      // Stalls until its heartbeat finds the lease gone.
      const gone = once(node, 'lost');
      await daemon.advance(5000);
      const [err] = await gone;
      assert.ok(err instanceof LeaseLostError);
      assert.ok(node.signal.aborted);
      return 'too late';
    },
    { task_id: task.task_id, owner: 'stalled', ttl_secs: 1, heartbeat_ms: 20, wait_ms: 100 },
  );
  assert.equal(await run, 2);
  const status = await c.taskStatus(task.task_id);
  assert.equal(status.nodes[0].result, 'second try');
  assert.equal(status.nodes[0].attempts, 2);
});

test('a worker fenced by a lock it lost stops at its next result; nothing is recorded', async () => {
  const task = await c.registerTask('fenced', [{ id: 'n1' }, { id: 'n2' }]);
  const lease = await c.lock('tool:deploy', { ttl_secs: 1, heartbeat_ms: 0 });
  await daemon.advance(2000);
  const err = await c
    .runWorker(() => 'result', { task_id: task.task_id, owner: 'fw', fence: lease, ttl_secs: 30 })
    .catch((e) => e);
  assert.ok(err instanceof FencedError, String(err));
  const status = await c.taskStatus(task.task_id);
  assert.equal(status.counts.COMPLETED, 0);
  assert.equal(status.counts.RUNNING, 1);
});

test('acquireNode, completeNode and failNode by hand; a stale lease is refused', async () => {
  const task = await c.registerTask('by hand', [{ id: 'x', max_attempts: 1 }, { id: 'y', dependencies: ['x'] }]);
  const node = await c.acquireNode({ task_id: task.task_id, owner: 'hand', ttl_secs: 30 });
  assert.equal(node.node_id, 'x');
  await c.commitEvent(node, 'node.progress', { pct: 50 });
  await c.heartbeatNode(node, { ttl_secs: 30 });
  const failed = await c.failNode(node, { reason: 'no' });
  assert.equal(failed.status, 'FAILED');
  const again = await c.completeNode(node, 'late').catch((e) => e);
  assert.equal(again.code, 410);
  assert.equal(await c.acquireNode({ task_id: task.task_id, owner: 'hand' }), null); // y waits for x, which failed
  const missing = await c.taskStatus('no-such-task').catch((e) => e);
  assert.ok(missing instanceof NotFoundError);
  await c.cancelTask(task.task_id).catch(() => {});
});
