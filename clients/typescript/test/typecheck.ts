// Compiled (never run) by `tsc -p .` in test/types.test.mjs: what a TypeScript user
// writes against baton-client must type-check, and misuse must not.

import {
  Client,
  ConflictError,
  FencedError,
  LockBusyError,
  type BatonEvent,
  type BatonRecord,
  type Lease,
  type TaskNode,
  type wire,
} from 'baton-client';

async function usage(): Promise<void> {
  const c = new Client({ url: 'tls://coord.example:7420', token: 'baton_x', tlsCa: '/etc/ca.pem' });
  const local = new Client('/run/baton.sock');
  await local.connect();

  const got: BatonRecord<{ usd: number }> | null = await c.get<{ usd: number }>('campaign', 'budget');
  const written: wire.SetResult = await c.set('campaign', 'budget', { usd: 1 }, { expected_version: got?.version ?? 0 });
  written.previous_version satisfies number;
  const updated = await c.update<number>('campaign', 'budget', (usd) => (usd ?? 10_000) - 2_000, { updated_by: 'agent-b' });
  updated.version satisfies number;

  const health = await c.call('Health');
  health.status satisfies string;
  const raw = await c.call('Get', { namespace: 'a', key: 'b' });
  raw.found satisfies boolean;
  // @ts-expect-error: Get needs `key`
  await c.call('Get', { namespace: 'a' });
  // @ts-expect-error: not a param of Set
  await c.set('a', 'b', 1, { expected_verison: 1 });

  await c.withLock('file:src/lib.rs', async (lease: Lease) => {
    lease.signal satisfies AbortSignal;
    await c.set('docs', 'lib', 'text', { fence: lease });
    await c.set('docs', 'lib', 'text', { fence: lease.tokenFence });
    lease.outcome = 'modified';
  }, { ttl_secs: 30, wait_ms: 1000 });
  const lease = await c.lock('file:x', { owner: 'me' });
  lease.on('lost', (err) => err.kind satisfies string);
  await lease.release('created');
  {
    await using held = await c.lock('tool:cargo', { mode: 'shared' });
    held.fencing_token satisfies number;
  }

  try {
    await c.set('a', 'b', 1, { expected_version: 3 });
  } catch (err) {
    if (err instanceof FencedError) err.heldBy?.owner satisfies string | undefined;
    else if (err instanceof ConflictError) err.currentVersion satisfies number;
    else if (err instanceof LockBusyError) err.holders satisfies wire.HeldBy[];
  }

  const task = await c.registerTask('report', [{ id: 'draft' }, { id: 'review', dependencies: ['draft'] }]);
  task.task_id satisfies string;
  const handled: number = await c.runWorker(async (node: TaskNode) => ({ done: node.node_id, deps: node.dependency_results }), {
    task_id: task.task_id,
    ttl_secs: 30,
  });
  void handled;

  const agent = await c.register('reviewer', { role: 'reviews' });
  await c.send(agent, 'writer', { text: 'hi' }, { subject: 'hello' });
  for await (const message of c.inbox(agent)) {
    message.body satisfies unknown;
    await c.ack(agent, message.seq);
    break;
  }
  await agent.end();

  const sub = await c.subscribe({ namespace: 'campaign', types: ['kv.*'] }, { since_seq: 0 });
  for await (const event of sub) {
    event satisfies BatonEvent;
    event.seq satisfies number;
    break;
  }
  const { events, next_seq } = await c.readEvents(0, { types: ['kv.*'], limit: 10 });
  events satisfies BatonEvent[];
  next_seq satisfies number;
  c.close();
}
void usage;
