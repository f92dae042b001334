// Versioned state through the client: get/set/delete/list/history/export/txn, update's
// retries under a real conflict, pipelining on one connection, and a reconnect after
// batond restarts.

import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';

import { Client, ConflictError, RetriesExhaustedError } from '../src/index.js';
import { Daemon } from './harness.mjs';

let daemon;
let c;
before(async () => {
  daemon = await Daemon.start();
  c = new Client(daemon.socket);
});
after(async () => {
  c?.close();
  await daemon?.remove();
});

test('set, get, delete and the versions they count', async () => {
  assert.equal(await c.get('st', 'missing'), null);
  const first = await c.set('st', 'budget', { usd: 10_000 }, { expected_version: 0, updated_by: 'setup' });
  assert.deepEqual([first.version, first.previous_version], [1, 0]);
  const rec = await c.get('st', 'budget');
  assert.deepEqual(rec.value, { usd: 10_000 });
  assert.equal(rec.version, 1);
  assert.equal(rec.updated_by, 'setup');
  assert.equal(rec.namespace, 'st');
  assert.ok(rec.updated_at && rec.revision >= 1);
  // A null value is a value.
  await c.set('st', 'nothing', null);
  assert.deepEqual(await c.get('st', 'nothing'), { ...(await c.get('st', 'nothing')), value: null });
  const gone = await c.delete('st', 'budget', { expected_version: 1 });
  assert.equal(gone.deleted, true);
  assert.equal(await c.get('st', 'budget'), null);
});

test('list pages in key order; history and export follow every page', async () => {
  for (let i = 0; i < 5; i++) await c.set('ls', `k${i}`, i);
  const page = await c.list('ls', { limit: 2 });
  assert.deepEqual(page.records.map((r) => r.key), ['k0', 'k1']);
  assert.equal(page.next, 'k1');
  const rest = await c.list('ls', { after: page.next });
  assert.deepEqual(rest.records.map((r) => r.value), [2, 3, 4]);
  assert.equal(rest.next, null);
  assert.deepEqual((await c.list('ls', { prefix: 'k3' })).records.map((r) => r.key), ['k3']);

  for (let v = 1; v <= 4; v++) await c.set('hist', 'k', v);
  const history = await c.history('hist', 'k');
  assert.deepEqual(history.map((h) => h.version), [4, 3, 2, 1]);
  assert.deepEqual((await c.history('hist', 'k', { limit: 2 })).map((h) => h.value), [4, 3]);

  const exported = await c.export('ls');
  assert.deepEqual(exported.map((r) => [r.namespace, r.key, r.value]), [0, 1, 2, 3, 4].map((i) => ['ls', `k${i}`, i]));
});

test('txn: all or nothing, and a failed compare names itself', async () => {
  await c.set('tx', 'a', 1, { expected_version: 0 });
  const done = await c.txn(
    [{ namespace: 'tx', key: 'a', version: 1 }],
    [
      { op: 'set', namespace: 'tx', key: 'a', value: 2 },
      { op: 'set', namespace: 'tx', key: 'b', value: 'new' },
    ],
    { updated_by: 'txn' },
  );
  assert.deepEqual(done.results.map((r) => [r.key, r.version]), [['a', 2], ['b', 1]]);
  const refused = await c.txn([{ namespace: 'tx', key: 'a', version: 1 }], [{ op: 'delete', namespace: 'tx', key: 'b' }]).catch((e) => e);
  assert.ok(refused instanceof ConflictError, String(refused));
  assert.equal(refused.code, 409);
  assert.equal(refused.failed.length, 1);
  assert.equal(refused.failed[0].key, 'a');
  assert.equal((await c.get('tx', 'b')).value, 'new');
});

test('update runs fn again on the value that won a real conflict', async () => {
  await c.set('up', 'counter', 0, { expected_version: 0 });
  const other = new Client(daemon.socket);
  const seen = [];
  const result = await c.update('up', 'counter', async (n) => {
    seen.push(n);
    // The first time, another writer gets in between the read and the write.
    if (seen.length === 1) await other.set('up', 'counter', 100, { updated_by: 'other' });
    return n + 1;
  }, { updated_by: 'me' });
  other.close();
  assert.deepEqual(seen, [0, 100]);
  assert.equal(result.value, 101);
  assert.equal(result.version, 3);
  const history = await c.history('up', 'counter');
  assert.deepEqual(history.map((h) => [h.value, h.updated_by]), [[101, 'me'], [100, 'other'], [0, null]]);
});

test('concurrent updates from several clients lose no increment', async () => {
  const clients = Array.from({ length: 4 }, () => new Client(daemon.socket));
  let calls = 0;
  await Promise.all(
    clients.map(async (client) => {
      for (let i = 0; i < 15; i++) {
        await client.update('up', 'shared', (n) => {
          calls += 1;
          return (n ?? 0) + 1;
        }, { retries: 200 }); // four writers in a hot loop on one key: many conflicts
      }
    }),
  );
  for (const client of clients) client.close();
  const rec = await c.get('up', 'shared');
  assert.equal(rec.value, 60);
  assert.equal(rec.version, 60);
  assert.ok(calls >= 60);
});

test('update gives up after `retries` conflicts in a row', async () => {
  await c.set('up', 'hot', 0);
  const other = new Client(daemon.socket);
  const err = await c
    .update('up', 'hot', async (n) => {
      await other.set('up', 'hot', (n ?? 0) + 1000);
      return n + 1;
    }, { retries: 2 })
    .catch((e) => e);
  other.close();
  assert.ok(err instanceof RetriesExhaustedError, String(err));
  assert.equal(err.kind, 'retries_exhausted');
  assert.match(err.message, /3 attempts; retry later or raise retries/);
});

test('concurrent calls are pipelined on one connection and read their own writes', async () => {
  const pipelined = new Client(daemon.socket);
  const writes = Array.from({ length: 300 }, (_, i) => pipelined.set('pipe', `k${i % 10}`, i));
  const read = pipelined.get('pipe', 'k9');
  const answers = await Promise.all(writes);
  assert.equal(answers.length, 300);
  assert.deepEqual(answers.slice(0, 10).map((a) => a.version), Array(10).fill(1));
  assert.equal(answers[299].version, 30);
  // Sent after every write, answered after them: it sees the last one.
  assert.equal((await read).value, 299);
  const figures = await pipelined.metrics();
  assert.ok(figures.connections.open >= 1);
  pipelined.close();
});

test('values come back as sent, big and unicode', async () => {
  const value = { text: 'Ünïcødé ✓ 漢字 🚀'.repeat(1000), list: Array.from({ length: 2000 }, (_, i) => i), nested: { a: [{ b: null }] } };
  await c.set('big', 'v', value);
  assert.deepEqual((await c.get('big', 'v')).value, value);
});

test('a client reconnects by itself after batond restarts', async () => {
  const own = new Client(daemon.socket);
  await own.set('restart', 'k', 'before');
  await daemon.restart();
  assert.equal((await own.get('restart', 'k')).value, 'before');
  await own.set('restart', 'k', 'after');
  assert.equal((await own.get('restart', 'k')).version, 2);
  own.close();
});

test('a waiting call after batond restarts goes out on a new connection of its own', async () => {
  const own = new Client(daemon.socket);
  assert.equal((await own.readInbox(await own.register('waiter', { heartbeat_ms: 0 }), { wait_ms: 1 })).messages.length, 0);
  await daemon.restart();
  const agent = await own.register('waiter-2', { heartbeat_ms: 0 });
  const page = await own.readInbox(agent, { wait_ms: 1 });
  assert.deepEqual(page.messages, []);
  own.close();
});
